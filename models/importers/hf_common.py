"""What the Hugging Face importers share (marian, hf-bart, fsmt, hf-t5, and fairseq, whose transformer names its
layers as BART does): reading a folder's config.json and weights, its activation and sizes, the layer names of
the BART layout, and its tokenizers (tokenizer.json, BPE merges, piece → id files).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from ..storage.files import peek_json, read_json
from ..errors import CheckpointError, ConfigError
from ..nn.base import sinusoid_table
from ..nn.config import TransformerConfig
from ..text.tokenizers import TokenizerJsonTokenizer
from . import safe_load
from .common import Inspection, Settings, Source, WeightMap, read_safetensors
from .layer_names import attention, both, fixed_positions, map_names, map_stacks

PROJECTIONS = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "output": "out_proj"}
# One layer of each stack, our name → BART's (under ``{prefix}{encoder,decoder}.layers.N.``).
_ENCODER_LAYER = {**attention("self_attention", "self_attn.", PROJECTIONS),
                  **both("self_attention.norm", "self_attn_layer_norm"), **both("feed_forward.linear_in", "fc1"),
                  **both("feed_forward.linear_out", "fc2"), **both("feed_forward.norm", "final_layer_norm")}
BART_LAYERS = {"encoder": _ENCODER_LAYER,
               "decoder": {**_ENCODER_LAYER, **attention("cross_attention", "encoder_attn.", PROJECTIONS),
                           **both("cross_attention.norm", "encoder_attn_layer_norm")}}


# transformers' ACT2FN name → ours. The tanh approximations of GELU are one function written four ways (they
# differ by float rounding only); prelu and xielu learn parameters no config of ours holds.
HF_ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu", "gelu_python": "gelu",
                  "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_python_tanh": "gelu_tanh",
                  "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh", "gelu_10": "gelu_clipped",
                  "quick_gelu": "quick_gelu", "relu2": "relu2", "relu6": "relu6", "leaky_relu": "leaky_relu",
                  "mish": "mish", "hardswish": "hardswish", "tanh": "tanh", "sigmoid": "sigmoid", "linear": "linear",
                  "sqrtsoftplus": "sqrt_softplus", "laplace": "laplace"}


def hf_sizes(hf: dict[str, Any]) -> dict[str, int]:
    """Our heads and feed-forward widths for a Hugging Face encoder-decoder's config.json: the decoder's own
    only where they differ from the encoder's, so that a model with equal sides has the config it always had."""
    decoder_heads, decoder_d_ff = hf["decoder_attention_heads"], hf["decoder_ffn_dim"]
    return {"heads": hf["encoder_attention_heads"], "d_ff": hf["encoder_ffn_dim"],
            "decoder_heads": 0 if decoder_heads == hf["encoder_attention_heads"] else decoder_heads,
            "decoder_d_ff": 0 if decoder_d_ff == hf["encoder_ffn_dim"] else decoder_d_ff}


def hf_activation(source: Source, hf: dict[str, Any]) -> str:
    """Our activation for a Hugging Face encoder-decoder's config.json."""
    activation = HF_ACTIVATIONS.get(hf["activation_function"])
    if activation is None:
        raise source.error(f"activation_function {hf['activation_function']!r} is not supported "
                           f"({', '.join(HF_ACTIVATIONS)})")
    return activation


# Hugging Face folders

def hf_model_type(folder: Path) -> str | None:
    """``model_type`` of a Hugging Face folder's config.json, or None when there is none to read."""
    data = peek_json(folder / "config.json") if folder.is_dir() else None
    return data.get("model_type") if isinstance(data, dict) and isinstance(data.get("model_type"), str) else None


def read_hf_config(source: Source) -> tuple[Path, dict[str, Any]]:
    """The folder's config.json as a dict (and its path, for error lines)."""
    path = source.path / "config.json"
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(path, "is not a JSON object")
    return path, data


@dataclass(frozen=True)
class HfFolder:
    """A Hugging Face folder opened for conversion: its inspection, config.json as the importer read it
    (``hf``, the inspection's ``found``), the state dict and the file it came from."""

    inspection: Inspection
    hf: dict[str, Any]
    state: dict[str, Tensor]
    weights_file: Path


def open_hf_folder(source: Source, settings: Settings, inspect: Callable[[Source, Settings], Inspection], *,
                   vocabularies: tuple[str | None, str | None],
                   brings: str = "a Hugging Face folder brings its own tokenizer") -> HfFolder:
    """How every Hugging Face importer's ``convert`` begins: vocabulary files named by the user are refused (the
    folder has its own: ``brings`` says what), the folder is inspected and its weights are read."""
    if any(vocabularies):
        raise source.error(f"{brings}; drop --src-vocab/--tgt-vocab")
    inspection = inspect(source, settings)
    state, weights_file = read_hf_weights(source)
    return HfFolder(inspection, inspection.found, state, weights_file=weights_file)


def read_hf_weights(source: Source) -> tuple[dict[str, Tensor], Path]:
    """The state dict of a Hugging Face folder: ``model.safetensors``, else ``pytorch_model.bin`` (read safely)."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = source.path / name
        if path.is_file():
            payload = read_safetensors(path) if name.endswith(".safetensors") else \
                safe_load.load(path, trust=source.trust)
            if not isinstance(payload, dict):
                raise CheckpointError(path, f"holds {type(payload).__name__}, not a state dict")
            return payload, path
    raise source.error("the folder has neither model.safetensors nor pytorch_model.bin")


# How multilingual tokenizers write language codes: mBART (en_XX), NLLB (eng_Latn), M2M100 (__en__).
LANGUAGE_CODE = re.compile(r"[a-z]{2}_[A-Z]{2}|[a-z]{3}_[A-Z][a-z]{3}|__[a-z]{2,3}__")


def tokenizer_json_pair(source: Source, config: Any,
                        source_bos: int) -> tuple[TokenizerJsonTokenizer, TokenizerJsonTokenizer]:
    """The folder's tokenizer.json for both sides: sources framed by its post-processor, as transformers
    does; labels for ids the file lacks read ``<id N>`` (``config``: the converted model's, for its
    vocabulary size and special ids). Special tokens shaped like language codes are the tokenizers'
    languages (none chosen yet)."""
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
    named = json.loads(definition)["model"].get("unk_token")  # WordPiece's [UNK]: where no piece is <unk>
    if unk is None and isinstance(named, str) and named in pieces:
        unk = pieces.index(named)
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


def key_prefix(state: dict[str, Tensor]) -> str:
    return "model." if any(key.startswith("model.") for key in state) else ""


def map_bart_layers(weights: WeightMap, prefix: str, config: TransformerConfig) -> None:
    """The layers and position tables every family of this layout (and FSMT, and fairseq's transformer) names
    alike: :data:`BART_LAYERS` under ``{prefix}{encoder,decoder}.layers.N.``; ``{prefix}{side}.embed_positions.weight``
    (learned: loaded; a sinusoid: checked against ours and rebuilt); the norms of the embeddings
    (``layernorm_embedding``) and after each stack (``layer_norm``) where the config has them;
    ``{prefix}{side}.version`` (a format marker)."""
    map_stacks(weights, config, {side: (f"{prefix}{side}.layers.{{layer}}.", names)
                                 for side, names in BART_LAYERS.items()})
    for side, ours in (("encoder", "src"), ("decoder", "tgt")):
        positions = f"{prefix}{side}.embed_positions.weight"
        if config.positions == "learned":
            weights.copy(f"{ours}_embedding.learned_positions.weight", positions)
        else:  # a fixed table: rebuilt from the config, a saved copy must be the same sinusoid
            table = sinusoid_table(config.max_len + config.position_offset, config.d_model, config.positions)
            if config.positions == "fairseq":
                table[config.pad_id] = 0.0  # fairseq's row for padding tokens
            fixed_positions(weights, positions, expected=table)
        if config.embedding_norm:
            map_names(weights, both(f"{ours}_embedding.norm", f"{prefix}{side}.layernorm_embedding"))
        if config.final_norm_of(side):
            map_names(weights, both(f"{side}_norm", f"{prefix}{side}.layer_norm"))
        weights.ignore(f"{prefix}{side}.version")  # a format marker


def bpe_tokenizer(path: Path, symbols: dict[str, int], merges: list[tuple[str, ...]], unk: str, vocab_size: int):
    """A ``tokenizers`` BPE model (``</w>`` ending a word's last symbol) over ``symbols`` → id; the symbols the
    merges make that ``symbols`` lacks get ids from ``vocab_size`` on, for a ``beyond_is_unknown`` tokenizer: the
    library merges only symbols it has ids for, the Python tokenizers merge first and look up after."""
    from tokenizers import Tokenizer, models

    symbols, beyond = dict(symbols), vocab_size
    for first, second in merges:
        for symbol in (first, second, first + second):
            if symbol not in symbols:
                symbols[symbol] = beyond
                beyond += 1
    try:
        return Tokenizer(models.BPE(vocab=symbols, merges=merges, unk_token=unk, end_of_word_suffix="</w>"))
    except Exception as error:  # the library's own exception type
        raise CheckpointError(path, f"cannot be read as BPE merges ({str(error).splitlines()[0]})") from None


def piece_ids(path: Path) -> dict[str, int]:
    data = read_json(path)
    if not isinstance(data, dict) or not all(isinstance(key, str) and isinstance(value, int)
                                             and not isinstance(value, bool) and value >= 0
                                             for key, value in data.items()):
        raise CheckpointError(path, "is not a piece → id object")
    return data


def checked_family(path: Path, data: dict[str, Any], *, types: tuple[str, ...], classes: dict[str, str],
                   imports: str, model: str) -> str:
    """config.json's model type, one of ``types``, and where the file lists its classes one of ``classes`` (class
    name → model type: the kind imported, ``model`` in words); else one line naming what this version ``imports``."""
    model_type = data.get("model_type")
    if model_type not in types:
        raise CheckpointError(path, f"a Hugging Face {str(model_type)[:40]} model; this version imports {imports} "
                                    f"model types {', '.join(types)}")
    listed = [name for name in data.get("architectures") or [] if isinstance(name, str)]
    if listed and not any(classes.get(name) == model_type for name in listed):
        raise CheckpointError(path, f"holds a {', '.join(listed)[:60]}; attnviz imports {model} "
                                    f"({', '.join(name for name, kind in classes.items() if kind == model_type)})")
    return model_type
