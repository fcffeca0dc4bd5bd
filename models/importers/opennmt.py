"""OpenNMT-py 3.x checkpoints (docs/checkpoint-formats.md#opennmt).

Its trainer saves ``{'model': state dict without the generator, 'generator': {'weight', 'bias'}, 'vocab':
{'src': [tokens], 'tgt': [tokens], 'data_task', 'decoder_start_token'}, 'opt': argparse.Namespace,
'optim': ...}`` as ``<save_model>_step_N.pt``. Its Transformer (``encoder_type``/``decoder_type``
``transformer``) is pre-LN with q, k and v all reading the normalised input (``pre_norm_kv``), a LayerNorm after
each stack (eps ``norm_eps``, 1e-6), token vectors ×√d inside its position encoding, positions
``SinusoidalInterleaved`` (our ``interleaved``) or ``SinusoidalConcat`` (sines then cosines with frequencies
``10000^(-i/(d/2-1))``: our ``fairseq`` layout from row 0); the stored ``pe`` tables are checked, not loaded.
Biases of q/k/v/output exist with ``add_qkvbias`` (3.x default: none), of the feed-forward with
``add_ffnbias`` (3.x default: none; zeros here then, which is the same sum). The generator is a Linear
(``share_decoder_embeddings`` ties its weight to the target embedding); its log-softmax is applied by the
loss and the translator, so our logits are the Linear's output.

Its RNN (``encoder_type rnn``/``brnn``, ``decoder_type rnn``) with ``rnn_type`` LSTM or GRU and input feeding is
our ``rnn-luong`` (docs/architectures.md#rnn-luong): LSTM/GRU encoder (bidirectional: both halves concatenated),
stacked cells reading ``[embedding; previous attentional state]``, ``global_attention`` dot/general/mlp
after the step, attentional state ``tanh(W[c; h])`` (mlp: with a bias, no tanh) feeding the generator.

Text: OpenNMT-py reads pre-tokenised text split on spaces; sources are fed as they are (no ``<s>``, no
``</s>``), targets start with ``decoder_start_token`` (``<s>``) and end with ``</s>``. Subword transforms
(sentencepiece, BPE, onmt_tokenize) recorded in ``opt`` ran before the model saw the text: they are named
in the provenance, and the user tokenises the same way. ``coverage_attn`` changes no forward (its decoder never
passes the coverage to the attention; only the loss reads it): accepted, its ``linear_cover`` weight ignored.
Everything else OpenNMT-py can build (SRU cells, RNNs without input feeding or with bridges or context gates,
relative or rotary positions, average attention, RMSNorm, gated or MoE feed-forwards, copy attention, LoRA,
source features) is refused in one line naming the option.
"""

from __future__ import annotations

import argparse
import glob
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..nn.base import sinusoid_table
from ..nn.config import RNNConfig, TransformerConfig
from ..text.tokenizers import WORD_SPLITS, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, layer_count, read_safetensors, saved_as_one, tensor_dict
from .vocabularies import check_vocab_size, weight_rows
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import Names, Zeros, attention, both, fixed_positions, map_layers, map_names, map_stacks, recurrent

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=2)  # when detection asks this format (contract.py)
KEYS = ("model", "generator", "vocab", "opt")
ACCEPTED = {
    "tokenize": f"how typed text becomes tokens: {', '.join(WORD_SPLITS)} (default whitespace: OpenNMT-py reads "
                f"pre-tokenised text)",
}
ENCODER, DECODER = "encoder.transformer.", "decoder.transformer_layers."
SRC_EMBEDDING = "encoder.embeddings.make_embedding.emb_luts.0.weight"
TGT_EMBEDDING = "decoder.embeddings.make_embedding.emb_luts.0.weight"
PROJECTIONS = {"query": "linear_query", "key": "linear_keys", "value": "linear_values", "output": "final_linear"}
POSITIONS = {"SinusoidalInterleaved": "interleaved", "SinusoidalConcat": "fairseq"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}  # silu and gated-gelu are gated (a third matrix): refused
SUPPORTED = ("encoder_type/decoder_type transformer with sinusoidal positions, scaled-dot self-attention, "
             "standard LayerNorm and a relu/gelu feed-forward, and encoder_type rnn/brnn with decoder_type rnn: "
             "rnn_type LSTM/GRU, global_attention dot/general/mlp, input feeding")
RNN_CELLS = {"LSTM": ("lstm", 4), "GRU": ("gru", 3)}  # ours, and the gates a weight_hh stacks
RNN_ENCODERS = ("rnn", "brnn")


def _options(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    options = payload.get("opt")
    if isinstance(options, argparse.Namespace):
        return dict(vars(options))
    return dict(options) if isinstance(options, Mapping) else None


def weight_files(path: Path) -> list[Path]:
    """Where ``-save_format safetensors`` put the weights of ``<base>_step_N.pt``: ``<base>_step_N.safetensors``
    (or shards ``<base>_step_N.K.safetensors``)."""
    single = path.with_suffix(".safetensors")
    if single.is_file():
        return [single]
    return sorted(Path(found) for found in glob.glob(glob.escape(str(path.with_suffix(""))) + ".*.safetensors"))


def _ours(source: Source) -> bool:
    payload = source.payload
    if not isinstance(payload, Mapping) or "vocab" not in payload or "opt" not in payload:
        return False
    return all(key in payload for key in KEYS) or "model" not in payload  # -save_format safetensors


def claims(source: Source) -> bool:
    return source.path.is_file() and _ours(source)


def _state(source: Source, payload: Mapping[str, Any]) -> dict[str, Tensor]:
    """The model's weights and the generator's (as ``generator.*``) in one dict."""
    if "model" not in payload:  # -save_format safetensors: the whole state dict, generator included, beside it
        state: dict[str, Tensor] = {}
        files = weight_files(source.path)
        if not files:
            raise source.error(f"holds no weights (-save_format safetensors keeps them beside it, in "
                               f"{source.path.with_suffix('.safetensors').name}, which is missing)")
        for path in files:
            state.update(read_safetensors(path))
        return state
    model, generator = tensor_dict(payload["model"]), tensor_dict(payload["generator"])
    if model is None:
        raise source.error("its 'model' entry is not a state dict")
    if generator is None:
        if payload["generator"] is None:
            raise source.error("it has no generator weights (a LoRA checkpoint, saved without its base model), "
                               "which this version does not import")
        raise source.error("its 'generator' entry is not a state dict")
    if any(key.split(".")[0].isdigit() for key in generator):
        raise source.error("an OpenNMT-py 1.x/2.x checkpoint (generator keys 0.weight/0.bias, torchtext "
                           "vocabularies), which this version does not import; OpenNMT-py 3.x files are read")
    return {**model, **{f"generator.{key}": value for key, value in generator.items()}}


def _vocabularies(source: Source, payload: Mapping[str, Any]) -> tuple[list[str], list[str], dict[str, Any]]:
    vocab = payload["vocab"]
    if not isinstance(vocab, Mapping) or not all(isinstance(vocab.get(side), list) for side in ("src", "tgt")):
        raise source.error("its 'vocab' is not OpenNMT-py 3.x's {'src': [tokens], 'tgt': [tokens]} (1.x/2.x "
                           "torchtext fields are not read)")
    sides = []
    for side in ("src", "tgt"):
        tokens = vocab[side]
        if not tokens or not all(isinstance(token, str) for token in tokens):
            raise source.error(f"its '{side}' vocabulary is not a list of tokens")
        sides.append(list(tokens))
    if vocab.get("src_feats"):
        raise source.error(f"source features (src_feats vocabularies) are not supported; this version imports "
                           f"{SUPPORTED}")
    extra = {"data_task": vocab.get("data_task", "seq2seq"),
             "decoder_start_token": vocab.get("decoder_start_token", "<s>")}
    return sides[0], sides[1], extra


def _refuse_unsupported(source: Source, options: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    """One line naming the first option this version cannot express, and what it can."""
    def get(key: str, default: Any = None) -> Any:
        return options.get(key, default)

    def refuse(what: str) -> None:
        raise source.error(f"{what} is not supported; this version imports {SUPPORTED}")

    task = get("model_task", extra["data_task"])
    if task != "seq2seq" or extra["data_task"] != "seq2seq":
        refuse(f"model_task {task!r} (a language model)")
    encoder, decoder = get("encoder_type", "rnn"), get("decoder_type", "rnn")
    rnn = encoder in RNN_ENCODERS and decoder == "rnn"
    if not rnn and (encoder != "transformer" or decoder != "transformer"):
        refuse(f"encoder_type {encoder} / decoder_type {decoder}")
    checks: tuple = (
        ("copy_attn", lambda v: not v, "a copy generator"),
        ("lora_layers", lambda v: not v, "LoRA adapters"),
        ("lora_embedding", lambda v: not v, "LoRA embeddings"),
        ("n_src_feats", lambda v: not v, "source features"),
        ("generator_function", lambda v: v in (None, "softmax"), "a sparsemax generator"),
        ("quant_layers", lambda v: not v, "quantised layers"),
    )
    if rnn:
        checks += (
            ("rnn_type", lambda v: v in RNN_CELLS, "cells other than LSTM and GRU"),
            ("global_attention", lambda v: v in ("dot", "general", "mlp"), "attention other than dot/general/mlp"),
            ("global_attention_function", lambda v: v in (None, "softmax"), "sparsemax attention"),
            ("input_feed", lambda v: v in (None, 1, True), "a decoder without input feeding"),
            ("bridge", lambda v: not v, "a bridge between encoder and decoder states"),
            ("context_gate", lambda v: not v, "a context gate"),
            ("position_encoding", lambda v: not v, "positions added to RNN embeddings"),
            ("dec_layers", lambda v: v == get("enc_layers"), "decoder layers other than the encoder's"),
            ("tgt_word_vec_size", lambda v: v in (None, get("src_word_vec_size")),
             "source and target embeddings of different sizes"),
        )
    for key, fine, what in checks:
        if not fine(get(key)):
            refuse(f"{key} {get(key)!r} ({what})")
    if get("enc_hid_size", get("hidden_size")) != get("dec_hid_size", get("hidden_size")):
        refuse(f"enc_hid_size {get('enc_hid_size')} ≠ dec_hid_size {get('dec_hid_size')}")
    if not rnn:
        _refuse_unsupported_transformer(get, refuse)


def _refuse_unsupported_transformer(get: Callable[..., Any], refuse: Callable[[str], None]) -> None:
    """The options only a Transformer has (``get``: an option's value; ``refuse``: one line naming it)."""
    relative = get("max_relative_positions", 0)
    if relative:
        kind = {-1: "rotary", -2: "ALiBi"}.get(relative, "relative (Shaw et al.)")
        refuse(f"max_relative_positions {relative} ({kind} positions)")
    if get("relative_positions_buckets", 0):
        refuse(f"relative_positions_buckets {get('relative_positions_buckets')} (T5-style position buckets)")
    if not get("position_encoding", True):
        refuse("position_encoding false (no positions at all)")
    if get("position_encoding_type", "SinusoidalInterleaved") not in POSITIONS:
        refuse(f"position_encoding_type {get('position_encoding_type')}")
    checks = (
        ("self_attn_type", lambda v: v in (None, "scaled-dot", "scaled-dot-flash"), "average attention"),
        ("layer_norm", lambda v: v in (None, "standard"), "a norm other than LayerNorm"),
        ("pos_ffn_activation_fn", lambda v: v in (None, *ACTIVATIONS), "a gated feed-forward"),
        ("num_kv", lambda v: v in (None, 0, get("heads")), "grouped key/value heads"),
        ("parallel_residual", lambda v: not v, "parallel residuals"),
        ("num_experts", lambda v: not v, "a mixture of experts"),
        ("sliding_window", lambda v: not v, "a sliding attention window"),
    )
    for key, fine, what in checks:
        if not fine(get(key)):
            refuse(f"{key} {get(key)!r} ({what})")


def _transforms(options: Mapping[str, Any]) -> list[str]:
    """The data transforms the training text went through (global and per corpus), in order, once each."""
    found = list(options.get("transforms") or [])
    for corpus in (options.get("data") or {}).values():
        if isinstance(corpus, Mapping):
            found += list(corpus.get("transforms") or [])
    return [name for index, name in enumerate(found) if isinstance(name, str) and name not in found[:index]]


def _width(source: Source, state: Mapping[str, Tensor]) -> int:
    weight_rows(source, state, key=SRC_EMBEDDING, layout=NAME)  # present, else one line naming it
    return int(state[SRC_EMBEDDING].shape[-1])


def inspect(source: Source, settings: Settings) -> Inspection:
    payload = source.payload
    if not _ours(source):
        raise source.error(f"not an OpenNMT-py checkpoint (a dict with {', '.join(KEYS)}, or with vocab and opt "
                           f"beside its .safetensors weights)")
    options = _options(payload)
    if options is None:
        raise source.error("its 'opt' is not the training options (an argparse.Namespace)")
    state = _state(source, payload)
    src_tokens, tgt_tokens, extra = _vocabularies(source, payload)
    _refuse_unsupported(source, options, extra)
    inferred: dict[str, Any] = {
        "encoder_type": options.get("encoder_type"), "decoder_type": options.get("decoder_type"),
        "src_vocab_size": len(src_tokens), "tgt_vocab_size": len(tgt_tokens),
        "share_embeddings": bool(options.get("share_embeddings", False)),
        "share_decoder_embeddings": bool(options.get("share_decoder_embeddings", False)),
        "decoder_start_token": extra["decoder_start_token"],
    }
    if options.get("decoder_type") == "rnn":
        inferred.update({
            "rnn_type": options.get("rnn_type"), "global_attention": options.get("global_attention"),
            "input_feed": options.get("input_feed"), "word_vec_size": _width(source, state),
            "hidden_size": weight_rows(source, state, key="decoder.rnn.layers.0.weight_hh", layout=NAME)
                           // RNN_CELLS[options["rnn_type"]][1],
            "enc_layers": sum(f"encoder.rnn.weight_ih_l{n}" in state for n in range(len(state))),
            "dec_layers": layer_count(state, "decoder.rnn.layers."),
        })
    else:
        inferred.update({
            "hidden_size": _width(source, state),
            "heads": options.get("heads"), "enc_layers": layer_count(state, ENCODER),
            "dec_layers": layer_count(state, DECODER),
            "transformer_ff": weight_rows(source, state, key=f"{ENCODER}0.feed_forward.w_1.weight", layout=NAME),
            "position_encoding_type": options.get("position_encoding_type", "SinusoidalInterleaved"),
            "pos_ffn_activation_fn": options.get("pos_ffn_activation_fn", "relu"),
            "norm_eps": options.get("norm_eps", 1e-6),
            "add_qkvbias": f"{ENCODER}0.self_attn.linear_query.bias" in state,
            "add_ffnbias": f"{ENCODER}0.feed_forward.w_1.bias" in state,
        })
    transforms = _transforms(options)
    if transforms:
        inferred["transforms"] = transforms
    for key in ("src_subword_model", "tgt_subword_model"):
        if options.get(key):
            inferred[key] = str(options[key])
    return Inspection(NAME, source.path, inferred, accepted=ACCEPTED, found=(state, src_tokens, tgt_tokens))


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    if src_vocab or tgt_vocab:
        raise source.error("an OpenNMT-py checkpoint carries its own vocabularies; drop --src-vocab/--tgt-vocab")
    inspection = inspect(source, settings)
    state, src_tokens, tgt_tokens = inspection.found
    inferred = inspection.inferred
    check_vocab_size(source, src_tokens, rows=weight_rows(source, state, key=SRC_EMBEDDING, layout=NAME), side="src",
                     origin="its vocab['src']")
    check_vocab_size(source, tgt_tokens, rows=weight_rows(source, state, key=TGT_EMBEDDING, layout=NAME), side="tgt",
                     origin="its vocab['tgt']")
    src_specials, tgt_specials = _specials(source, src_tokens, tgt_tokens=tgt_tokens,
                                           start=inferred["decoder_start_token"])
    if inferred["decoder_type"] == "rnn":
        config: TransformerConfig | RNNConfig = _rnn_config(inferred, tgt_specials)
        weights = partial(_map_rnn_weights, source, state, config)
    else:
        config = _config(source, state, inferred=inferred, specials=tgt_specials)
        weights = partial(_map_weights, source, state, config=config, ffn_bias=inferred["add_ffnbias"])

    def tokenizers() -> Tokenizers:
        split = settings.value("tokenize", str, "whitespace", choices=WORD_SPLITS)
        transforms = inferred.get("transforms")
        tokenization = "whitespace-separated tokens of its vocabulary, as OpenNMT-py reads pre-tokenised text"
        if transforms:
            tokenization += f"; its training text went through the transforms {', '.join(transforms)}: give text " \
                            f"tokenised the same way"
        return Tokenizers(WordTokenizer(src_tokens, src_specials, split=split),
                          WordTokenizer(tgt_tokens, tgt_specials, split=split), tokenization)

    return Converted(config, state, weights_file=source.path, weights=weights, tokenizers=tokenizers,
                     provenance=Provenance(source.path, inferred,
                                           vocabularies={"src": "the checkpoint's vocab['src']",
                                                         "tgt": "the checkpoint's vocab['tgt']"}))


def _specials(source: Source, src_tokens: list[str], tgt_tokens: list[str], start: str) -> tuple[dict, dict]:
    """``<blank>`` pads, ``<unk>``, ``</s>`` ends, the decoder starts from ``decoder_start_token``."""
    sides = []
    for name, tokens in (("source", src_tokens), ("target", tgt_tokens)):
        missing = [token for token in ("<blank>", "</s>") if token not in tokens]
        if missing:
            raise source.error(f"the {name} vocabulary has no {' or '.join(missing)}")
        sides.append({"pad": tokens.index("<blank>"), "unk": tokens.index("<unk>") if "<unk>" in tokens else None,
                      "eos": tokens.index("</s>"), "bos": tokens.index("<s>") if "<s>" in tokens else None})
    if start not in tgt_tokens:
        raise source.error(f"decoder_start_token {start!r} is not in the target vocabulary")
    sides[1]["bos"] = tgt_tokens.index(start)
    if sides[0]["bos"] is None:  # never fed: OpenNMT-py's sources have no start token
        sides[0]["bos"] = sides[0]["eos"]
    if sides[0]["pad"] != sides[1]["pad"]:
        raise source.error("the source and target vocabularies put <blank> at different ids, which one model config "
                           "cannot express")
    return sides[0], sides[1]


def _config(source: Source, state: Mapping[str, Tensor], inferred: Mapping[str, Any],
            specials: dict) -> TransformerConfig:
    d_model, heads = inferred["hidden_size"], inferred["heads"]
    if not isinstance(heads, int) or heads < 1 or d_model % heads:
        raise source.error(f"heads={heads!r} does not divide hidden_size={d_model}")
    table = state.get("encoder.embeddings.make_embedding.pe.pe")
    return TransformerConfig(
        arch="transformer-preln", src_vocab_size=inferred["src_vocab_size"],
        tgt_vocab_size=inferred["tgt_vocab_size"], d_model=d_model, heads=heads, d_ff=inferred["transformer_ff"],
        encoder_layers=inferred["enc_layers"], decoder_layers=inferred["dec_layers"], dropout=0.1,
        max_len=int(table.shape[0]) if table is not None else 5000, norm_position="pre", final_norm=True,
        pre_norm_kv=True, layer_norm_eps=float(inferred["norm_eps"]),
        activation=ACTIVATIONS[inferred["pos_ffn_activation_fn"]],
        positions=POSITIONS[inferred["position_encoding_type"]], scale_embedding=True,
        share_embeddings=inferred["share_embeddings"] and saved_as_one(state, SRC_EMBEDDING, TGT_EMBEDDING),
        tie_output=inferred["share_decoder_embeddings"] and saved_as_one(state, "generator.weight", TGT_EMBEDDING),
        attention_bias=inferred["add_qkvbias"], output_bias=True, pad_id=specials["pad"], bos_id=specials["bos"],
        eos_id=specials["eos"], src_append_eos=False)


def _rnn_config(inferred: Mapping[str, Any], specials: dict) -> RNNConfig:
    """docs/architectures.md#rnn-luong: OpenNMT-py's RNN encoder and input-feeding decoder with GRUs."""
    return RNNConfig(
        arch="rnn-luong", src_vocab_size=inferred["src_vocab_size"], tgt_vocab_size=inferred["tgt_vocab_size"],
        hidden=inferred["hidden_size"], dropout=0.1, max_len=512, decoder_layers=inferred["dec_layers"],
        bidirectional=inferred["encoder_type"] == "brnn",
        embedding_size=inferred["word_vec_size"] if inferred["word_vec_size"] != inferred["hidden_size"] else 0,
        luong_score=inferred["global_attention"], rnn_cell=RNN_CELLS[inferred["rnn_type"]][0],
        pad_id=specials["pad"], bos_id=specials["bos"], eos_id=specials["eos"], src_append_eos=False)


def _map_rnn_weights(source: Source, state: Mapping[str, Tensor], config: RNNConfig) -> WeightMap:
    weights = WeightMap(source, state, NAME)
    directions = ("", "_reverse") if config.bidirectional else ("",)
    # as many encoder layers as decoder layers (dec_layers = enc_layers)
    map_layers(weights, recurrent("gru.{kind}_l{layer}{direction}", "rnn.{kind}_l{layer}{direction}", directions),
               ours="encoder.", theirs="encoder.", count=config.decoder_layers)
    map_layers(weights, recurrent("{kind}", "{kind}"), ours="decoder.cells.{layer}.",
               theirs="decoder.rnn.layers.{layer}.", count=config.decoder_layers)
    map_names(weights, {"encoder.embedding.weight": SRC_EMBEDDING, "decoder.embedding.weight": TGT_EMBEDDING,
                        **RNN_ATTENTION[config.luong_score], "decoder.combine.weight": "decoder.attn.linear_out.weight",
                        **both("decoder.output", "generator")})
    # coverage_attn builds this, but its input-feeding decoder never passes the coverage to the attention: only
    # the training loss reads the coverage, never a forward
    weights.ignore("decoder.attn.linear_cover.weight")
    return weights


# global_attention → the weights of its score (and of its attentional layer's bias, mlp's alone)
RNN_ATTENTION = {
    "dot": {},
    "general": {"decoder.query.weight": "decoder.attn.linear_in.weight"},
    "mlp": {**both("decoder.query", "decoder.attn.linear_query"),
            "decoder.key.weight": "decoder.attn.linear_context.weight", "decoder.score.weight": "decoder.attn.v.weight",
            "decoder.combine.bias": "decoder.attn.linear_out.bias"},
}


def _map_weights(source: Source, state: Mapping[str, Tensor], config: TransformerConfig,
                 ffn_bias: bool) -> WeightMap:
    weights = WeightMap(source, state, NAME)
    map_stacks(weights, config, {"encoder": (ENCODER + "{layer}.", _layer_names(config, "encoder", ffn_bias)),
                                 "decoder": (DECODER + "{layer}.", _layer_names(config, "decoder", ffn_bias))})
    for side in ("encoder", "decoder"):
        map_names(weights, both(f"{side}_norm", f"{side}.layer_norm"))
        fixed_positions(weights, f"{side}.embeddings.make_embedding.pe.pe",
                        expected=sinusoid_table(config.max_len, config.d_model, config.positions))
    weights.token_tables(config, SRC_EMBEDDING, target=TGT_EMBEDDING, output="generator.weight",
                         output_bias="generator.bias")
    return weights


def _layer_names(config: TransformerConfig, side: str, ffn_bias: bool) -> Names:
    """One layer: q/k/v/output biases with ``add_qkvbias``, the feed-forward's with ``add_ffnbias`` (else zeros,
    which add nothing)."""
    kinds = ("weight", "bias") if config.attention_bias else ("weight",)
    names: dict[str, str | Zeros] = {
        **attention("self_attention", "self_attn.", PROJECTIONS, kinds=kinds),
        **both("self_attention.norm", "layer_norm" if side == "encoder" else "layer_norm_1"),
        **both("feed_forward.norm", "feed_forward.layer_norm")}
    if side == "decoder":
        names |= {**attention("cross_attention", "context_attn.", PROJECTIONS, kinds=kinds),
                  **both("cross_attention.norm", "layer_norm_2")}
    for ours, theirs, rows in (("linear_in", "w_1", config.d_ff), ("linear_out", "w_2", config.d_model)):
        names[f"feed_forward.{ours}.weight"] = f"feed_forward.{theirs}.weight"
        bias = f"feed_forward.{theirs}.bias"
        names[f"feed_forward.{ours}.bias"] = bias if ffn_bias else Zeros(bias, rows)
    return names
