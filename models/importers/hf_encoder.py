"""Hugging Face encoder-only models: ``BertForMaskedLM``, ``RobertaForMaskedLM``, ``DistilBertForMaskedLM`` and the
bare ``BertModel``, ``RobertaModel``, ``DistilBertModel`` (docs/checkpoint-formats.md#hf-encoder).

Files: ``config.json``, ``model.safetensors`` or ``pytorch_model.bin`` (read safely), ``tokenizer.json`` (WordPiece or
BPE, run with the ``tokenizers`` library; a sentence framed by its post-processor, ``[CLS] … [SEP]`` or
``<s> … </s>``, as transformers frames it). The masked-language-model head is imported where the weights hold it; a
bare encoder gives attention only. The mask token (``[MASK]``, ``<mask>``) and the framing tokens are read from
tokenizer.json. What these families' code does that config.json does not say: RoBERTa numbers positions from
``pad_token_id + 1`` and its head's activation is GELU whatever ``hidden_act`` says; DistilBERT has no token types.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..errors import CheckpointError
from ..nn.encoder_config import EncoderOnlyConfig
from ..storage.files import peek_json
from .common import Inspection, Settings, Source, WeightMap
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import HF_ACTIVATIONS, checked_family, open_hf_folder, read_hf_config, tokenizer_json_pair

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=10, hf_folder=True)  # when detection asks this format (contract.py): after the others
MODEL_TYPES = ("bert", "roberta", "distilbert")  # config.json's model_type
CLASSES = {"BertForMaskedLM": "bert", "BertModel": "bert", "RobertaForMaskedLM": "roberta",
           "RobertaModel": "roberta", "DistilBertForMaskedLM": "distilbert", "DistilBertModel": "distilbert"}
ACCEPTED: dict[str, str] = {}  # config.json and tokenizer.json say everything
BASE = {"bert": "bert.", "roberta": "roberta.", "distilbert": "distilbert."}  # the encoder's prefix under a head
MASKS, STARTS, ENDS = ("[MASK]", "<mask>"), ("[CLS]", "<s>"), ("[SEP]", "</s>")


def claims(source: Source) -> bool:
    """A folder whose config.json names an encoder of these families."""
    data = peek_json(source.path / "config.json") if source.path.is_dir() else None
    if not isinstance(data, dict):
        return False
    classes = data.get("architectures") if isinstance(data.get("architectures"), list) else []
    return data.get("model_type") in MODEL_TYPES or any(name in CLASSES for name in classes)


def _family(path: Path, data: dict[str, Any]) -> str:
    model_type = checked_family(path, data, types=MODEL_TYPES, classes=CLASSES, imports="encoder-only",
                                model="the masked language model or the bare encoder")
    kind = data.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise CheckpointError(path, f"position_embedding_type {str(kind)[:30]!r} is not supported (absolute only)")
    return model_type


def _read_tokenizer(source: Source) -> dict[str, Any]:
    """tokenizer.json's largest id and its special tokens' ids by content; one line when it is absent or unreadable."""
    path = source.path / "tokenizer.json"
    if not path.is_file():
        raise source.error("the folder has no tokenizer.json (attnviz reads an encoder's WordPiece or BPE tokenizer "
                           "from it)")
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
        vocab = definition["model"]["vocab"]
        added = definition.get("added_tokens") or []
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
        specials = {token["content"]: token["id"] for token in added
                    if isinstance(token, dict) and isinstance(token.get("id"), int)}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(path, f"cannot be read as a tokenizer.json ({error})") from None
    largest = max((index for index in [*ids, *specials.values()] if isinstance(index, int)), default=-1)
    return {"largest": largest, "specials": specials}


def inspect(source: Source, settings: Settings) -> Inspection:
    path, data = read_hf_config(source)
    family = _family(path, data)
    tokenizer = _read_tokenizer(source)
    found = {**data, "family": family, "tokenizer": tokenizer}
    shown = {key: data[key] for key in ("model_type", "architectures", "vocab_size", "hidden_size", "dim",
                                        "num_hidden_layers", "n_layers", "num_attention_heads", "n_heads")
             if key in data}
    return Inspection(NAME, source.path, shown, accepted=ACCEPTED, found=found)


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    folder = open_hf_folder(source, settings, inspect, vocabularies=(src_vocab, tgt_vocab))
    hf, state = folder.hf, current_names(folder.state)
    family = hf["family"]
    prefix = BASE[family] if any(key.startswith(BASE[family]) for key in state) else ""
    config = _our_config(source, hf, state, prefix=prefix)
    return Converted(config, state, weights_file=folder.weights_file,
                     weights=partial(_map_weights, state, config=config, family=family, prefix=prefix,
                                     file=folder.weights_file),
                     tokenizers=partial(_tokenizers, source, config),
                     provenance=Provenance(source.path, folder.inspection.inferred,
                                           vocabularies={"src": "tokenizer.json", "tgt": "tokenizer.json"},
                                           details={"family": family, "mlm_head": config.mlm_head}))


def current_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The state dict with the names transformers reads it under: the LayerNorms' ``gamma``/``beta`` of the first
    BERT checkpoints (bert-base-uncased's among them) are ``weight``/``bias``."""
    renamed = {"gamma": "weight", "beta": "bias"}
    return {(f"{key.rpartition('.')[0]}.{renamed[key.rpartition('.')[2]]}" if key.rpartition(".")[2] in renamed
             else key): tensor for key, tensor in state.items()}


HEAD_KEYS = {"bert": ("cls.predictions.transform.dense.weight", "cls.predictions.decoder.weight"),
             "roberta": ("lm_head.dense.weight", "lm_head.decoder.weight"),
             "distilbert": ("vocab_transform.weight", "vocab_projector.weight")}
TABLES = {"bert": "embeddings.word_embeddings.weight", "roberta": "embeddings.word_embeddings.weight",
          "distilbert": "embeddings.word_embeddings.weight"}


def _tied(state: dict[str, Tensor], family: str, prefix: str) -> bool:
    """Whether the head's output matrix is the token table: none saved, or a saved copy equal to it."""
    output, table = state.get(HEAD_KEYS[family][1]), state.get(prefix + TABLES[family])
    return output is None or (table is not None and output.shape == table.shape
                              and (output.data_ptr() == table.data_ptr() or bool((output == table).all())))


def _special(source: Source, specials: dict[str, int], names: tuple[str, ...], *, fallback: Any, what: str) -> int:
    found = next((specials[name] for name in names if name in specials), fallback)
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise source.error(f"tokenizer.json has no {what} token ({' or '.join(names)})")
    return found


def _sizes(source: Source, hf: dict[str, Any], family: str) -> dict[str, Any]:
    """Sizes and activations in our names from config.json."""
    if family == "distilbert":
        activation = HF_ACTIVATIONS.get(hf.get("activation", "gelu"))
        sizes = {"d_model": hf["dim"], "layers": hf["n_layers"], "heads": hf["n_heads"], "d_ff": hf["hidden_dim"],
                 "type_vocab_size": 0, "layer_norm_eps": 1e-12}
        head_activation = activation
    else:
        activation = HF_ACTIVATIONS.get(hf.get("hidden_act", "gelu"))
        sizes = {"d_model": hf["hidden_size"], "layers": hf["num_hidden_layers"],
                 "heads": hf["num_attention_heads"], "d_ff": hf["intermediate_size"],
                 "type_vocab_size": hf.get("type_vocab_size", 2), "layer_norm_eps": float(hf.get("layer_norm_eps",
                                                                                                  1e-12))}
        head_activation = "gelu" if family == "roberta" else activation
    if activation is None:
        raise source.error(f"activation {hf.get('hidden_act', hf.get('activation'))!r} is not supported")
    return {**sizes, "activation": activation, "head_activation": head_activation}


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor], *, prefix: str) -> EncoderOnlyConfig:
    family, tokenizer = hf["family"], hf["tokenizer"]
    vocab_size = hf["vocab_size"]
    if tokenizer["largest"] >= vocab_size:
        raise CheckpointError(source.path / "tokenizer.json",
                              f"has token id {tokenizer['largest']}, beyond the model's vocabulary of {vocab_size} "
                              f"(the tokenizer does not belong to these weights)")
    specials = tokenizer["specials"]
    pad = hf.get("pad_token_id")
    pad = pad if isinstance(pad, int) and 0 <= pad < vocab_size else 0
    rows = hf.get("max_position_embeddings", 512)
    after_padding = family == "roberta"
    try:
        return EncoderOnlyConfig(
            arch="encoder-only", vocab_size=vocab_size, **_sizes(source, hf, family),
            max_len=rows - (pad + 1 if after_padding else 0),
            position_style="after_padding" if after_padding else "index",
            mlm_head=HEAD_KEYS[family][0] in state, tie_output=_tied(state, family, prefix), pad_id=pad,
            bos_id=_special(source, specials, STARTS, fallback=hf.get("bos_token_id"), what="sentence start"),
            eos_id=_special(source, specials, ENDS, fallback=hf.get("eos_token_id"), what="sentence end"),
            mask_id=next((specials[name] for name in MASKS if name in specials), -1))
    except (TypeError, KeyError) as error:
        raise source.error(f"config.json: {error}") from None


def _pair(weights: WeightMap, ours: str, theirs: str) -> None:
    weights.copy(f"{ours}.weight", f"{theirs}.weight")
    weights.copy(f"{ours}.bias", f"{theirs}.bias")


def _map_weights(state: dict[str, Tensor], *, config: EncoderOnlyConfig, family: str, prefix: str,
                 file: Path) -> WeightMap:
    weights = WeightMap(Source(file), state, NAME)
    weights.copy("embedding.tokens.weight", f"{prefix}embeddings.word_embeddings.weight")
    weights.copy("embedding.positions.weight", f"{prefix}embeddings.position_embeddings.weight")
    if config.type_vocab_size:
        weights.copy("embedding.token_types.weight", f"{prefix}embeddings.token_type_embeddings.weight")
    _pair(weights, "embedding.norm", f"{prefix}embeddings.LayerNorm")
    weights.ignore(f"{prefix}embeddings.position_ids", f"{prefix}embeddings.token_type_ids")  # buffers
    for index in range(config.layers):
        ours = f"layers.{index}."
        if family == "distilbert":
            _map_distilbert_layer(weights, ours, f"{prefix}transformer.layer.{index}.")
        else:
            _map_bert_layer(weights, ours, f"{prefix}encoder.layer.{index}.")
    # the pooler, and the next-sentence head BERT was pre-trained with (bert-base-uncased keeps it): neither reads
    # the masked positions
    weights.ignore(*(key for key in state if key.startswith((f"{prefix}pooler.", "cls.seq_relationship."))))
    if config.mlm_head:
        _map_head(weights, config, family=family, prefix=prefix)
    return weights


def _map_bert_layer(weights: WeightMap, ours: str, theirs: str) -> None:
    for proj, name in (("self.query", "query"), ("self.key", "key"), ("self.value", "value"),
                       ("output.dense", "output")):
        _pair(weights, f"{ours}self_attention.attention.{name}", f"{theirs}attention.{proj}")
    _pair(weights, f"{ours}self_attention.norm", f"{theirs}attention.output.LayerNorm")
    _pair(weights, f"{ours}feed_forward.linear_in", f"{theirs}intermediate.dense")
    _pair(weights, f"{ours}feed_forward.linear_out", f"{theirs}output.dense")
    _pair(weights, f"{ours}feed_forward.norm", f"{theirs}output.LayerNorm")


def _map_distilbert_layer(weights: WeightMap, ours: str, theirs: str) -> None:
    for proj, name in (("q_lin", "query"), ("k_lin", "key"), ("v_lin", "value"), ("out_lin", "output")):
        _pair(weights, f"{ours}self_attention.attention.{name}", f"{theirs}attention.{proj}")
    _pair(weights, f"{ours}self_attention.norm", f"{theirs}sa_layer_norm")
    _pair(weights, f"{ours}feed_forward.linear_in", f"{theirs}ffn.lin1")
    _pair(weights, f"{ours}feed_forward.linear_out", f"{theirs}ffn.lin2")
    _pair(weights, f"{ours}feed_forward.norm", f"{theirs}output_layer_norm")


def _map_head(weights: WeightMap, config: EncoderOnlyConfig, *, family: str, prefix: str) -> None:
    """The head's transform and output; the output's bias is saved once or twice (a tied copy), the output matrix
    only when it is not the token table."""
    dense, norm, output, biases = {
        "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.decoder",
                 ("cls.predictions.bias", "cls.predictions.decoder.bias")),
        "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder", ("lm_head.bias", "lm_head.decoder.bias")),
        "distilbert": ("vocab_transform", "vocab_layer_norm", "vocab_projector", ("vocab_projector.bias",)),
    }[family]
    _pair(weights, "head.dense", dense)
    _pair(weights, "head.norm", norm)
    bias = next((key for key in biases if weights.has(key)), biases[0])
    weights.copy("head.output.bias", bias)
    weights.ignore_copies(bias, *biases)
    if config.tie_output:
        weights.ignore_copies(f"{prefix}{TABLES[family]}", f"{output}.weight")
    else:
        weights.copy("head.output.weight", f"{output}.weight")


def _tokenizers(source: Source, config: EncoderOnlyConfig) -> Tokenizers:
    """tokenizer.json for both sides: the sentence framed by its post-processor, the predictions read as they are."""
    source_side, target_side = tokenizer_json_pair(source, config, source_bos=config.bos_id)
    return Tokenizers(source_side, target_side, "tokenizer.json (the tokenizers library)")
