"""nanoGPT's ``ckpt.pt`` (karpathy/nanoGPT's train.py) with its tokenizer (docs/checkpoint-formats.md#nanogpt).

The file is the dict train.py saves: ``model`` (the state dict; ``_orig_mod.`` before every key when the model
was compiled, dropped as its sample.py drops it), ``model_args`` (``n_layer``, ``n_head``, ``n_embd``,
``block_size``, ``bias``, ``vocab_size``, ``dropout``), ``optimizer``, ``config`` (train.py's settings),
``iter_num`` and ``best_val_loss``, read without running code from it (plain values and tensors only). Its model:
learned positions, pre-LN blocks of LayerNorm (a bias only with ``bias``), causal self-attention through one
fused ``c_attn`` (``nn.Linear``: ``[3E, E]``, q, k, v one after the other), a GELU MLP (exact, erf) four times as
wide, a final ``ln_f`` and the output tied to the token table.

The tokenizer: a character model's ``meta.pkl`` (prepare.py's ``{vocab_size, itos, stoi}``, read without running
code) beside the checkpoint, or GPT-2's BPE (tiktoken's ``gpt2``, which train.py uses without a meta.pkl) as a
Hugging Face ``tokenizer.json``; ``--set tokenizer=PATH`` names a folder holding either, or the file itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..errors import CheckpointError, ConfigError
from ..nn.config import DecoderOnlyConfig
from ..text.tokenizers import WordTokenizer
from . import safe_load
from .common import Inspection, Settings, Source, WeightMap, tensor_dict
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_causal import language_model_tokenizers

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=0)  # when detection asks this format (contract.py): first, its model_args are its own
ACCEPTED = {
    "tokenizer": "a folder holding meta.pkl or tokenizer.json, or the file itself (default: meta.pkl beside the "
                 "checkpoint)",
    "end": "a character model's character that ends a continuation and pads prompts (default: a newline)",
}
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")
COMPILED_PREFIX = "_orig_mod."  # what torch.compile puts before every key (sample.py drops it)
GPT2_VOCABULARIES = (50257, 50304)  # GPT-2's BPE, and train.py's size for it rounded up to a multiple of 64
GPT2_END = "<|endoftext|>"
NORM_EPS = 1e-5  # model.py's LayerNorm: F.layer_norm(..., 1e-5)


def claims(source: Source) -> bool:
    """A file holding the dict train.py saves: ``model_args`` beside ``model`` (only a torch.save file or a pickle
    is read: a toolkit's config.yaml beside its weights is another format's)."""
    if not source.path.is_file():
        return False
    with open(source.path, "rb") as handle:
        head = handle.read(4)
    payload = source.payload if head.startswith((b"PK\x03\x04", b"\x80")) else None
    return isinstance(payload, Mapping) and isinstance(payload.get("model_args"), Mapping) and "model" in payload


def _model_args(source: Source, payload: Mapping[str, Any], state: Mapping[str, Tensor]) -> dict[str, Any]:
    """model_args, checked; ``bias`` (added to nanoGPT in February 2023) read from the tensors when it is absent."""
    args = dict(payload["model_args"])
    if "bias" not in args:
        args["bias"] = "transformer.ln_f.bias" in state
    absent = [key for key in MODEL_ARGS if key not in args]
    if absent:
        raise source.error(f"model_args lacks {', '.join(absent)} (train.py saves n_layer, n_head, n_embd, "
                           f"block_size, bias, vocab_size)")
    wrong = [key for key in MODEL_ARGS if key != "bias" and not (type(args[key]) is int and args[key] > 0)]
    if wrong or not isinstance(args["bias"], bool):
        name = wrong[0] if wrong else "bias"
        raise source.error(f"model_args: {name} is {str(args[name])[:30]!r}, not "
                           f"{'true or false' if name == 'bias' else 'a positive integer'}")
    return args


def inspect(source: Source, settings: Settings) -> Inspection:
    payload = source.payload
    if not claims(source):
        raise source.error("not a nanoGPT checkpoint (train.py saves a dict with model_args and model)")
    state = tensor_dict(payload["model"])
    if state is None:
        raise source.error("its model entry is not a state dict of tensors")
    state = {key[len(COMPILED_PREFIX):] if key.startswith(COMPILED_PREFIX) else key: tensor
             for key, tensor in state.items()}
    args = _model_args(source, payload, state)
    config = payload.get("config") if isinstance(payload.get("config"), Mapping) else {}
    shown = {**{key: args[key] for key in (*MODEL_ARGS, "dropout") if key in args},
             **{key: _number(payload[key]) for key in ("iter_num", "best_val_loss")
                if _number(payload.get(key)) is not None},
             **{key: config[key] for key in ("dataset", "init_from") if isinstance(config.get(key), str)}}
    inspection = Inspection(NAME, source.path, shown, accepted=ACCEPTED,
                            found={"args": args, "state": state, "config": dict(config)})
    if not settings.has("tokenizer") and not (source.path.parent / "meta.pkl").is_file():
        inspection.missing["tokenizer"] = _tokenizer_needed(args["vocab_size"], config)
    return inspection


def _tokenizer_needed(vocab_size: int, config: Mapping[str, Any]) -> str:
    """What to give as ``tokenizer`` when no meta.pkl lies beside the checkpoint: which tokenizer the model needs."""
    if vocab_size in GPT2_VOCABULARIES:
        return (f"PATH (a Hugging Face gpt2 tokenizer folder or its tokenizer.json: GPT-2's BPE, which nanoGPT "
                f"encodes with tiktoken's gpt2, vocab_size {vocab_size})")
    dataset = config.get("dataset") if isinstance(config.get("dataset"), str) else "DATASET"
    return (f"PATH (the meta.pkl its prepare.py wrote, data/{dataset[:40]}/meta.pkl, or its folder: this character "
            f"model's vocabulary of {vocab_size}; or copy it beside the checkpoint)")


def _number(value: Any) -> int | float | None:
    """A training count or loss as a plain number (train.py saves ``best_val_loss`` as a one-element tensor)."""
    if isinstance(value, Tensor) and value.numel() == 1:
        value = round(value.item(), 6) if value.is_floating_point() else value.item()
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    if src_vocab or tgt_vocab:
        raise source.error("a nanoGPT model's tokenizer is its meta.pkl or a tokenizer.json: give --set "
                           "tokenizer=PATH, not --src-vocab/--tgt-vocab")
    inspection = inspect(source, settings)
    inspection.require()
    found = inspection.found
    args = found["args"]
    tokenizer = _find_tokenizer(source, settings)
    specials = _specials(source, settings, tokenizer, vocab_size=args["vocab_size"])
    try:
        config = DecoderOnlyConfig(
            arch="decoder-only", vocab_size=args["vocab_size"], d_model=args["n_embd"], layers=args["n_layer"],
            heads=args["n_head"], d_ff=4 * args["n_embd"], dropout=float(args.get("dropout") or 0.0),
            max_len=args["block_size"], positions="learned", norm_kind="layer_norm", norm_eps=NORM_EPS,
            norm_bias=args["bias"], activation="gelu", gated_ffn=False, qkv_bias=args["bias"],
            out_bias=args["bias"], ffn_bias=args["bias"], tie_output=True, **specials)
        config.validate()
    except ConfigError as error:
        raise source.error(f"model_args: {error}") from None
    vocabulary = "meta.pkl" if tokenizer.suffix == ".pkl" else "tokenizer.json"
    return Converted(config, found["state"], weights_file=source.path,
                     weights=partial(_map_weights, source, found["state"], config=config),
                     tokenizers=partial(_tokenizers, tokenizer, config),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": str(tokenizer), "tgt": str(tokenizer)},
                                           details={"tokenizer": vocabulary}))


# The tokenizer

def _find_tokenizer(source: Source, settings: Settings) -> Path:
    """meta.pkl or tokenizer.json: where ``--set tokenizer`` points, else meta.pkl beside the checkpoint (inspect
    asked for the setting when there is none)."""
    named = settings.value("tokenizer", str)
    if named is not None:
        path = Path(named).expanduser()
        if path.is_dir():
            found = [path / name for name in ("meta.pkl", "tokenizer.json") if (path / name).is_file()]
            if not found:
                raise CheckpointError(path, "holds neither meta.pkl (a nanoGPT character vocabulary) nor "
                                            "tokenizer.json")
            return found[0]
        if path.is_file() and (path.suffix == ".pkl" or path.name == "tokenizer.json"):
            return path
        raise CheckpointError(path, "no such folder, meta.pkl or tokenizer.json" if not path.exists()
                              else "is neither a folder, a meta.pkl nor a tokenizer.json")
    return source.path.parent / "meta.pkl"


def _characters(path: Path, vocab_size: int) -> list[str]:
    """meta.pkl's characters in id order (``itos``; checked against ``stoi`` and the model's vocabulary)."""
    meta = safe_load.load(path)
    itos = meta.get("itos") if isinstance(meta, Mapping) else None
    stoi = meta.get("stoi") if isinstance(meta, Mapping) else None
    if not isinstance(itos, Mapping) or not isinstance(stoi, Mapping):
        raise CheckpointError(path, "is not nanoGPT's meta.pkl (a dict with itos and stoi)")
    if not all(type(index) is int for index in itos) or sorted(itos) != list(range(len(itos))) \
            or not all(isinstance(c, str) and len(c) == 1 for c in itos.values()):
        raise CheckpointError(path, "itos must map the ids 0..N-1 to single characters")
    if any(stoi.get(character) != index for index, character in itos.items()) or len(stoi) != len(itos):
        raise CheckpointError(path, "its stoi and itos disagree")
    if len(itos) > vocab_size:
        raise CheckpointError(path, f"has {len(itos)} characters, more than the model's vocabulary of {vocab_size} "
                                    f"(the vocabulary does not belong to these weights)")
    return [itos[index] for index in range(len(itos))]


def _specials(source: Source, settings: Settings, tokenizer: Path, *, vocab_size: int) -> dict[str, int]:
    """nanoGPT has no special tokens: a continuation runs as long as asked. Ours needs an end token (a character
    model's ``end``, a newline unless set; GPT-2's ``<|endoftext|>``), which also starts and pads."""
    if tokenizer.suffix == ".json":
        end = _tokenizer_json_id(tokenizer, GPT2_END)
        if end is None or end >= vocab_size:
            raise CheckpointError(tokenizer, f"has no {GPT2_END} below the model's vocabulary of {vocab_size}")
    else:
        characters = _characters(tokenizer, vocab_size)
        wanted = settings.value("end", str, "\n")
        if wanted not in characters:
            raise source.error(f"the end character {wanted!r} is not in {tokenizer.name}: give --set end=CHARACTER")
        end = characters.index(wanted)
    return {"bos_id": end, "eos_id": end, "pad_id": end}


def _tokenizer_json_id(path: Path, piece: str) -> int | None:
    """The id of ``piece`` in a tokenizer.json (its added tokens first, then its model's vocabulary), or None."""
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as a tokenizer.json ({error})") from None
    added = definition.get("added_tokens") if isinstance(definition, dict) else None
    for token in added or []:
        if isinstance(token, dict) and token.get("content") == piece and isinstance(token.get("id"), int):
            return token["id"]
    vocab = (definition.get("model") or {}).get("vocab") if isinstance(definition, dict) else None
    found = vocab.get(piece) if isinstance(vocab, dict) else None
    return found if isinstance(found, int) else None


def _tokenizers(path: Path, config: DecoderOnlyConfig) -> Tokenizers:
    if path.suffix == ".json":
        return language_model_tokenizers(Source(path.parent), config)
    characters = _characters(path, config.vocab_size)
    vocabulary = characters + [f"<id {index}>" for index in range(len(characters), config.vocab_size)]
    specials = {"pad": config.pad_id, "unk": None, "bos": config.bos_id, "eos": config.eos_id}
    tokenizer = WordTokenizer(vocabulary, specials, split="characters-exact")
    tokenizer.normalization = "none"  # nanoGPT encodes each character as it is typed
    target = WordTokenizer(vocabulary, specials, split="characters-exact")
    target.normalization = "none"
    return Tokenizers(tokenizer, target, "meta.pkl's characters, one id each (nanoGPT's stoi), nothing normalised")


# The weights

def _map_weights(source: Source, state: dict[str, Tensor], *, config: DecoderOnlyConfig) -> WeightMap:
    """model.py's names into ours; its layers are ``nn.Linear`` (``[out, in]``, as ours), ``c_attn`` holding q, k
    and v one after the other along its output."""
    weights = WeightMap(source, state, NAME)
    d = config.d_model
    parts = ("weight", "bias") if config.norm_bias else ("weight",)
    weights.copy("tokens.weight", "transformer.wte.weight")
    weights.copy("positions.weight", "transformer.wpe.weight")
    for index in range(config.layers):
        theirs, ours = f"transformer.h.{index}.", f"layers.{index}."
        for part in parts:
            weights.copy(f"{ours}attention_norm.{part}", f"{theirs}ln_1.{part}")
            weights.copy(f"{ours}feed_forward_norm.{part}", f"{theirs}ln_2.{part}")
        for number, name in enumerate(("query", "key", "value")):
            weights.copy(f"{ours}attention.{name}.weight", f"{theirs}attn.c_attn.weight",
                         lambda w, number=number: w[number * d:(number + 1) * d].clone())
            if config.qkv_bias:
                weights.copy(f"{ours}attention.{name}.bias", f"{theirs}attn.c_attn.bias",
                             lambda b, number=number: b[number * d:(number + 1) * d].clone())
        for mine, their_name in (("attention.output", "attn.c_proj"), ("feed_forward.linear_in", "mlp.c_fc"),
                                 ("feed_forward.linear_out", "mlp.c_proj")):
            weights.copy(f"{ours}{mine}.weight", f"{theirs}{their_name}.weight")
            if config.ffn_bias:
                weights.copy(f"{ours}{mine}.bias", f"{theirs}{their_name}.bias")
        weights.ignore(f"{theirs}attn.bias")  # the causal mask model.py keeps as a buffer without flash attention
    for part in parts:
        weights.copy(f"norm.{part}", f"transformer.ln_f.{part}")
    weights.ignore_copies("transformer.wte.weight", "lm_head.weight")
    return weights
