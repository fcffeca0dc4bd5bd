"""Hugging Face FSMT folders (fairseq's WMT'19 translation models; docs/checkpoint-formats.md#fsmt).

Files: ``config.json`` (``model_type`` ``fsmt``), ``model.safetensors`` or ``pytorch_model.bin``,
``vocab-src.json``, ``vocab-tgt.json``, ``merges.txt``, ``tokenizer_config.json``. ``modeling_fsmt.py``:
post-LN layers named as BART's, no embedding or final norms, token embedding ×√d when ``scale_embedding``
plus fairseq's sinusoids (sin and cos halves, position p at row pad + 1 + p, padding tokens at the zero row
of the pad id), separate source and target vocabularies and embeddings, logits
``decoder.output_projection(x)`` without bias, each source ending with ``</s>``, decoding from
``decoder_start_token_id`` (``</s>``). Its tokenizer is Moses (``sacremoses``) then BPE with ``</w>`` ending
each word, ids from the side's vocab json.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..storage.files import read_json
from ..nn.config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..text.tokenizers import TokenizerJsonTokenizer
from .common import Inspection, Settings, Source, WeightMap
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import (
    bpe_tokenizer, hf_activation, hf_model_type, hf_sizes, key_prefix, map_bart_layers, piece_ids, open_hf_folder,
)

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=3, hf_folder=True)  # when detection asks this format (contract.py)
MODEL_TYPES = ("fsmt",)  # config.json's model_type
ACCEPTED: dict[str, str] = {}  # config.json and tokenizer_config.json say everything
FILES = ("vocab-src.json", "vocab-tgt.json", "merges.txt")
CONFIG_FIELDS = ("langs", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                 "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
                 "src_vocab_size", "tgt_vocab_size", "max_position_embeddings", "scale_embedding",
                 "tie_word_embeddings", "pad_token_id", "eos_token_id", "decoder_start_token_id", "dropout")
SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}


def claims(source: Source) -> bool:
    return hf_model_type(source.path) == "fsmt"


def _config(source: Source) -> dict[str, Any]:
    path = source.path / "config.json"
    data = read_json(path)
    defaults = {"activation_function": "relu", "max_position_embeddings": 1024, "scale_embedding": True,
                "tie_word_embeddings": False, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
                "dropout": 0.1, "langs": ["en", "de"]}  # FSMTConfig's
    data = {**defaults, **{key: value for key, value in data.items() if value is not None}}
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    langs = data["langs"]
    if not (isinstance(langs, list) and len(langs) == 2 and all(isinstance(lang, str) for lang in langs)):
        raise CheckpointError(path, f"langs must name a source and a target language; got {langs!r}")
    return {name: data[name] for name in CONFIG_FIELDS}


def inspect(source: Source, settings: Settings) -> Inspection:
    config = _config(source)
    for name in FILES:
        if not (source.path / name).is_file():
            raise source.error(f"the fsmt folder has no {name}")
    return Inspection(NAME, source.path, dict(config), accepted=ACCEPTED, found=config)


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    folder = open_hf_folder(source, settings, inspect, vocabularies=(src_vocab, tgt_vocab))
    inspection, hf, state, weights_file = folder.inspection, folder.hf, folder.state, folder.weights_file
    config = _our_config(source, hf)
    tokenizer_config = _tokenizer_config(source.path)
    langs, lowercase = _langs(source.path, tokenizer_config, hf), bool(tokenizer_config.get("do_lower_case", False))
    return Converted(config, state, weights_file=weights_file,
                     weights=partial(_map_weights, state, config, weights_file),
                     tokenizers=partial(_tokenizers, source, config, langs=langs, lowercase=lowercase),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": "vocab-src.json", "tgt": "vocab-tgt.json"},
                                           details={"tokenizer": {"langs": langs, "do_lower_case": lowercase}}))


def _our_config(source: Source, hf: dict[str, Any]) -> TransformerConfig:
    activation = hf_activation(source, hf)
    tied = bool(hf["tie_word_embeddings"])
    if tied and hf["src_vocab_size"] != hf["tgt_vocab_size"]:
        raise source.error(f"tie_word_embeddings with src_vocab_size={hf['src_vocab_size']} differing from "
                           f"tgt_vocab_size={hf['tgt_vocab_size']}: the embeddings cannot be one matrix")
    return TransformerConfig(
        arch="transformer-postln", src_vocab_size=hf["src_vocab_size"], tgt_vocab_size=hf["tgt_vocab_size"],
        d_model=hf["d_model"], **hf_sizes(hf),
        encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"], dropout=float(hf["dropout"]),
        max_len=hf["max_position_embeddings"], norm_position="post", final_norm=False, pre_norm_kv=False,
        layer_norm_eps=1e-5, activation=activation, positions="fairseq", position_offset=hf["pad_token_id"] + 1,
        scale_embedding=bool(hf["scale_embedding"]), share_embeddings=tied, tie_output=tied, embedding_norm=False,
        attention_bias=True, output_bias=False, pad_id=hf["pad_token_id"], bos_id=hf["decoder_start_token_id"],
        eos_id=hf["eos_token_id"], src_append_eos=True)


def _map_weights(state: dict[str, Tensor], config: TransformerConfig, file: Path) -> WeightMap:
    prefix = key_prefix(state)
    weights = WeightMap(Source(file), state, NAME)
    map_bart_layers(weights, prefix, config)
    encoder, decoder = f"{prefix}encoder.embed_tokens.weight", f"{prefix}decoder.embed_tokens.weight"
    output = f"{prefix}decoder.output_projection.weight"
    if config.tie_output:  # transformers ties the encoder's table and the projection to the decoder's table
        weights.ignore_copies(decoder, encoder, output)
        weights.copy("src_embedding.tokens.weight", decoder)
    else:
        weights.copy("src_embedding.tokens.weight", encoder)
        weights.copy("tgt_embedding.tokens.weight", decoder)
        weights.copy("output.weight", output)
    return weights


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    tokenizer_config = read_json(path, missing={})
    return tokenizer_config if isinstance(tokenizer_config, dict) else {}


def _langs(folder: Path, tokenizer_config: dict[str, Any], hf: dict[str, Any]) -> list[str]:
    langs = tokenizer_config.get("langs") or hf["langs"]
    if not (isinstance(langs, list) and len(langs) == 2 and all(isinstance(lang, str) for lang in langs)):
        raise CheckpointError(folder / "tokenizer_config.json", f"langs must name two languages; got {langs!r}")
    return langs


def _tokenizers(source: Source, config: TransformerConfig, *, langs: list[str], lowercase: bool) -> Tokenizers:
    """Moses, then BPE over each word with ``</w>`` on its last symbol (ranks from merges.txt, whose lines hold
    two symbols and a count), then the side's vocab json; the two sides share the merges and differ in
    vocabulary and language."""
    from tokenizers import decoders

    folder = source.path
    merges_path = folder / "merges.txt"
    try:  # transformers drops the last line (empty when the file ends with a newline)
        lines = merges_path.read_text(encoding="utf-8").split("\n")[:-1]
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(merges_path, f"cannot be read ({error})") from None
    merges = [tuple(line.split()[:2]) for line in lines]
    if any(len(merge) != 2 for merge in merges):
        raise CheckpointError(merges_path, "has a line without two symbols")
    tokenizers = []
    for name, size, lang in (("vocab-src.json", config.src_vocab_size, langs[0]),
                             ("vocab-tgt.json", config.tgt_vocab_size, langs[1])):
        path = folder / name
        vocab = piece_ids(path)
        if vocab and max(vocab.values()) >= size:
            raise CheckpointError(path, f"has id {max(vocab.values())}, beyond the model's vocabulary of {size}")
        ids = {role: vocab.get(token) for role, token in SPECIALS.items()}
        for role, expected in (("pad", config.pad_id), ("eos", config.eos_id)):
            if ids[role] != expected:
                raise CheckpointError(path, f"puts {SPECIALS[role]} at {ids[role]}; config.json says {expected}")
        if ids["unk"] is None:
            raise CheckpointError(path, f"has no {SPECIALS['unk']}")
        tokenizer = bpe_tokenizer(merges_path, vocab, merges=merges, unk=SPECIALS["unk"], vocab_size=size)
        tokenizer.decoder = decoders.BPEDecoder(suffix="</w>")
        tokenizer.add_special_tokens([token for token in SPECIALS.values() if token in vocab])
        pieces = [f"<id {index}>" for index in range(size)]
        for piece, index in sorted(vocab.items(), key=lambda item: -item[1]):  # the lowest piece wins a shared id
            pieces[index] = piece
        try:
            tokenizers.append(TokenizerJsonTokenizer(
                tokenizer.to_str(), pieces, {**ids, "bos": config.bos_id}, beyond_is_unknown=True,
                moses={"lang": lang, "lowercase": lowercase}))
        except ConfigError as error:
            raise CheckpointError(path, str(error)) from None
    return Tokenizers(tokenizers[0], tokenizers[1], f"Moses ({', '.join(langs)}{', lower-cased' if lowercase else ''}) "
                                                    f"then BPE with merges.txt")
