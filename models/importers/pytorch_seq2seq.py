"""The PyTorch tutorial "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention"
(current, batched version: ``EncoderRNN`` + ``AttnDecoderRNN`` with ``BahdanauAttention``;
docs/checkpoint-formats.md#pytorch-seq2seq).

The tutorial never saves; users save the two state dicts. Layouts read here:
- a folder holding one ``encoder*`` and one ``decoder*`` file (``.pt``/``.pth``/``.bin``/``.safetensors``),
  each a state dict (or, trusted, a whole pickled module);
- one file holding a dict with an encoder and a decoder entry (``{'encoder': sd, 'decoder': sd}``,
  ``{'encoder_state_dict': ..., 'decoder_state_dict': ...}``, modules when trusted), optionally with the
  tutorial's ``Lang`` objects under ``input_lang``/``output_lang`` (trusted);
- one flat state dict whose keys start with ``encoder.`` and ``decoder.``.

The math is our ``gru-additive`` with ``additive_activation="tanh"`` and ``attention_query="hidden"``:
score = Va(tanh(Wa q + Ua k)) = Va(tanh([Wa | Ua] [q; k] + (ba + bu))), q the previous decoder hidden
state, context = softmax · encoder outputs (no value projection), GRU input [embedded; context]. The
vocabulary is the tutorial's ``Lang``: SOS=0, EOS=1, then words; text is normalised like its
``normalizeString``. The tutorial has no padding token; its batches pad with 0 (= SOS), and so do we.
The legacy (≤2022) location-based ``attn``/``attn_combine`` decoder is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..nn.config import RNNConfig
from ..errors import CheckpointError
from ..text.tokenizers import WORD_SPLITS, WordTokenizer
from . import safe_load
from .common import (
    Inspection, Settings, Source, WeightMap, find_state_dict, read_safetensors, refuse_unused, tensor_dict,
)
from .vocabularies import WORD_TOKENIZATION, check_vocab_size, read_vocabulary, special_id, tokens_from_object
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=7, folder=8)  # when detection asks this format (contract.py)
ACCEPTED = {
    "SOS_token": "id of SOS (default 0, as in the tutorial)",
    "EOS_token": "id of EOS (default 1)",
    "MAX_LENGTH": "longest sentence in tokens, end token included (default 10, as in the tutorial)",
    "tokenize": f"how text becomes words: {', '.join(WORD_SPLITS)} (default seq2seq-tutorial)",
}
SUFFIXES = (".pt", ".pth", ".bin", ".tar", ".safetensors", ".ckpt")


def _load_part(path: Path, trust: bool) -> Any:
    return read_safetensors(path) if path.suffix == ".safetensors" else safe_load.load(path, trust=trust)


def _folder_parts(folder: Path) -> dict[str, Path] | None:
    parts = {}
    for role in ("encoder", "decoder"):
        found = sorted(path for path in folder.iterdir()
                       if path.is_file() and path.name.lower().startswith(role) and path.suffix in SUFFIXES)
        if len(found) != 1:
            return None
        parts[role] = found[0]
    return parts


def _parts(source: Source) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Any]]:
    """Encoder and decoder state dicts, and any ``Lang`` objects found next to them."""
    if source.path.is_dir():
        files = _folder_parts(source.path)
        if files is None:
            raise source.error("the folder must hold exactly one encoder* and one decoder* file")
        states = {}
        for role, path in files.items():
            state = find_state_dict(_load_part(path, source.trust))
            if state is None:
                raise Source(path).error(f"holds no state dict for the {role}")
            states[role] = state
        return states["encoder"], states["decoder"], {}
    payload = source.payload
    if isinstance(payload, Mapping):
        found = {}
        for role in ("encoder", "decoder"):
            keys = [key for key in payload if isinstance(key, str) and role in key.lower()
                    and tensor_dict(payload[key]) is not None]
            if len(keys) == 1:
                found[role] = tensor_dict(payload[keys[0]])
        if len(found) == 2:
            langs = {key: payload[key] for key in ("input_lang", "output_lang") if key in payload}
            return found["encoder"], found["decoder"], langs
    state = find_state_dict(payload)
    if state is not None and all(any(k.startswith(f"{role}.") for k in state) for role in ("encoder", "decoder")):
        split = {role: {k[len(role) + 1:]: v for k, v in state.items() if k.startswith(role + ".")}
                 for role in ("encoder", "decoder")}
        refuse_unused(source, NAME, [k for k in state if not k.startswith(("encoder.", "decoder."))])
        return split["encoder"], split["decoder"], {}
    raise source.error("no encoder and decoder state dicts of the seq2seq tutorial in it")


def claims(source: Source) -> bool:
    if source.path.is_dir():
        files = _folder_parts(source.path)
        if files is None:
            return False
        state = find_state_dict(_load_part(files["decoder"], source.trust))
        return state is not None and ("attention.Wa.weight" in state or "attn.weight" in state)
    source.payload  # noqa: B018 - a file that cannot be read says so here, not "not this format"
    try:
        _, decoder, _ = _parts(source)
    except CheckpointError:
        return False
    return "attention.Wa.weight" in decoder or "attn.weight" in decoder


def inspect(source: Source, settings: Settings) -> Inspection:
    encoder, decoder, langs = _parts(source)
    if "attn.weight" in decoder and "attention.Wa.weight" not in decoder:
        raise source.error("the legacy (2017-2022) tutorial decoder with location-based attention (attn, "
                           "attn_combine) is not supported; only the current BahdanauAttention one")
    for name, state in (("encoder", encoder), ("decoder", decoder)):
        if "gru.weight_ih_l1" in state:
            raise source.error(f"the {name} GRU has more than one layer, which the tutorial never builds")
        if "embedding.weight" not in state:
            raise source.error(f"missing weights for the {NAME} layout: {name} embedding.weight")
    hidden = int(encoder["embedding.weight"].shape[1])
    inferred = {"input_size": int(encoder["embedding.weight"].shape[0]), "hidden_size": hidden,
                "output_size": int(decoder["embedding.weight"].shape[0])}
    inspection = Inspection(NAME, source.path, inferred, accepted=ACCEPTED)
    for side, lang in (("src", "input_lang"), ("tgt", "output_lang")):
        if lang not in langs:
            inspection.vocabularies[side] = "one word a line, line number = id (the tutorial Lang's index2word)"
    inspection.found = (encoder, decoder, langs)
    return inspection


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    (encoder, decoder, langs) = inspection.found
    inspection.require(src_vocab, tgt_vocab)
    inferred = inspection.inferred
    src_tokens = _vocabulary(source, src_vocab, lang=langs.get("input_lang"), side="src")
    tgt_tokens = _vocabulary(source, tgt_vocab, lang=langs.get("output_lang"), side="tgt")
    check_vocab_size(source, src_tokens, rows=inferred["input_size"], side="src", origin=str(src_vocab or "input_lang"))
    check_vocab_size(source, tgt_tokens, rows=inferred["output_size"], side="tgt",
                     origin=str(tgt_vocab or "output_lang"))
    sos = special_id(tgt_tokens, ("SOS",), settings=settings, key="SOS_token", default=0)
    eos = special_id(tgt_tokens, ("EOS",), settings=settings, key="EOS_token", default=1)
    config = RNNConfig(arch="gru-additive", src_vocab_size=inferred["input_size"],
                       tgt_vocab_size=inferred["output_size"], hidden=inferred["hidden_size"],
                       max_len=settings.value("MAX_LENGTH", int, 10), attention_query="hidden",
                       additive_activation="tanh", pad_id=sos, bos_id=sos, eos_id=eos, src_append_eos=True)
    state = {**{f"encoder.{k}": v for k, v in encoder.items()}, **{f"decoder.{k}": v for k, v in decoder.items()}}

    def tokenizers() -> Tokenizers:
        for name, expected in (("SOS", sos), ("EOS", eos)):
            if name in src_tokens and src_tokens.index(name) != expected:
                raise source.error(f"the source vocabulary has {name} at {src_tokens.index(name)}, the target at "
                                   f"{expected}; the tutorial's two Langs share these ids")
        split = settings.value("tokenize", str, "seq2seq-tutorial", choices=WORD_SPLITS)
        specials = {"pad": sos, "unk": None, "bos": sos, "eos": eos}
        return Tokenizers(WordTokenizer(src_tokens, specials, split=split),
                          WordTokenizer(tgt_tokens, specials, split=split), WORD_TOKENIZATION)

    vocabularies = {"src": src_vocab or "input_lang in the file", "tgt": tgt_vocab or "output_lang in the file"}
    return Converted(config, {**encoder, **decoder}, weights_file=source.path,
                     weights=lambda: _map_weights(source, state), tokenizers=tokenizers,
                     provenance=Provenance(source.path, inferred, vocabularies=vocabularies))


def _vocabulary(source: Source, path: str | None, lang: Any, side: str) -> list[str]:
    if path is not None:
        return read_vocabulary(path, side=side, trust=source.trust)
    index2word = getattr(lang, "__dict__", {}).get("index2word")
    if not isinstance(index2word, Mapping):
        raise source.error(f"the {'input' if side == 'src' else 'output'}_lang object holds no index2word")
    return tokens_from_object(source.path, lang, side)  # ids from 0 without a gap, each a word


def _map_weights(source: Source, state: dict[str, Tensor]) -> WeightMap:
    weights = WeightMap(source, state, NAME)
    weights.copy("encoder.embedding.weight", "encoder.embedding.weight")
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        weights.copy(f"encoder.gru.{name}", f"encoder.gru.{name}")
        weights.copy(f"decoder.cell.{name[:-3]}", f"decoder.gru.{name}")  # nn.GRU layer 0 = nn.GRUCell
    weights.copy("decoder.embedding.weight", "decoder.embedding.weight")
    query, key = weights.get("decoder.attention.Wa.weight"), weights.get("decoder.attention.Ua.weight")
    if query is not None and key is not None:
        weights.put("decoder.attention.hidden.weight", "decoder.attention.Wa/Ua.weight", torch.cat([query, key], dim=1))
    query_bias, key_bias = weights.get("decoder.attention.Wa.bias"), weights.get("decoder.attention.Ua.bias")
    if query_bias is not None and key_bias is not None:
        weights.put("decoder.attention.hidden.bias", "decoder.attention.Wa/Ua.bias", query_bias + key_bias)
    for kind in ("weight", "bias"):
        weights.copy(f"decoder.attention.score.{kind}", f"decoder.attention.Va.{kind}")
        weights.copy(f"decoder.output.{kind}", f"decoder.out.{kind}")
    return weights
