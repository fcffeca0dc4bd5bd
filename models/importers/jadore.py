"""jadore801120/attention-is-all-you-need-pytorch (docs/checkpoint-formats.md#jadore).

``train.py`` saves ``{'epoch', 'settings': argparse.Namespace, 'model': state_dict}``. The keys of the
two versions in use are identical, the math is not:
- v2 (Nov 2019 - Jun 2020): pre-LN (LayerNorm on the attention query only, keys and values read the
  un-normalised input; LayerNorm before the FFN), the stack ``layer_norm`` after the last layer, logits
  ×d^-0.5 when the output projection is shared;
- v3 (Jun 2020 on): post-LN, the stack ``layer_norm`` on embedding + positions before the first layer, no
  final norm; ``scale_emb_or_prj`` (Jan 2021 on) = ``emb``: embedding ×√d, ``prj`` (default): logits ×d^-0.5,
  both only with ``proj_share_weight``.
``scale_emb_or_prj``, ``output_dir`` or ``use_tb`` in ``settings`` mean v3; otherwise the file is
ambiguous and ``--set norm=pre`` (v2) or ``--set norm=post`` (v3) is required. No q/k/v/fc biases,
LayerNorm eps 1e-6, interleaved sinusoids (the stored ``pos_table`` is checked). ``d_k`` ≠ ``d_v`` is
expressed exactly by zero-padding the heads to the larger size. v1 (2017-2019, ``tgt_word_emb`` keys and
Conv1d FFNs) is refused. Vocabularies (torchtext fields in the ``-data_pkl`` file) are given as text files
(one token a line) or, trusted, as that pickle itself; specials ``<blank> <unk> <s> </s>``, and sources are
framed ``<s> words </s>`` as its fields did in training.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..nn.base import sinusoid_table
from ..nn.config import TransformerConfig
from ..text.tokenizers import WORD_SPLITS, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, layer_count, saved_as_one, tensor_dict
from .vocabularies import WORD_TOKENIZATION, read_vocabularies, special_id, weight_rows
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import From, Names, both, fixed_positions, map_names, map_stacks

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=4)  # when detection asks this format (contract.py)
ANCHOR = "encoder.layer_stack.0.slf_attn.w_qs.weight"
V3_MARKERS = ("scale_emb_or_prj", "output_dir", "use_tb")
ACCEPTED = {
    "norm": "pre (v2 code, Nov 2019 - Jun 2020) or post (v3, Jun 2020 on)",
    "scale_emb_or_prj": "emb, prj or none (v3 only; implies norm=post)",
    "n_head": "attention heads", "d_k": "query/key size per head", "d_v": "value size per head",
    "proj_share_weight": "output projection tied to the target embedding",
    "embs_share_weight": "source and target embeddings are one",
    "src_pad_idx": "id of <blank> in the source vocabulary",
    "trg_pad_idx": "id of <blank> in the target vocabulary",
    "trg_bos_idx": "id of <s> (default: found by name, else 2)",
    "trg_eos_idx": "id of </s> (default: found by name, else 3)",
    "keep_case": "the data was not lower-cased (preprocess.py -keep_case; default false)",
    "tokenize": f"how text becomes words: {', '.join(WORD_SPLITS)} (default basic, or punct with keep_case)",
    "src_bos": "start every source with <s> (default true, as the torchtext fields did)",
}


def _split(payload: Any) -> tuple[dict[str, Tensor] | None, dict[str, Any]]:
    """train.py's ``{'settings': Namespace, 'model': state_dict}``, or a bare state dict."""
    if isinstance(payload, Mapping) and "model" in payload:
        settings = payload.get("settings")
        if isinstance(settings, argparse.Namespace):
            settings = vars(settings)
        return tensor_dict(payload["model"]), dict(settings) if isinstance(settings, Mapping) else {}
    return tensor_dict(payload), {}


def claims(source: Source) -> bool:
    if not source.path.is_file():
        return False
    state, _ = _split(source.payload)
    return state is not None and (ANCHOR in state or "decoder.tgt_word_emb.weight" in state)


def inspect(source: Source, settings: Settings) -> Inspection:
    state, options = _split(source.payload)
    if state is None or ANCHOR not in state:
        if state is not None and "decoder.tgt_word_emb.weight" in state:
            raise source.error("a jadore v1 checkpoint (2017-2019: tgt_word_emb, Conv1d FFN, learned position "
                               "rows), which this version does not import")
        raise source.error(f"not a jadore state dict (no '{ANCHOR}' key)")
    inferred = {key: options[key] for key in ("n_head", "d_k", "d_v", "proj_share_weight", "embs_share_weight",
                                              "scale_emb_or_prj", "src_pad_idx", "trg_pad_idx") if key in options}
    inferred.update({"d_model": int(state[ANCHOR].shape[1]), "n_layers": layer_count(state, "encoder.layer_stack."),
                     "d_inner_hid": weight_rows(source, state, key="encoder.layer_stack.0.pos_ffn.w_1.weight",
                                                layout=NAME),
                     "src_vocab_size": weight_rows(source, state, key="encoder.src_word_emb.weight", layout=NAME),
                     "trg_vocab_size": weight_rows(source, state, key="decoder.trg_word_emb.weight", layout=NAME)})
    if "encoder.position_enc.pos_table" in state:
        inferred["n_position"] = int(state["encoder.position_enc.pos_table"].shape[1])
    if any(marker in options for marker in V3_MARKERS):
        inferred["norm"] = "post"
    inspection = Inspection(NAME, source.path, inferred, accepted=ACCEPTED)
    if "norm" not in inferred and not settings.has("norm") and not settings.has("scale_emb_or_prj"):
        inspection.missing["norm"] = "pre|post (the file's settings cannot tell jadore's v2 pre-LN from v3 post-LN)"
    if "n_head" not in inferred and not settings.has("n_head"):
        inspection.missing["n_head"] = "N"
    for side in ("src", "tgt"):
        inspection.vocabularies[side] = "one token a line (the field's vocab.itos), or the -data_pkl file (trusted)"
    inspection.found = (state, options)
    return inspection


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    (state, _) = inspection.found
    inspection.require(src_vocab, tgt_vocab)
    inferred = inspection.inferred
    src_tokens, tgt_tokens = read_vocabularies(source, src_vocab, tgt_vocab=tgt_vocab,
                                               src_rows=inferred["src_vocab_size"],
                                               tgt_rows=inferred["trg_vocab_size"])
    src_specials, tgt_specials = _specials(source, src_tokens, tgt_tokens=tgt_tokens, settings=settings,
                                           inferred=inferred)
    config, d_k, d_v = _config(source, state, settings=settings, inferred=inferred, specials=tgt_specials)
    post = config.norm_position == "post"

    def tokenizers() -> Tokenizers:
        keep_case = settings.value("keep_case", bool, False)
        split = settings.value("tokenize", str, "punct" if keep_case else "basic", choices=WORD_SPLITS)
        add_bos = settings.value("src_bos", bool, True)
        return Tokenizers(WordTokenizer(src_tokens, src_specials, split=split, add_bos=add_bos),
                          WordTokenizer(tgt_tokens, tgt_specials, split=split), WORD_TOKENIZATION)

    return Converted(config, state, weights_file=source.path,
                     weights=lambda: _map_weights(source, state, config=config, d_k=d_k, d_v=d_v),
                     tokenizers=tokenizers,
                     provenance=Provenance(source.path, inferred, vocabularies={"src": src_vocab, "tgt": tgt_vocab},
                                           details={"version": "v3 (post-LN)" if post else "v2 (pre-LN)"}))


def _version(source: Source, settings: Settings, inferred: Mapping[str, Any]) -> tuple[str, str | None]:
    """``("pre", None)`` for v2; ``("post", scale_emb_or_prj)`` for v3."""
    scale = settings.pick("scale_emb_or_prj", str, inferred, choices=("emb", "prj", "none"))
    norm = settings.pick("norm", str, inferred, choices=("pre", "post")) or ("post" if scale else None)
    if norm == "pre" and settings.has("scale_emb_or_prj"):
        raise source.error("scale_emb_or_prj exists only in the post-LN (v3) code; drop it or use norm=post")
    if norm == "post" and scale is None:
        scale = settings.value("scale_emb_or_prj", str, "prj")  # train.py's default
    return norm, scale if norm == "post" else None


def _head_sizes(source: Source, state: Mapping[str, Tensor], settings: Settings,
                inferred: Mapping[str, Any]) -> tuple[int, int, int]:
    heads = settings.pick("n_head", int, inferred)
    query_rows = int(state[ANCHOR].shape[0])
    value_rows = int(state.get("encoder.layer_stack.0.slf_attn.w_vs.weight", state[ANCHOR]).shape[0])
    d_k = settings.pick("d_k", int, inferred=inferred, default=query_rows // heads)
    d_v = settings.pick("d_v", int, inferred=inferred, default=value_rows // heads)
    if heads * d_k != query_rows or heads * d_v != value_rows:
        raise source.error(f"n_head={heads}, d_k={d_k}, d_v={d_v} do not fit w_qs rows {query_rows} and w_vs rows "
                           f"{value_rows}")
    return heads, d_k, d_v


def _config(source: Source, state: Mapping[str, Tensor], settings: Settings, inferred: Mapping[str, Any],
            specials: dict) -> tuple[TransformerConfig, int, int]:
    norm, scale = _version(source, settings, inferred)
    heads, d_k, d_v = _head_sizes(source, state, settings=settings, inferred=inferred)
    share_proj = bool(settings.pick("proj_share_weight", bool, inferred=inferred, default=False))
    share_embs = bool(settings.pick("embs_share_weight", bool, inferred=inferred, default=False))
    post, d_model, head_dim = norm == "post", inferred["d_model"], max(d_k, d_v)
    config = TransformerConfig(
        arch="transformer-postln" if post else "transformer-preln",
        src_vocab_size=inferred["src_vocab_size"], tgt_vocab_size=inferred["trg_vocab_size"], d_model=d_model,
        heads=heads, d_head=head_dim if heads * head_dim != d_model else 0, d_ff=inferred["d_inner_hid"],
        encoder_layers=inferred["n_layers"], decoder_layers=layer_count(state, "decoder.layer_stack."),
        max_len=inferred.get("n_position", 200), norm_position=norm, final_norm=not post, pre_norm_kv=False,
        embedding_norm=post, layer_norm_eps=1e-6, activation="relu", positions="interleaved",
        # Both scalings exist only with a shared projection; v2 always scales the logits then.
        scale_embedding=share_proj and scale == "emb",
        logit_scale=d_model ** -0.5 if share_proj and scale in (None, "prj") else 1.0,
        share_embeddings=share_embs and saved_as_one(state, "encoder.src_word_emb.weight",
                                                     "decoder.trg_word_emb.weight"),
        tie_output=share_proj and saved_as_one(state, "trg_word_prj.weight", "decoder.trg_word_emb.weight"),
        attention_bias=False, output_bias=False,
        pad_id=specials["pad"], bos_id=specials["bos"], eos_id=specials["eos"], src_append_eos=True)
    return config, d_k, d_v


def _specials(source: Source, src_tokens: list[str], tgt_tokens: list[str], settings: Settings,
              inferred: Mapping[str, Any]) -> tuple[dict, dict]:
    sides = []
    for tokens, pad_key in ((src_tokens, "src_pad_idx"), (tgt_tokens, "trg_pad_idx")):
        pad = settings.pick(pad_key, int, inferred) if settings.has(pad_key) or pad_key in inferred \
            else special_id(tokens, ("<blank>", "<pad>"), settings=settings, key=pad_key, default=1)
        sides.append({"pad": int(pad), "unk": tokens.index("<unk>") if "<unk>" in tokens else None,
                      "bos": special_id(tokens, ("<s>",), settings=settings, key="trg_bos_idx", default=2),
                      "eos": special_id(tokens, ("</s>",), settings=settings, key="trg_eos_idx", default=3)})
    if sides[0]["pad"] != sides[1]["pad"] or sides[0]["eos"] != sides[1]["eos"]:
        raise source.error("the source and target vocabularies put <blank> or </s> at different ids, which one "
                           "model config cannot express")
    return sides[0], sides[1]


def _map_weights(source: Source, state: Mapping[str, Tensor], config: TransformerConfig, d_k: int,
                 d_v: int) -> WeightMap:
    weights = WeightMap(source, state, NAME)
    encoder_layer = {**_attention("self_attention", "slf_attn", heads=config.heads, d_k=d_k, d_v=d_v), **FEED_FORWARD}
    decoder_layer = {**encoder_layer, **_attention("cross_attention", "enc_attn", heads=config.heads, d_k=d_k, d_v=d_v)}
    map_stacks(weights, config, {"encoder": ("encoder.layer_stack.{layer}.", encoder_layer),
                                 "decoder": ("decoder.layer_stack.{layer}.", decoder_layer)})
    post = config.norm_position == "post"
    for side, ours in (("encoder", "src"), ("decoder", "tgt")):  # v3 normalises the embeddings, v2 the stack's end
        map_names(weights, both(f"{ours}_embedding.norm" if post else f"{side}_norm", f"{side}.layer_norm"))
        fixed_positions(weights, f"{side}.position_enc.pos_table",
                        expected=sinusoid_table(config.max_len, config.d_model))
    weights.token_tables(config, "encoder.src_word_emb.weight", target="decoder.trg_word_emb.weight",
                         output="trg_word_prj.weight")
    return weights


FEED_FORWARD = {**both("feed_forward.linear_in", "pos_ffn.w_1"), **both("feed_forward.linear_out", "pos_ffn.w_2"),
                **both("feed_forward.norm", "pos_ffn.layer_norm")}


def _attention(ours: str, theirs: str, *, heads: int, d_k: int, d_v: int) -> Names:
    """w_qs/w_ks/w_vs/fc without biases. With d_k ≠ d_v every head is zero-padded to ``max(d_k, d_v)``:
    padded key dims add 0 to q·k, padded value dims meet zero columns of ``fc``; when the keys grow, q is
    scaled by √(size/d_k) so q·k/√size stays q·k/√d_k."""
    size = max(d_k, d_v)

    def heads_padded(matrix: Tensor, per_head: int, scale: float = 1.0) -> Tensor:  # [H·d, E] → [H·size, E]
        blocks = matrix.reshape(heads, per_head, -1) * scale  # [H, d, E]
        padding = blocks.new_zeros(heads, size - per_head, blocks.shape[-1])
        return torch.cat([blocks, padding], dim=1).reshape(heads * size, -1)

    query_scale = math.sqrt(size / d_k)
    return {f"{ours}.attention.query.weight": From(f"{theirs}.w_qs.weight",
                                                   lambda w: heads_padded(w, d_k, query_scale)),
            f"{ours}.attention.key.weight": From(f"{theirs}.w_ks.weight", lambda w: heads_padded(w, d_k)),
            f"{ours}.attention.value.weight": From(f"{theirs}.w_vs.weight", lambda w: heads_padded(w, d_v)),
            f"{ours}.attention.output.weight": From(f"{theirs}.fc.weight", lambda w: heads_padded(w.t(), d_v).t()),
            **both(f"{ours}.norm", f"{theirs}.layer_norm")}
