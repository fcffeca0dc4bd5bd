"""Hugging Face T5 and mT5 folders (``config.json`` with ``model_type`` ``t5`` or ``mt5``;
docs/checkpoint-formats.md#hf-t5).

``modeling_t5.py``: pre-norm layers whose RMS norm (no mean, no bias) feeds query, keys and values alike,
a final norm after each stack; no absolute positions: each stack's first layer holds a learned relative
position bias ``[buckets, heads]`` that every layer of the stack adds to its self-attention scores
(bidirectional buckets in the encoder, past-only in the decoder, none in cross-attention); scores are not
divided by √d; no biases anywhere. Feed-forward ``wo(act(wi(h)))``, or gated ``wo(act(wi_0(h)) · wi_1(h))``
(``feed_forward_proj="gated-gelu"``, T5 v1.1 and mT5, with the tanh GELU). Logits ``lm_head(x)``, with the
decoder output ×d_model^-0.5 first when the output layer is the embedding (v1.0); v1.1 keeps an untied
``lm_head`` and no scaling. Decoding starts from ``decoder_start_token_id`` (the pad id).
Tokenizer: ``tokenizer.json`` (its post-processor ends each source with ``</s>``) or else ``spiece.model``
(sentencepiece ids, ``</s>`` appended, ``<extra_id_N>`` at the top of the vocabulary).
"""

from __future__ import annotations

from pathlib import Path
from functools import partial
from typing import Any

from torch import Tensor

from ..storage.files import read_json
from ..nn.config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..text.tokenizers import SentencePieceVocabTokenizer
from .common import Inspection, Settings, Source, WeightMap, saved_as_one
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import Names, attention, map_names, map_stacks
from .hf_common import HF_ACTIVATIONS, hf_model_type, read_hf_config, open_hf_folder, tokenizer_json_pair

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=4, hf_folder=True)  # when detection asks this format (contract.py)
MODEL_TYPES = ("t5", "mt5")
PROJECTIONS = {"query": "q", "key": "k", "value": "v", "output": "o"}
ACCEPTED: dict[str, str] = {}  # config.json says everything
CONFIG_FIELDS = ("model_type", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                 "relative_attention_num_buckets", "relative_attention_max_distance", "dropout_rate",
                 "layer_norm_epsilon", "feed_forward_proj", "vocab_size", "pad_token_id", "eos_token_id",
                 "decoder_start_token_id", "scale_decoder_outputs", "n_positions")
DEFAULT_LENGTH = 512  # T5 has no position limit; the longest source and output we run
EXTRA_IDS = 100  # <extra_id_N> tokens a spiece.model-only folder has unless tokenizer_config.json says otherwise


def claims(source: Source) -> bool:
    return hf_model_type(source.path) in MODEL_TYPES


def _config(source: Source) -> dict[str, Any]:
    path, data = read_hf_config(source)
    defaults = {"d_kv": 64, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
                "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "pad_token_id": 0,
                "eos_token_id": 1, "n_positions": DEFAULT_LENGTH}
    data = {**defaults, **data}
    data["num_decoder_layers"] = data.get("num_decoder_layers") or data.get("num_layers")
    data.setdefault("decoder_start_token_id", data["pad_token_id"])
    if data.get("model_type") == "mt5":  # MT5ForConditionalGeneration never scales its decoder output
        data["scale_decoder_outputs"] = False
    elif data.get("scale_decoder_outputs") is None:  # folders written before transformers 5 say it this way
        data["scale_decoder_outputs"] = data.get("tie_word_embeddings", True) is not False
    if isinstance(data["eos_token_id"], list) and len(data["eos_token_id"]) == 1:
        data["eos_token_id"] = data["eos_token_id"][0]
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    if not isinstance(data["eos_token_id"], int):
        raise CheckpointError(path, f"eos_token_id must be one token id; got {data['eos_token_id']!r}")
    for name in CONFIG_FIELDS:
        value, number = data[name], name in ("dropout_rate", "layer_norm_epsilon")
        if name not in ("model_type", "feed_forward_proj", "scale_decoder_outputs") and (
                isinstance(value, bool) or not isinstance(value, (int, float) if number else int)):
            raise CheckpointError(path, f"{name} must be {'a number' if number else 'an integer'}; got {value!r}")
    if data.get("is_encoder_decoder") is False:
        raise CheckpointError(path, "describes an encoder-only T5 (is_encoder_decoder false): there is no decoder "
                                    "to show")
    return {name: data[name] for name in CONFIG_FIELDS}


def _activation(path: Path, proj: Any) -> tuple[str, bool]:
    """(our activation, gated) of ``feed_forward_proj``: an ACT2FN name, optionally ``gated-``; "gated-gelu" is
    the tanh GELU in transformers (T5 v1.1's own)."""
    parts = str(proj).split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    name = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or name not in HF_ACTIVATIONS:
        raise CheckpointError(path, f"feed_forward_proj {proj!r} is not supported (one of "
                                    f"{', '.join(HF_ACTIVATIONS)}, each optionally gated-)")
    return HF_ACTIVATIONS[name], gated


def inspect(source: Source, settings: Settings) -> Inspection:
    config = _config(source)
    if not any((source.path / name).is_file() for name in ("tokenizer.json", "spiece.model")):
        raise source.error(f"the {config['model_type']} folder has neither tokenizer.json nor spiece.model")
    return Inspection(NAME, source.path, dict(config), accepted=ACCEPTED, found=config)


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    folder = open_hf_folder(source, settings, inspect, vocabularies=(src_vocab, tgt_vocab))
    inspection, hf, state, weights_file = folder.inspection, folder.hf, folder.state, folder.weights_file
    if not any(key.startswith("decoder.block.") for key in state):
        raise CheckpointError(weights_file, "holds an encoder-only T5 (no decoder.block weights): there is no decoder "
                                            "to show")
    has_json = (source.path / "tokenizer.json").is_file()
    config = _our_config(source, hf, state, tokenizer_frames_source=has_json)
    tokenizer_file = "tokenizer.json" if has_json else "spiece.model"
    return Converted(config, state, weights_file=weights_file,
                     weights=partial(_map_weights, state, config, weights_file),
                     tokenizers=partial(_tokenizers, source, config, tokenizer_file=tokenizer_file),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": tokenizer_file, "tgt": tokenizer_file}))


def _tokenizers(source: Source, config: TransformerConfig, tokenizer_file: str) -> Tokenizers:
    """The folder's tokenizer.json for both sides, else its spiece.model (one tokenizer serving both)."""
    if tokenizer_file == "tokenizer.json":
        source_tokenizer, target_tokenizer = tokenizer_json_pair(source, config, config.bos_id)
    else:
        source_tokenizer = target_tokenizer = _spiece_tokenizer(source, config)
    return Tokenizers(source_tokenizer, target_tokenizer, tokenizer_file)


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor], *,
                tokenizer_frames_source: bool) -> TransformerConfig:
    activation, gated = _activation(source.path / "config.json", hf["feed_forward_proj"])
    heads, d_kv = hf["num_heads"], hf["d_kv"]
    return TransformerConfig(
        arch="transformer-preln", src_vocab_size=hf["vocab_size"], tgt_vocab_size=hf["vocab_size"],
        d_model=hf["d_model"], heads=heads, d_head=0 if heads * d_kv == hf["d_model"] else d_kv, d_ff=hf["d_ff"],
        encoder_layers=hf["num_layers"], decoder_layers=hf["num_decoder_layers"], dropout=float(hf["dropout_rate"]),
        max_len=hf["n_positions"], norm_position="pre", final_norm=True, pre_norm_kv=True,
        layer_norm_eps=float(hf["layer_norm_epsilon"]), norm_kind="rms", activation=activation, gated_ffn=gated,
        feed_forward_bias=False, positions="none", relative_buckets=hf["relative_attention_num_buckets"],
        relative_max_distance=hf["relative_attention_max_distance"], scale_attention=False, scale_embedding=False,
        share_embeddings=True, tie_output=_tied_output(state), attention_bias=False, output_bias=False,
        logit_scale=hf["d_model"] ** -0.5 if hf["scale_decoder_outputs"] else 1.0, pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], src_append_eos=not tokenizer_frames_source)


def _tied_output(state: dict[str, Tensor]) -> bool:
    """transformers ties ``lm_head`` to ``shared`` unless the file holds both with different values."""
    return "lm_head.weight" not in state or saved_as_one(state, "lm_head.weight", "shared.weight")


def _map_weights(state: dict[str, Tensor], config: TransformerConfig, file: Path) -> WeightMap:
    weights = WeightMap(Source(file), state, "T5")
    map_stacks(weights, config, {side: (f"{side}.block.{{layer}}.layer.", _layer_names(config, side))
                                 for side in ("encoder", "decoder")})
    for side in ("encoder", "decoder"):  # the first layer's table serves every layer of the stack
        map_names(weights, {f"{side}_relative_bias.weight":
                            f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                            f"{side}_norm.weight": f"{side}.final_layer_norm.weight"})
    # Old files may carry a table on the first cross-attention too; transformers never reads it.
    weights.ignore("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")
    weights.ignore_copies("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    weights.token_tables(config, "shared.weight", target="shared.weight", output="lm_head.weight")
    return weights


def _layer_names(config: TransformerConfig, side: str) -> Names:
    """A T5 block: its sublayers numbered in order (self-attention, the decoder's cross-attention, the feed-forward),
    each with its own RMS norm; no biases."""
    blocks = {"self_attention": "SelfAttention"} | ({"cross_attention": "EncDecAttention"} if side == "decoder" else {})
    names: dict[str, str] = {}
    for number, (ours, theirs) in enumerate(blocks.items()):
        names |= attention(ours, f"{number}.{theirs}.", PROJECTIONS, kinds=("weight",))
        names[f"{ours}.norm.weight"] = f"{number}.layer_norm.weight"
    last = len(blocks)
    linears = {"linear_in": "wi_0", "linear_gate": "wi_1", "linear_out": "wo"} if config.gated_ffn else \
        {"linear_in": "wi", "linear_out": "wo"}
    names |= {f"feed_forward.{ours}.weight": f"{last}.DenseReluDense.{theirs}.weight"
              for ours, theirs in linears.items()}
    return names | {"feed_forward.norm.weight": f"{last}.layer_norm.weight"}


def _spiece_tokenizer(source: Source, config: TransformerConfig) -> SentencePieceVocabTokenizer:
    """spiece.model's pieces keep their own ids; ``<extra_id_N>`` sit above them, N = 0 highest (as T5's
    tokenizers number them); ids beyond both label as ``<id N>``."""
    path = source.path / "spiece.model"
    proto = path.read_bytes()
    try:
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as error:
        raise CheckpointError(path, f"is not a sentencepiece model ({error})") from None
    size = processor.get_piece_size()
    if size > config.tgt_vocab_size:
        raise CheckpointError(path, f"has {size} pieces, more than the model's vocabulary of {config.tgt_vocab_size}")
    pieces = [processor.id_to_piece(index) for index in range(size)]
    pieces += [f"<id {index}>" for index in range(size, config.tgt_vocab_size)]
    extra = _extra_ids(source)
    for number in range(extra):
        index = size + extra - 1 - number
        if index < len(pieces):
            pieces[index] = f"<extra_id_{number}>"
    for role, expected, piece in (("pad", config.pad_id, "<pad>"), ("eos", config.eos_id, "</s>")):
        if pieces[expected] != piece:
            raise CheckpointError(path, f"has {pieces[expected]!r} at id {expected}, where config.json puts the "
                                        f"{role} token {piece}")
    unk = processor.unk_id() if 0 <= processor.unk_id() < size else None
    try:
        return SentencePieceVocabTokenizer(proto, pieces, {"pad": config.pad_id, "unk": unk, "bos": config.bos_id,
                                                           "eos": config.eos_id})
    except ConfigError as error:
        raise CheckpointError(path, str(error)) from None


def _extra_ids(source: Source) -> int:
    path = source.path / "tokenizer_config.json"
    data = read_json(path, missing={})
    if not isinstance(data, dict):
        raise CheckpointError(path, "is not a JSON object")
    value = data.get("extra_ids", EXTRA_IDS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(path, f"extra_ids must be a non-negative integer; got {value!r}")
    return value

