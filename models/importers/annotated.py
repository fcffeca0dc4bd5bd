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
from .common import (
    WORD_TOKENIZATION, Inspection, Settings, Source, WeightMap, check_sinusoid, find_state_dict, layer_count,
    read_vocabularies, weight_rows,
)
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=6)  # when detection asks this format (contract.py)
ANCHOR = "encoder.layers.0.self_attn.linears.0.weight"
ACCEPTED = {
    "h": "attention heads (make_model's h; default there 8)",
    "tokenize": f"how text becomes words: {', '.join(WORD_SPLITS)} (default punct, close to spaCy)",
    "src_bos": "start every source with <s> (default true, as its collate_batch)",
}
PROJECTIONS = ("query", "key", "value", "output")  # linears.0-3
SPECIALS = (("bos", "<s>", 0), ("eos", "</s>", 1), ("pad", "<blank>", 2), ("unk", "<unk>", 3))  # its vocab.pt order


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
    for side, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        blocks = ["self_attn"] + (["src_attn"] if side == "decoder" else [])
        ours_blocks = ["self_attention"] + (["cross_attention"] if side == "decoder" else [])
        for index in range(count):
            theirs, ours = f"{side}.layers.{index}.", f"{side}_layers.{index}."
            for their_block, our_block in zip(blocks, ours_blocks):
                for number, name in enumerate(PROJECTIONS):
                    for kind in ("weight", "bias"):
                        weights.copy(f"{ours}{our_block}.attention.{name}.{kind}",
                                     f"{theirs}{their_block}.linears.{number}.{kind}")
            # sublayer.0 normalises self-attention, .1 the FFN (encoder) or cross-attention, .2 the FFN
            for number, our_block in enumerate([*ours_blocks, "feed_forward"]):
                _norm(weights, f"{ours}{our_block}.norm", f"{theirs}sublayer.{number}.norm")
            for kind in ("weight", "bias"):
                weights.copy(f"{ours}feed_forward.linear_in.{kind}", f"{theirs}feed_forward.w_1.{kind}")
                weights.copy(f"{ours}feed_forward.linear_out.{kind}", f"{theirs}feed_forward.w_2.{kind}")
        _norm(weights, f"{side}_norm", f"{side}.norm")
    for side in ("src", "tgt"):
        weights.copy(f"{side}_embedding.tokens.weight", f"{side}_embed.0.lut.weight")
        table = f"{side}_embed.1.pe"
        if weights.has(table):
            weights.ignore(table)
            check_sinusoid(source, state[table], expected=sinusoid_table(config.max_len, config.d_model), what=table)
    weights.copy("output.weight", "generator.proj.weight")
    weights.copy("output.bias", "generator.proj.bias")
    return weights


def _norm(weights: WeightMap, ours: str, theirs: str) -> None:
    weights.copy(f"{ours}.weight", f"{theirs}.a_2")  # gain
    weights.copy(f"{ours}.bias", f"{theirs}.b_2")
