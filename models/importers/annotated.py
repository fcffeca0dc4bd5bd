"""harvardnlp/annotated-transformer (v2022 ``the_annotated_transformer.py``; the 2018 notebook has the same
keys; docs/checkpoint-formats.md#annotated).

A bare state dict: ``{src,tgt}_embed.0.lut`` (×√d), the interleaved ``{src,tgt}_embed.1.pe`` buffer,
``encoder.layers.N.{self_attn.linears.0-3, feed_forward.w_1/w_2, sublayer.0-1.norm}``, the decoder's
``src_attn`` and ``sublayer.0-2``, final ``encoder.norm``/``decoder.norm`` and ``generator.proj`` (its
``log_softmax`` changes no ranking; our logits are the projection's output). Pre-LN on q, k and v alike
(``x + sublayer(norm(x))`` feeds the normalised x to all three), ReLU, and its own LayerNorm
``a_2 · (x − mean) / (std + eps) + b_2`` with the unbiased std and eps 1e-6: reproduced exactly
(``norm_kind="unbiased_std"``). ``h`` is not in the file (``--set h=N``, ``make_model``'s name). The
vocabularies (``vocab.pt``, torchtext ``Vocab`` objects) are given as text files; specials
``<s> </s> <blank> <unk>`` = 0..3, and sources are framed ``<s> tokens </s>`` as its ``collate_batch`` does.
"""

from __future__ import annotations

from typing import Any

from ..nn.base import sinusoid_table
from ..nn.config import TransformerConfig
from ..text.tokenizers import WORD_SPLITS, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, find_state_dict, layer_count
from .vocabularies import WORD_TOKENIZATION, read_vocabularies, weight_rows
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import attention, both, fixed_positions, map_names, map_stacks

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=6)  # when detection asks this format (contract.py)
ANCHOR = "encoder.layers.0.self_attn.linears.0.weight"
ACCEPTED = {
    "h": "attention heads (make_model's h; default there 8)",
    "tokenize": f"how text becomes words: {', '.join(WORD_SPLITS)} (default punct, close to spaCy)",
    "src_bos": "start every source with <s> (default true, as its collate_batch)",
}
PROJECTIONS = {name: f"linears.{number}" for number, name in enumerate(("query", "key", "value", "output"))}
SPECIALS = (("bos", "<s>", 0), ("eos", "</s>", 1), ("pad", "<blank>", 2), ("unk", "<unk>", 3))  # its vocab.pt order


def _norm(ours: str, theirs: str) -> dict[str, str]:
    """Its LayerNorm's gain ``a_2`` and bias ``b_2``."""
    return {f"{ours}.weight": f"{theirs}.a_2", f"{ours}.bias": f"{theirs}.b_2"}


FEED_FORWARD = {**both("feed_forward.linear_in", "feed_forward.w_1"),
                **both("feed_forward.linear_out", "feed_forward.w_2")}
# sublayer.0 normalises self-attention, .1 the FFN (encoder) or cross-attention, .2 the FFN
ENCODER_LAYER = {**attention("self_attention", "self_attn.", PROJECTIONS),
                 **_norm("self_attention.norm", "sublayer.0.norm"), **FEED_FORWARD,
                 **_norm("feed_forward.norm", "sublayer.1.norm")}
DECODER_LAYER = {**ENCODER_LAYER, **attention("cross_attention", "src_attn.", PROJECTIONS),
                 **_norm("cross_attention.norm", "sublayer.1.norm"), **_norm("feed_forward.norm", "sublayer.2.norm")}


def claims(source: Source) -> bool:
    state = find_state_dict(source.payload) if source.path.is_file() else None
    return state is not None and ANCHOR in state and "src_embed.0.lut.weight" in state


def inspect(source: Source, settings: Settings) -> Inspection:
    state = find_state_dict(source.payload)
    if state is None or ANCHOR not in state:
        raise source.error(f"not an annotated-transformer state dict (no '{ANCHOR}' key)")
    inferred: dict[str, Any] = {
        "d_model": int(state[ANCHOR].shape[1]), "N": layer_count(state, "encoder.layers."),
        "d_ff": weight_rows(source, state, key="encoder.layers.0.feed_forward.w_1.weight", layout=NAME),
        "src_vocab": weight_rows(source, state, key="src_embed.0.lut.weight", layout=NAME),
        "tgt_vocab": weight_rows(source, state, key="tgt_embed.0.lut.weight", layout=NAME),
    }
    if "src_embed.1.pe" in state:
        inferred["max_len"] = int(state["src_embed.1.pe"].shape[1])
    inspection = Inspection(NAME, source.path, inferred, accepted=ACCEPTED)
    if not settings.has("h"):
        divisors = [n for n in range(1, 65) if inferred["d_model"] % n == 0]
        inspection.missing["h"] = f"N (one of {', '.join(map(str, divisors))})"
    for side in ("src", "tgt"):
        inspection.vocabularies[side] = "one token a line: vocab_src/vocab_tgt.get_itos() from its vocab.pt"
    inspection.found = state
    return inspection


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    state = inspection.found
    inspection.require(src_vocab, tgt_vocab)
    inferred = inspection.inferred
    src_tokens, tgt_tokens = read_vocabularies(source, src_vocab, tgt_vocab=tgt_vocab, src_rows=inferred["src_vocab"],
                                               tgt_rows=inferred["tgt_vocab"])
    specials = [{role: tokens.index(name) if name in tokens else default for role, name, default in SPECIALS}
                for tokens in (src_tokens, tgt_tokens)]
    if specials[0]["pad"] != specials[1]["pad"] or specials[0]["eos"] != specials[1]["eos"]:
        raise source.error("the source and target vocabularies put <blank> or </s> at different ids, which one "
                           "model config cannot express")
    heads, d_model = settings.value("h", int), inferred["d_model"]
    if heads < 1 or d_model % heads:
        raise source.error(f"h={heads} does not divide d_model={d_model}")
    config = TransformerConfig(
        arch="transformer-preln", src_vocab_size=inferred["src_vocab"], tgt_vocab_size=inferred["tgt_vocab"],
        d_model=d_model, heads=heads, d_ff=inferred["d_ff"], encoder_layers=inferred["N"],
        decoder_layers=layer_count(state, "decoder.layers."), max_len=min(inferred.get("max_len", 512), 512),
        norm_position="pre", final_norm=True, pre_norm_kv=True, layer_norm_eps=1e-6, norm_kind="unbiased_std",
        activation="relu", positions="interleaved", scale_embedding=True,
        pad_id=specials[1]["pad"], bos_id=specials[1]["bos"], eos_id=specials[1]["eos"], src_append_eos=True)

    def tokenizers() -> Tokenizers:
        split = settings.value("tokenize", str, "punct", choices=WORD_SPLITS)
        add_bos = settings.value("src_bos", bool, True)
        return Tokenizers(WordTokenizer(src_tokens, specials[0], split=split, add_bos=add_bos),
                          WordTokenizer(tgt_tokens, specials[1], split=split), WORD_TOKENIZATION)

    return Converted(config, state, weights_file=source.path, weights=lambda: _map_weights(source, state, config),
                     tokenizers=tokenizers,
                     provenance=Provenance(source.path, inferred, vocabularies={"src": src_vocab, "tgt": tgt_vocab}))


def _map_weights(source: Source, state: dict, config: TransformerConfig) -> WeightMap:
    weights = WeightMap(source, state, NAME)
    map_stacks(weights, config, {"encoder": ("encoder.layers.{layer}.", ENCODER_LAYER),
                                 "decoder": ("decoder.layers.{layer}.", DECODER_LAYER)})
    for side in ("encoder", "decoder"):
        map_names(weights, _norm(f"{side}_norm", f"{side}.norm"))
    for side in ("src", "tgt"):
        weights.copy(f"{side}_embedding.tokens.weight", f"{side}_embed.0.lut.weight")
        fixed_positions(weights, f"{side}_embed.1.pe", expected=sinusoid_table(config.max_len, config.d_model))
    map_names(weights, both("output", "generator.proj"))
    return weights
