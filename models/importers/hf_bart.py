"""Hugging Face BART and mBART folders (``config.json`` with ``model_type`` ``bart`` or ``mbart``).

``modeling_bart.py``: post-LN layers; ``modeling_mbart.py``: pre-LN layers normalising query, keys and
values, plus a final LayerNorm after each stack. Both: token embedding ×√d when ``scale_embedding``, plus a
learned position table whose first 2 rows are never read (position p is row p + 2), then a LayerNorm
(``layernorm_embedding``); logits ``lm_head(x) + final_logits_bias``; decoding starts from
``decoder_start_token_id``. The tokenizer is the folder's ``tokenizer.json``, whose post-processor frames
each source (BART: ``<s> … </s>``; mBART: ``… </s> en_XX``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..config import TransformerConfig
from ..errors import CheckpointError
from ..transformer import TransformerSeq2Seq
from ..validation import check_against_weights
from .common import (Inspection, Settings, Source, WeightMap, hf_activation, hf_model_type, read_hf_config,
                     read_hf_weights, tokenizer_json_pair)

NAME = "hf-bart"
MODEL_TYPES = ("bart", "mbart")
POSITION_OFFSET = 2
PROJECTIONS = (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "output"))
ACCEPTED: dict[str, str] = {}  # config.json says everything
CONFIG_FIELDS = ("model_type", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                 "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
                 "vocab_size", "max_position_embeddings", "scale_embedding", "tie_word_embeddings", "pad_token_id",
                 "bos_token_id", "eos_token_id", "decoder_start_token_id", "dropout")


def claims(source: Source) -> bool:
    return hf_model_type(source.path) in MODEL_TYPES


def _config(source: Source) -> dict[str, Any]:
    path, data = read_hf_config(source)
    defaults = {"scale_embedding": False, "tie_word_embeddings": True, "activation_function": "gelu",
                "max_position_embeddings": 1024, "dropout": 0.1, "pad_token_id": 1, "bos_token_id": 0,
                "eos_token_id": 2, "decoder_start_token_id": 2}
    data = {**defaults, **data}
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    for forced in ("forced_bos_token_id",):
        if data.get(forced) is not None:
            raise CheckpointError(path, f"sets {forced}={data[forced]}; forced first tokens are not supported yet")
    return {name: data[name] for name in CONFIG_FIELDS}


def inspect(source: Source, settings: Settings) -> tuple[Inspection, dict[str, Any]]:
    config = _config(source)
    if not (source.path / "tokenizer.json").is_file():
        raise source.error(f"the {config['model_type']} folder has no tokenizer.json")
    return Inspection(NAME, source.path, dict(config), accepted=ACCEPTED), config


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Checkpoint:
    if src_vocab or tgt_vocab:
        raise source.error("a Hugging Face folder brings its own tokenizer; drop --src-vocab/--tgt-vocab")
    inspection, hf = inspect(source, settings)
    state, weights_file = read_hf_weights(source)
    config = _our_config(source, hf, state)
    check_against_weights(weights_file, config, state)  # sizes the config claims, before anything is built
    model = TransformerSeq2Seq(config)
    _map_weights(state, config, weights_file, hf["model_type"]).load_into(model)
    source_tokenizer, target_tokenizer = tokenizer_json_pair(source, config, hf["bos_token_id"])
    record = {"imported_from": {"format": NAME, "file": str(source.path.resolve()), "weights": weights_file.name,
                                "read_from_file": inspection.inferred}}
    return Checkpoint(model, source_tokenizer, target_tokenizer, record)


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor]) -> TransformerConfig:
    activation = hf_activation(source, hf)
    pre = hf["model_type"] == "mbart"
    prefix = _prefix(state)
    lm_head = state.get("lm_head.weight")
    shared = state.get(f"{prefix}shared.weight")
    tied = bool(hf["tie_word_embeddings"]) or (lm_head is not None and shared is not None
                                               and torch.equal(lm_head, shared))
    return TransformerConfig(
        arch="transformer-preln" if pre else "transformer-postln", src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf["vocab_size"], d_model=hf["d_model"], heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"], encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"],
        dropout=float(hf["dropout"]), max_len=hf["max_position_embeddings"], norm_position="pre" if pre else "post",
        final_norm=pre, pre_norm_kv=pre, layer_norm_eps=1e-5, activation=activation, positions="learned",
        position_offset=POSITION_OFFSET, scale_embedding=bool(hf["scale_embedding"]), share_embeddings=True,
        tie_output=tied, embedding_norm=True, attention_bias=True, output_bias=True, pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], src_append_eos=False)  # the tokenizer frames it


def _prefix(state: dict[str, Tensor]) -> str:
    return "model." if any(key.startswith("model.") for key in state) else ""


def _map_weights(state: dict[str, Tensor], config: TransformerConfig, file: Path, kind: str) -> WeightMap:
    prefix = _prefix(state)
    weights = WeightMap(Source(file), state, kind)
    for side, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for index in range(count):
            theirs, ours = f"{prefix}{side}.layers.{index}.", f"{side}_layers.{index}."
            blocks = [("self_attn", "self_attention")] + ([("encoder_attn", "cross_attention")]
                                                          if side == "decoder" else [])
            for their_block, our_block in blocks:
                for kind_ in ("weight", "bias"):
                    for proj, name in PROJECTIONS:
                        weights.copy(f"{ours}{our_block}.attention.{name}.{kind_}",
                                     f"{theirs}{their_block}.{proj}.{kind_}")
                    weights.copy(f"{ours}{our_block}.norm.{kind_}", f"{theirs}{their_block}_layer_norm.{kind_}")
            for kind_ in ("weight", "bias"):
                weights.copy(f"{ours}feed_forward.linear_in.{kind_}", f"{theirs}fc1.{kind_}")
                weights.copy(f"{ours}feed_forward.linear_out.{kind_}", f"{theirs}fc2.{kind_}")
                weights.copy(f"{ours}feed_forward.norm.{kind_}", f"{theirs}final_layer_norm.{kind_}")
        ours_side = "src" if side == "encoder" else "tgt"
        weights.copy(f"{ours_side}_embedding.learned_positions.weight", f"{prefix}{side}.embed_positions.weight")
        for kind_ in ("weight", "bias"):
            weights.copy(f"{ours_side}_embedding.norm.{kind_}", f"{prefix}{side}.layernorm_embedding.{kind_}")
            if config.final_norm:
                weights.copy(f"{side}_norm.{kind_}", f"{prefix}{side}.layer_norm.{kind_}")
        weights.ignore(f"{prefix}{side}.version")  # a format marker
    shared = f"{prefix}shared.weight"
    kept = shared if shared in state else f"{prefix}encoder.embed_tokens.weight"
    weights.ignore_copies(kept, shared, f"{prefix}encoder.embed_tokens.weight", f"{prefix}decoder.embed_tokens.weight")
    weights.copy("src_embedding.tokens.weight", kept)
    if config.tie_output:
        weights.ignore_copies(kept, "lm_head.weight")
    else:
        weights.copy("output.weight", "lm_head.weight")
    if weights.has("final_logits_bias"):
        weights.copy("output.bias", "final_logits_bias", lambda bias: bias.reshape(-1))
    else:  # transformers creates it as zeros when a file lacks it
        weights.put("output.bias", "final_logits_bias", torch.zeros(config.tgt_vocab_size))
    return weights
