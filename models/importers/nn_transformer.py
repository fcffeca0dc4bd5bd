"""The PyTorch tutorial "Language Translation with nn.Transformer" (``Seq2SeqTransformer``), and any model
with ``torch.nn.Transformer``'s key layout (docs/checkpoint-formats.md#nn-transformer).

Keys: ``transformer.{encoder,decoder}.layers.N.*`` (``in_proj_weight`` rows q | k | v), the final
``transformer.{encoder,decoder}.norm`` that ``nn.Transformer`` always adds, ``src_tok_emb.embedding``,
``tgt_tok_emb.embedding`` (×√E), ``generator`` and the interleaved ``positional_encoding.pos_embedding``.
The file does not say ``nhead`` or ``norm_first`` (the keys are identical either way), so they are asked
for, unless a trusted whole pickled model carries them. ``norm_first=True`` normalises q, k and v
(``pre_norm_kv``). The tutorial's vocabularies are not saved: one text file per side (one token a line),
specials found by name (``<unk> <pad> <bos> <eos>``) or given as ``UNK_IDX``.. like the tutorial's globals.
Sources are framed ``<bos> tokens <eos>`` as the tutorial's ``text_transform`` does.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..nn.base import sinusoid_table
from ..nn.config import TransformerConfig
from ..text.tokenizers import WORD_SPLITS, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, find_state_dict, layer_count, submodules
from .vocabularies import WORD_TOKENIZATION, read_vocabularies, special_id, weight_rows
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import From, both, fixed_positions, map_names, map_stacks

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=5)  # when detection asks this format (contract.py)
ANCHOR = "encoder.layers.0.self_attn.in_proj_weight"
ACCEPTED = {
    "nhead": "attention heads per layer (nn.Transformer's nhead)",
    "norm_first": "true for pre-LN layers, false for post-LN (nn.Transformer's default)",
    "layer_norm_eps": "LayerNorm epsilon (default 1e-5)",
    "activation": "relu (default) or gelu",
    "maxlen": "longest sequence, at most the stored position table (default: the table, at most 512)",
    "UNK_IDX": "id of <unk> (default: found by name, else 0)",
    "PAD_IDX": "id of <pad> (default: found by name, else 1)",
    "BOS_IDX": "id of <bos> (default: found by name, else 2)",
    "EOS_IDX": "id of <eos> (default: found by name, else 3)",
    "tokenize": f"how text becomes words: {', '.join(WORD_SPLITS)} (default punct, close to spaCy)",
    "src_bos": "start every source with <bos> (default true, as the tutorial's text_transform)",
}




def _attention(ours: str, theirs: str) -> dict[str, str | From]:
    """nn.MultiheadAttention packs q, k, v row-wise into one ``in_proj``."""
    names: dict[str, str | From] = {}
    for kind in ("weight", "bias"):
        for part, name in enumerate(("query", "key", "value")):
            names[f"{ours}.attention.{name}.{kind}"] = From(f"{theirs}.in_proj_{kind}",
                                                            lambda packed, part=part: packed.chunk(3, dim=0)[part])
    return {**names, **both(f"{ours}.attention.output", f"{theirs}.out_proj")}


FEED_FORWARD = {**both("feed_forward.linear_in", "linear1"), **both("feed_forward.linear_out", "linear2")}
ENCODER_LAYER = {**_attention("self_attention", "self_attn"), **both("self_attention.norm", "norm1"), **FEED_FORWARD,
                 **both("feed_forward.norm", "norm2")}
DECODER_LAYER = {**ENCODER_LAYER, **_attention("cross_attention", "multihead_attn"),
                 **both("cross_attention.norm", "norm2"), **both("feed_forward.norm", "norm3")}


def prefix_of(state: dict) -> str | None:
    for key in state:
        if key.endswith(ANCHOR) and key[: -len(ANCHOR)] + "decoder.layers.0.multihead_attn.in_proj_weight" in state:
            return key[: -len(ANCHOR)]
    return None


def claims(source: Source) -> bool:
    state = find_state_dict(source.payload) if source.path.is_file() else None
    return state is not None and prefix_of(state) is not None


def _from_module(payload: Any) -> dict[str, Any]:
    """``nhead``, ``norm_first``.. when the file is a (trusted) pickled model holding an nn.Transformer."""
    if not isinstance(payload, nn.Module):
        return {}
    for _, module in submodules(payload):
        if isinstance(module, nn.TransformerEncoderLayer):
            return _layer_settings(module)
    return {}


def _layer_settings(layer: nn.Module) -> dict[str, Any]:
    """What an unpickled ``nn.TransformerEncoderLayer`` says, read from the values it restored (nothing of its is
    called); a value missing or of another type says nothing."""
    values, children = vars(layer), vars(layer).get("_modules", {})
    attention, norm = children.get("self_attn"), children.get("norm1")
    found = {"nhead": vars(attention).get("num_heads") if isinstance(attention, nn.Module) else None,
             "norm_first": values.get("norm_first"),
             "layer_norm_eps": vars(norm).get("eps") if isinstance(norm, nn.Module) else None}
    kinds = {"nhead": int, "norm_first": bool, "layer_norm_eps": float}
    found = {key: value for key, value in found.items() if type(value) is kinds[key]}
    code = values.get("activation_relu_or_gelu")
    activation = {1: "relu", 2: "gelu"}.get(code) if type(code) is int else None
    return {**found, "activation": activation} if activation else found


def inspect(source: Source, settings: Settings) -> Inspection:
    state = find_state_dict(source.payload)
    prefix = prefix_of(state or {})
    if state is None or prefix is None:
        raise source.error(f"not an nn.Transformer state dict (no '{ANCHOR}' key)")
    encoder, decoder = prefix + "encoder.layers.", prefix + "decoder.layers."
    inferred: dict[str, Any] = {
        "emb_size": int(state[prefix + ANCHOR].shape[1]),
        "num_encoder_layers": layer_count(state, encoder),
        "num_decoder_layers": layer_count(state, decoder),
        "dim_feedforward": weight_rows(source, state, key=encoder + "0.linear1.weight", layout=NAME),
        "src_vocab_size": weight_rows(source, state, key="src_tok_emb.embedding.weight", layout=NAME),
        "tgt_vocab_size": weight_rows(source, state, key="tgt_tok_emb.embedding.weight", layout=NAME),
    }
    if "positional_encoding.pos_embedding" in state:
        inferred["maxlen"] = int(state["positional_encoding.pos_embedding"].shape[0])
    inferred.update(_from_module(source.payload))
    inspection = Inspection(NAME, source.path, inferred, accepted=ACCEPTED, found=state)
    emb = inferred["emb_size"]
    if "nhead" not in inferred and not settings.has("nhead"):
        divisors = [n for n in range(1, emb + 1) if emb % n == 0 and n <= 64]
        inspection.missing["nhead"] = f"N (one of {', '.join(map(str, divisors))})"
    if "norm_first" not in inferred and not settings.has("norm_first"):
        inspection.missing["norm_first"] = "true|false"
    for side in ("src", "tgt"):
        inspection.vocabularies[side] = "one token a line: the tutorial's vocab_transform[...].get_itos()"
    return inspection


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    inspection.require(src_vocab, tgt_vocab)
    inferred, state = inspection.inferred, inspection.found
    src_tokens, tgt_tokens = read_vocabularies(source, src_vocab, tgt_vocab=tgt_vocab,
                                               src_rows=inferred["src_vocab_size"],
                                               tgt_rows=inferred["tgt_vocab_size"])
    src_ids, tgt_ids = _specials(src_tokens, settings), _specials(tgt_tokens, settings)
    if src_ids["pad"] != tgt_ids["pad"] or src_ids["eos"] != tgt_ids["eos"]:
        raise source.error("the source and target vocabularies put <pad> or <eos> at different ids, which one "
                           "model config cannot express")
    config = _config(source, state, settings=settings, inferred=inferred, specials=tgt_ids)

    def tokenizers() -> Tokenizers:
        split = settings.value("tokenize", str, "punct", choices=WORD_SPLITS)
        add_bos = settings.value("src_bos", bool, True)
        return Tokenizers(WordTokenizer(src_tokens, src_ids, split=split, add_bos=add_bos),
                          WordTokenizer(tgt_tokens, tgt_ids, split=split), WORD_TOKENIZATION)

    return Converted(config, state, weights_file=source.path, weights=lambda: _map_weights(source, state, config),
                     tokenizers=tokenizers,
                     provenance=Provenance(source.path, inferred, vocabularies={"src": src_vocab, "tgt": tgt_vocab}))


def _config(source: Source, state: dict, settings: Settings, inferred: dict[str, Any],
            specials: dict[str, int | None]) -> TransformerConfig:
    nhead = settings.pick("nhead", int, inferred)
    norm_first = settings.pick("norm_first", bool, inferred)
    emb = inferred["emb_size"]
    if nhead < 1 or emb % nhead:
        raise source.error(f"nhead={nhead} does not divide emb_size={emb}")
    table_rows = inferred.get("maxlen")
    maxlen = settings.value("maxlen", int, min(table_rows or 512, 512))
    if table_rows is not None and maxlen > table_rows:
        raise source.error(f"maxlen={maxlen} is longer than the stored position table ({table_rows})")
    return TransformerConfig(
        arch="transformer-preln" if norm_first else "transformer-postln",
        src_vocab_size=inferred["src_vocab_size"], tgt_vocab_size=inferred["tgt_vocab_size"],
        d_model=emb, heads=nhead, d_ff=inferred["dim_feedforward"],
        encoder_layers=inferred["num_encoder_layers"], decoder_layers=inferred["num_decoder_layers"],
        max_len=maxlen, norm_position="pre" if norm_first else "post", final_norm=_final_norm(source, state),
        pre_norm_kv=True,  # norm_first normalises the input of q, k and v alike
        layer_norm_eps=settings.pick("layer_norm_eps", float, inferred=inferred, default=1e-5),
        activation=settings.pick("activation", str, inferred=inferred, default="relu", choices=("relu", "gelu")),
        positions="interleaved", scale_embedding=True,
        pad_id=specials["pad"], bos_id=specials["bos"], eos_id=specials["eos"], src_append_eos=True)


def _specials(tokens: list[str], settings: Settings) -> dict[str, int | None]:
    return {"unk": special_id(tokens, ("<unk>",), settings=settings, key="UNK_IDX", default=0),
            "pad": special_id(tokens, ("<pad>",), settings=settings, key="PAD_IDX", default=1),
            "bos": special_id(tokens, ("<bos>", "<s>", "<sos>"), settings=settings, key="BOS_IDX", default=2),
            "eos": special_id(tokens, ("<eos>", "</s>"), settings=settings, key="EOS_IDX", default=3)}


def _final_norm(source: Source, state: dict) -> bool:
    prefix = prefix_of(state)
    present = [prefix + f"{side}.norm.weight" in state for side in ("encoder", "decoder")]
    if present[0] != present[1]:
        raise source.error("a final norm on one stack only, which this conversion cannot express")
    return present[0]


def _map_weights(source: Source, state: dict, config: TransformerConfig) -> WeightMap:
    prefix = prefix_of(state)
    weights = WeightMap(source, state, NAME)
    map_stacks(weights, config, {"encoder": (prefix + "encoder.layers.{layer}.", ENCODER_LAYER),
                                 "decoder": (prefix + "decoder.layers.{layer}.", DECODER_LAYER)})
    if config.final_norm:
        for side in ("encoder", "decoder"):
            map_names(weights, both(f"{side}_norm", f"{prefix}{side}.norm"))
    map_names(weights, {"src_embedding.tokens.weight": "src_tok_emb.embedding.weight",
                        "tgt_embedding.tokens.weight": "tgt_tok_emb.embedding.weight", **both("output", "generator")})
    fixed_positions(weights, "positional_encoding.pos_embedding",
                    expected=sinusoid_table(config.max_len, config.d_model, "interleaved"))
    return weights
