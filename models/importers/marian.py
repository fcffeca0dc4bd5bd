"""Hugging Face Marian / opus-mt folders (docs/checkpoint-formats.md#marian).

Files: ``config.json``, ``model.safetensors`` or ``pytorch_model.bin``, ``source.spm``, ``target.spm``,
``vocab.json`` (``target_vocab.json`` when ``separate_vocabs``), ``tokenizer_config.json``.
``modeling_marian.py`` is always post-LN without embedding or final norms (the legacy BART fields
``normalize_before``.. in config.json are ignored there, so here too), swish FFN, embedding ×√d when
``scale_embedding``, half-split sinusoids from position 0, LayerNorm eps 1e-5, logits
``lm_head(x) + final_logits_bias``, decoding started from ``decoder_start_token_id`` (= pad). Token ids
come from vocab.json, not from the sentencepiece models, and every source ends with ``</s>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..storage.files import peek_json, read_json
from ..nn.config import TransformerConfig
from ..errors import CheckpointError
from ..text.tokenizers import SentencePieceVocabTokenizer
from .common import Inspection, Settings, Source, WeightMap, saved_as_one
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import hf_activation, hf_sizes, key_prefix, map_bart_layers, open_hf_folder

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=8, folder=1, hf_folder=True)  # when detection asks this format (contract.py)
MODEL_TYPES = ("marian",)  # config.json's model_type
ACCEPTED: dict[str, str] = {}  # config.json says everything
CONFIG_FIELDS = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                 "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "vocab_size", "decoder_vocab_size",
                 "max_position_embeddings", "scale_embedding", "share_encoder_decoder_embeddings",
                 "tie_word_embeddings", "pad_token_id", "eos_token_id", "decoder_start_token_id", "dropout")


def claims(source: Source) -> bool:
    data = peek_json(source.path / "config.json") if source.path.is_dir() else None
    return isinstance(data, dict) and (data.get("model_type") == "marian"
                                       or "MarianMTModel" in (data.get("architectures") or []))


def _config(source: Source) -> dict[str, Any]:
    path = source.path / "config.json"
    data = read_json(path)
    defaults = {"scale_embedding": False, "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
                "activation_function": "gelu", "max_position_embeddings": 1024, "dropout": 0.1, "eos_token_id": 0}
    data = {**defaults, **data}
    data["decoder_vocab_size"] = data.get("decoder_vocab_size") or data.get("vocab_size")
    data.setdefault("decoder_start_token_id", data.get("pad_token_id"))
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    return {name: data[name] for name in CONFIG_FIELDS}


def inspect(source: Source, settings: Settings) -> Inspection:
    config = _config(source)
    inspection = Inspection(NAME, source.path, dict(config), accepted=ACCEPTED, found=config)
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (source.path / name).is_file():
            raise source.error(f"the Marian folder has no {name}")
    return inspection


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    folder = open_hf_folder(source, settings, inspect, vocabularies=(src_vocab, tgt_vocab),
                          brings="a Marian folder brings its own vocabularies (vocab.json)")
    inspection, hf, state, weights_file = folder.inspection, folder.hf, folder.state, folder.weights_file
    keys = EmbeddingKeys.of(state, key_prefix(state), hf)
    config = _our_config(source, hf, shared_input=keys.shared_input(state), tied_output=keys.tied_output(state))
    tokenizer_config = _tokenizer_config(source.path)
    files = _vocabulary_paths(source.path, tokenizer_config)
    kept = {key: tokenizer_config[key] for key in ("source_lang", "target_lang", "separate_vocabs")
            if key in tokenizer_config}
    return Converted(config, state, weights_file=weights_file,
                     weights=partial(_map_weights, source, state, config=config, keys=keys, file=weights_file),
                     tokenizers=partial(_tokenizers, source, config, files=files),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": files[0].name, "tgt": files[1].name},
                                           details={"tokenizer_config": kept} if kept else {}))


def _our_config(source: Source, hf: dict[str, Any], shared_input: bool, tied_output: bool) -> TransformerConfig:
    """``shared_input``/``tied_output``: what the saved tensors allow (one table for both sides, the output
    layer reading the decoder's table), not just what config.json says."""
    activation = hf_activation(source, hf)
    shared = bool(hf["share_encoder_decoder_embeddings"])
    return TransformerConfig(
        arch="transformer-postln", src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf["vocab_size"] if shared else hf["decoder_vocab_size"],
        d_model=hf["d_model"], **hf_sizes(hf),
        encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"], dropout=float(hf["dropout"]),
        max_len=hf["max_position_embeddings"], norm_position="post", final_norm=False, layer_norm_eps=1e-5,
        activation=activation, positions="half_split", scale_embedding=bool(hf["scale_embedding"]),
        share_embeddings=shared and shared_input, tie_output=tied_output, attention_bias=True, output_bias=True,
        pad_id=hf["pad_token_id"], bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], src_append_eos=True)


def _map_weights(source: Source, state: dict[str, Tensor], config: TransformerConfig, keys: EmbeddingKeys,
                 file: Path) -> WeightMap:
    prefix = key_prefix(state)
    weights = WeightMap(Source(file), state, NAME)
    map_bart_layers(weights, prefix, config)  # its fixed sinusoids checked, not loaded
    _map_embeddings(weights, prefix, keys=keys, config=config)
    return weights


@dataclass(frozen=True)
class EmbeddingKeys:
    """Which saved tensor each embedding role reads, as ``modeling_marian.py`` does: the encoder's and the
    decoder's own ``embed_tokens`` and ``lm_head`` whenever saved (untied models keep them apart from
    ``shared``), ``shared`` for a side that has none; with ``tie_word_embeddings`` transformers replaces
    the side copies and ``lm_head`` by ``shared`` (or the decoder's embedding) on load, so those copies must
    equal what they are tied to."""

    encoder: str
    decoder: str
    output: str
    copies: dict[str, tuple[str, ...]]  # kept key → saved copies transformers overwrites with it

    @classmethod
    def of(cls, state: dict[str, Tensor], prefix: str, hf: dict[str, Any]) -> EmbeddingKeys:
        shared, lm_head = f"{prefix}shared.weight", "lm_head.weight"
        own = {side: f"{prefix}{side}.embed_tokens.weight" for side in ("encoder", "decoder")}
        share, tie = bool(hf["share_encoder_decoder_embeddings"]), bool(hf["tie_word_embeddings"])
        copies: dict[str, tuple[str, ...]] = {}
        if share and (tie or shared not in state):  # one table; older files may lack "shared"
            kept = next((key for key in (shared, own["encoder"], own["decoder"]) if key in state), shared)
            copies[kept] = (shared, own["encoder"], own["decoder"])
            encoder = decoder = kept
        else:
            encoder = own["encoder"] if own["encoder"] in state or not share else shared
            decoder = own["decoder"] if own["decoder"] in state or not share else shared
        output = decoder if tie else lm_head
        if tie:
            copies[decoder] = copies.get(decoder, ()) + (lm_head,)
        return cls(encoder, decoder, output=output, copies=copies)

    def shared_input(self, state: dict[str, Tensor]) -> bool:
        """Whether one table can serve both sides exactly."""
        return self.encoder == self.decoder or saved_as_one(state, self.encoder, self.decoder)

    def tied_output(self, state: dict[str, Tensor]) -> bool:
        return self.output == self.decoder or saved_as_one(state, self.output, self.decoder)


def _map_embeddings(weights: WeightMap, prefix: str, keys: EmbeddingKeys, config: TransformerConfig) -> None:
    for kept, copies in keys.copies.items():
        weights.ignore_copies(kept, *copies)
    if keys.encoder != f"{prefix}shared.weight" and keys.decoder != f"{prefix}shared.weight":
        weights.ignore(f"{prefix}shared.weight")  # transformers' forward never reads it then
    weights.copy("src_embedding.tokens.weight", keys.encoder)
    weights.copy("tgt_embedding.tokens.weight", keys.decoder)
    weights.copy("output.weight", keys.output)
    if weights.has("final_logits_bias"):
        weights.copy("output.bias", "final_logits_bias", lambda bias: bias.reshape(-1))
    else:  # transformers creates it as zeros when a file lacks it
        weights.put("output.bias", "final_logits_bias", torch.zeros(config.tgt_vocab_size))


def _tokenizers(source: Source, config: TransformerConfig, files: tuple[Path, Path]) -> Tokenizers:
    """Each side's sentencepiece model with the ids of its piece → id file (``files``: source's, target's)."""
    folder = source.path
    source_file, target_file = files
    source_vocab = _vocabulary(source_file, config.src_vocab_size)
    target_vocab = source_vocab if target_file == source_file and config.tgt_vocab_size == config.src_vocab_size \
        else _vocabulary(target_file, config.tgt_vocab_size)
    source_tokenizer = SentencePieceVocabTokenizer((folder / "source.spm").read_bytes(), source_vocab,
                                                   _specials(source_file, source_vocab, config=config, side="source"))
    target_tokenizer = SentencePieceVocabTokenizer((folder / "target.spm").read_bytes(), target_vocab,
                                                   _specials(target_file, target_vocab, config=config, side="target"))
    return Tokenizers(source_tokenizer, target_tokenizer, "sentencepiece pieces of source.spm and target.spm")


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    return read_json(path, missing={})


def _vocabulary_paths(folder: Path, tokenizer_config: dict[str, Any]) -> tuple[Path, Path]:
    """The source's and the target's piece → id files (the same one unless ``separate_vocabs``)."""
    source_file = target_file = folder / "vocab.json"
    if tokenizer_config.get("separate_vocabs", False):
        target_file = folder / (tokenizer_config.get("target_vocab_file") or "target_vocab.json")
        target_file = target_file if target_file.is_file() else folder / "target_vocab.json"
    return source_file, target_file


def _vocabulary(path: Path, size: int) -> list[str]:
    """vocab.json's piece → id map as a list; ids the model has but the map lacks get placeholders
    (they are never produced by the tokenizer, and label as ``<id N>``)."""
    data = read_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise CheckpointError(path, "is not a piece → id object")
    if data and max(data.values()) >= size:
        raise CheckpointError(path, f"has id {max(data.values())}, beyond the model's vocabulary of {size}")
    pieces = [f"<id {index}>" for index in range(size)]
    for piece, index in sorted(data.items(), key=lambda item: -item[1]):  # lowest piece wins a shared id
        pieces[index] = piece
    return pieces


def _specials(path: Path, vocabulary: list[str], *, config: TransformerConfig, side: str) -> dict[str, int | None]:
    """The special ids of one side's vocabulary (read from ``path``). config.json's pad id is the source
    vocabulary's ``<pad>``: with separate vocabularies the target's ``<pad>`` sits elsewhere (it is the start
    token there), and transformers skips config.json's pad id on both sides, as ours does."""
    found = {name: vocabulary.index(token) if token in vocabulary else None
             for name, token in (("pad", "<pad>"), ("unk", "<unk>"), ("eos", "</s>"))}
    checked = (("pad", config.pad_id), ("eos", config.eos_id)) if side == "source" else (("eos", config.eos_id),)
    for name, expected in checked:
        if found[name] is not None and found[name] != expected:
            raise CheckpointError(path, f"puts the {name} token at {found[name]}; config.json says {expected}")
    # Sources never start with the start token; a target-only start token (separate vocabularies) has no
    # source id, so the source's bos role falls to its pad id, which is never produced either.
    bos = config.bos_id if side == "target" or config.bos_id < len(vocabulary) else config.pad_id
    return {"pad": config.pad_id, "unk": found["unk"], "bos": bos, "eos": config.eos_id}
