"""Hugging Face BART, mBART and M2M100/NLLB folders (``config.json`` with ``model_type`` ``bart``, ``mbart``
or ``m2m_100``).

``modeling_bart.py``: post-LN layers; ``modeling_mbart.py``: pre-LN layers normalising query, keys and
values, plus a final LayerNorm after each stack. Both: token embedding ×√d when ``scale_embedding``, plus a
learned position table whose first 2 rows are never read (position p is row p + 2), then a LayerNorm
(``layernorm_embedding``); logits ``lm_head(x) + final_logits_bias``; decoding starts from
``decoder_start_token_id``. ``modeling_m2m_100.py`` (M2M100, NLLB): mBART's layers without the embedding
LayerNorm, and fairseq's sinusoidal positions (not stored) starting at the pad id + 1. The tokenizer is the
folder's ``tokenizer.json``, whose post-processor frames each source (BART: ``<s> … </s>``; mBART:
``… </s> en_XX``; mBART-50, NLLB: ``eng_Latn … </s>``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..tokenizers import TokenizerJsonTokenizer
from ..transformer import TransformerSeq2Seq
from ..validation import check_against_weights
from . import safe_load
from .common import Inspection, Settings, Source, WeightMap, hf_activation, provenance, read_safetensors

NAME = "hf-bart"
MODEL_TYPES = ("bart", "mbart", "m2m_100")
POSITION_OFFSET = 2
PROJECTIONS = (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "output"))
ACCEPTED = {"src_lang": "the source language's code, for multilingual models (default: the one the tokenizer "
                        "was saved with)",
            "tgt_lang": "the target language's code, for models that start each output with it (default: the "
                        "config's forced_bos_token_id)"}
# How multilingual tokenizers write language codes: mBART (en_XX), NLLB (eng_Latn), M2M100 (__en__).
LANGUAGE_CODE = re.compile(r"[a-z]{2}_[A-Z]{2}|[a-z]{3}_[A-Z][a-z]{3}|__[a-z]{2,3}__")
CONFIG_FIELDS = ("model_type", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                 "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
                 "vocab_size", "max_position_embeddings", "scale_embedding", "tie_word_embeddings", "pad_token_id",
                 "bos_token_id", "eos_token_id", "decoder_start_token_id", "dropout")


def model_type(folder: Path) -> str | None:
    """``model_type`` of a Hugging Face folder's config.json, or None when there is none to read."""
    path = folder / "config.json"
    if not folder.is_dir() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data.get("model_type") if isinstance(data, dict) and isinstance(data.get("model_type"), str) else None


def claims(source: Source) -> bool:
    return model_type(source.path) in MODEL_TYPES


def _config(source: Source) -> dict[str, Any]:
    path = source.path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as JSON ({error})") from None
    defaults = {"scale_embedding": False, "tie_word_embeddings": True, "activation_function": "gelu",
                "max_position_embeddings": 1024, "dropout": 0.1, "pad_token_id": 1, "bos_token_id": 0,
                "eos_token_id": 2, "decoder_start_token_id": 2}
    data = {**defaults, **_generation_config(source), **data}
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    forced = data.get("forced_bos_token_id")
    if forced is not None and not (isinstance(forced, int) and not isinstance(forced, bool)):
        raise CheckpointError(path, f"forced_bos_token_id must be a token id; got {forced!r}")
    return {**{name: data[name] for name in CONFIG_FIELDS}, "forced_bos_token_id": forced}


def _generation_config(source: Source) -> dict[str, Any]:
    """generation_config.json's forced first token, where recent versions of transformers keep it."""
    path = source.path / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as JSON ({error})") from None
    forced = data.get("forced_bos_token_id") if isinstance(data, dict) else None
    return {} if forced is None else {"forced_bos_token_id": forced}


def inspect(source: Source, settings: Settings) -> tuple[Inspection, dict[str, Any]]:
    config = _config(source)
    if not (source.path / "tokenizer.json").is_file():
        slow = " (M2M100's own sentencepiece.bpe.model + vocab.json tokenizer is not read; NLLB folders carry " \
               "a tokenizer.json)" if config["model_type"] == "m2m_100" else ""
        raise source.error(f"the {config['model_type']} folder has no tokenizer.json{slow}")
    return Inspection(NAME, source.path, dict(config), accepted=ACCEPTED), config


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Checkpoint:
    if src_vocab or tgt_vocab:
        raise source.error("a Hugging Face folder brings its own tokenizer; drop --src-vocab/--tgt-vocab")
    inspection, hf = inspect(source, settings)
    state, weights_file = _read_weights(source)
    config = _our_config(source, hf, state)
    check_against_weights(weights_file, config, state)  # sizes the config claims, before anything is built
    model = TransformerSeq2Seq(config)
    _map_weights(state, config, weights_file, hf["model_type"]).load_into(model)
    source_tokenizer, target_tokenizer = _tokenizers(source, config, hf["bos_token_id"])
    _choose_languages(source, settings, hf, source_tokenizer, target_tokenizer)
    record = provenance(NAME, source, settings, inspection.inferred, weights=weights_file.name)
    return Checkpoint(model, source_tokenizer, target_tokenizer, record)


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor]) -> TransformerConfig:
    activation = hf_activation(source, hf)
    pre = hf["model_type"] in ("mbart", "m2m_100")
    fairseq = hf["model_type"] == "m2m_100"  # sinusoidal positions from the pad id + 1, no embedding LayerNorm
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
        final_norm=pre, pre_norm_kv=pre, layer_norm_eps=1e-5, activation=activation,
        positions="fairseq" if fairseq else "learned",
        position_offset=hf["pad_token_id"] + 1 if fairseq else POSITION_OFFSET,
        scale_embedding=bool(hf["scale_embedding"]), share_embeddings=True,
        tie_output=tied, embedding_norm=not fairseq, attention_bias=True, output_bias=True, pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], src_append_eos=False)  # the tokenizer frames it


def _read_weights(source: Source) -> tuple[dict[str, Tensor], Path]:
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = source.path / name
        if path.is_file():
            payload = read_safetensors(path) if name.endswith(".safetensors") else \
                safe_load.load(path, trust=source.trust)
            if not isinstance(payload, dict):
                raise CheckpointError(path, f"holds {type(payload).__name__}, not a state dict")
            return payload, path
    raise source.error("the folder has neither model.safetensors nor pytorch_model.bin")


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
        if config.positions == "learned":
            weights.copy(f"{ours_side}_embedding.learned_positions.weight", f"{prefix}{side}.embed_positions.weight")
        else:  # the sinusoid table some versions saved: rebuilt from the config
            weights.ignore(f"{prefix}{side}.embed_positions.weights")
        for kind_ in ("weight", "bias"):
            if config.embedding_norm:
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


def _tokenizers(source: Source, config: TransformerConfig,
                source_bos: int) -> tuple[TokenizerJsonTokenizer, TokenizerJsonTokenizer]:
    """The folder's tokenizer.json for both sides: sources framed by its post-processor, as transformers
    does; labels for ids the file lacks read ``<id N>``."""
    path = source.path / "tokenizer.json"
    try:
        definition = path.read_text(encoding="utf-8")
        vocab = json.loads(definition)["model"]["vocab"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise CheckpointError(path, f"cannot be read as a tokenizer.json ({error})") from None
    pieces = [f"<id {index}>" for index in range(config.tgt_vocab_size)]
    entries = vocab.items() if isinstance(vocab, dict) else ((piece, index) for index, (piece, *_) in enumerate(vocab))
    added = json.loads(definition).get("added_tokens") or []
    for piece, index in [*entries, *((token.get("content"), token.get("id")) for token in added)]:
        if isinstance(piece, str) and isinstance(index, int) and 0 <= index < len(pieces):
            pieces[index] = piece
    unk = next((index for piece, index in ((p, i) for i, p in enumerate(pieces)) if piece == "<unk>"), None)
    specials = {"pad": config.pad_id, "unk": unk, "eos": config.eos_id}
    languages = {token["content"]: token["id"] for token in added if isinstance(token, dict)
                 and token.get("special") and isinstance(token.get("content"), str)
                 and LANGUAGE_CODE.fullmatch(token["content"]) and isinstance(token.get("id"), int)
                 and 0 <= token["id"] < len(pieces)}
    try:
        return (TokenizerJsonTokenizer(definition, pieces, {**specials, "bos": source_bos}, add_special_tokens=True,
                                       languages=languages),
                TokenizerJsonTokenizer(definition, pieces, {**specials, "bos": config.bos_id}, languages=languages))
    except ConfigError as error:
        raise CheckpointError(path, str(error)) from None


def _choose_languages(source: Source, settings: Settings, hf: dict[str, Any], source_tokenizer: TokenizerJsonTokenizer,
                      target_tokenizer: TokenizerJsonTokenizer) -> None:
    """The languages of a multilingual folder: the source's defaults to the one its tokenizer frames
    sources with, the target's to the config's forced first token, which then starts every output."""
    codes = {index: code for code, index in source_tokenizer.languages.items()}
    if not codes:
        for key in ("src_lang", "tgt_lang"):
            if settings.has(key):
                raise CheckpointError(f"--set {key}", "this model has no language codes in its tokenizer")
        return
    framed = next((codes[token_id] for token_id in _frame(source_tokenizer) if token_id in codes), None)
    forced = hf["forced_bos_token_id"]
    if forced is not None and forced not in codes:
        raise source.error(f"forced_bos_token_id {forced} is not one of the tokenizer's language codes; "
                           f"forced first tokens other than a language are not supported")
    for tokenizer, key, default in ((source_tokenizer, "src_lang", framed),
                                    (target_tokenizer, "tgt_lang", codes.get(forced))):
        code = settings.value(key, str, default)
        if code is None:
            continue
        try:
            tokenizer.set_language(code)
        except ConfigError as error:
            raise CheckpointError(f"--set {key}", str(error)) from None
    target_tokenizer.force_language = forced is not None


def _frame(tokenizer: TokenizerJsonTokenizer) -> list[int]:
    """The ids the tokenizer's post-processor adds around a source."""
    bare = tokenizer._tokenizer.encode("a", add_special_tokens=True)
    return [token_id for token_id, added in zip(bare.ids, bare.special_tokens_mask) if added]
