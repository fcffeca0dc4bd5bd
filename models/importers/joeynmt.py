"""JoeyNMT 2.x model folders (docs/checkpoint-formats.md#joeynmt): a ``.ckpt`` (``torch.save`` of a dict with
``model_state`` and the trainer's state), the ``config.yaml`` it was trained with, and the vocabularies JoeyNMT
writes beside them (``src_vocab.txt`` / ``trg_vocab.txt``, or the config's ``voc_file``), plus the
sentencepiece model the config names when the data level is ``bpe``.

Transformer (``encoder.type``/``decoder.type`` ``transformer``): LayerNorm eps 1e-6 before (``layer_norm: pre``)
or after (``post``) each sublayer, pre-LN normalising the one input that query, keys and values come from; each
residual adds ``alpha × x`` (our ``residual_scale``); a LayerNorm after a stack only with ``layer_norm: pre``
named (unnamed, an encoder's layers are pre-LN, a decoder's post-LN, and neither has one); placements, final
norms, head counts and feed-forward widths are per side (``decoder_norm_position``, ``decoder_final_norm``..);
interleaved sinusoids from position 0 (stored as ``{encoder,decoder}.pe.pe``, checked, not loaded); token
vectors ×√d with ``embeddings.scale``; no bias on the output layer, which ``tied_softmax`` ties to the target
embedding; ``tied_embeddings`` shares one table. Sources end with ``</s>``; decoding starts from ``<s>``.

Recurrent (``type: recurrent``): JoeyNMT's bidirectional GRU/LSTM encoder and its RecurrentDecoder are our
``rnn-luong`` with the JoeyNMT options (docs/architectures.md#rnn-luong).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..nn.base import sinusoid_table
from ..nn.config import RNNConfig, TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..text.tokenizers import SentencePieceVocabTokenizer, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, layer_count, tensor_dict
from .vocabularies import check_vocab_size, read_vocabulary, subword_nmt_tokenizer
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import (
    From, Names, Zeros, attention, both, fixed_positions, map_layers, map_names, map_stacks, recurrent,
)

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=1, folder=5)  # when detection asks this format (contract.py)
ACCEPTED: dict[str, str] = {}  # config.yaml says everything; --src-vocab/--tgt-vocab replace the vocabulary files
CHECKPOINTS = ("best.ckpt", "latest.ckpt")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}  # JoeyNMT's name → ours
PROJECTIONS = {"query": "q_layer", "key": "k_layer", "value": "v_layer", "output": "output_layer"}
SPECIAL_DEFAULTS = {"unk": ("<unk>", 0), "pad": ("<pad>", 1), "bos": ("<s>", 2), "eos": ("</s>", 3)}
SUPPORTED = ("Transformer encoder and decoder (layer_norm pre/post, any alpha, relu/gelu/swish), and a recurrent "
             "bidirectional GRU/LSTM encoder with a RecurrentDecoder (bahdanau or luong attention, input feeding on "
             "or off, init_hidden bridge/last/zero, tanh attentional layer)")
LAYER_NORM_EPS = 1e-6
FEED_FORWARD = {**both("feed_forward.linear_in", "feed_forward.pwff_layer.0"),
                **both("feed_forward.linear_out", "feed_forward.pwff_layer.3"),
                **both("feed_forward.norm", "feed_forward.layer_norm")}
ENCODER_LAYER = {**attention("self_attention", "src_src_att.", PROJECTIONS),
                 **both("self_attention.norm", "layer_norm"), **FEED_FORWARD}
DECODER_LAYER = {**attention("self_attention", "trg_trg_att.", PROJECTIONS),
                 **both("self_attention.norm", "x_layer_norm"),
                 **attention("cross_attention", "src_trg_att.", PROJECTIONS),
                 **both("cross_attention.norm", "dec_layer_norm"), **FEED_FORWARD}


def _files(path: Path) -> tuple[Path, Path] | None:
    """(checkpoint, config.yaml) of a model folder or of a ``.ckpt`` with its config beside it."""
    if path.is_dir():
        config = path / "config.yaml"
        if not config.is_file():
            return None
        for name in CHECKPOINTS:
            if (path / name).is_file():
                return path / name, config
        numbered = sorted((int(match.group(1)), candidate) for candidate in path.glob("*.ckpt")
                          if (match := re.fullmatch(r"(\d+)\.ckpt", candidate.name)))
        return (numbered[-1][1], config) if numbered else None
    return path, path.parent / "config.yaml"


def _folder_of_config(path: Path) -> Path:
    """A model folder's config.yaml stands for the folder."""
    return path.parent if path.name == "config.yaml" and path.is_file() else path


def claims(source: Source) -> bool:
    path = _folder_of_config(source.path)
    if path.is_dir():
        return _files(path) is not None
    if path.suffix != ".ckpt":
        return False
    if (path.parent / "config.yaml").is_file():
        return True
    try:
        payload = source.payload
    except CheckpointError:
        return False
    return isinstance(payload, dict) and "model_state" in payload


def _source_files(source: Source) -> tuple[Source, Path]:
    files = _files(_folder_of_config(source.path))
    if files is None:
        raise source.error("a JoeyNMT model folder needs config.yaml and best.ckpt, latest.ckpt or STEP.ckpt")
    checkpoint, config = files
    if not config.is_file():
        raise source.error("no config.yaml beside it: JoeyNMT keeps the model's settings there; put the file "
                           "next to the checkpoint (or convert the model folder)")
    return (source if checkpoint == source.path else Source(checkpoint, source.trust)), config


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        import yaml  # a dependency of attnviz; imported here, as only this format reads YAML
    except ImportError:
        raise CheckpointError(path, "reading a JoeyNMT config needs PyYAML: pip install pyyaml") from None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # plain data only: no tags, no objects
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(path, f"cannot be read as YAML ({first})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise CheckpointError(path, "is not a JoeyNMT config (no 'model' section)")
    return data


def _section(path: Path, data: dict[str, Any], *keys: str) -> dict[str, Any]:
    value: Any = data
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise CheckpointError(path, f"{'.'.join(keys)} must be a mapping; got {value!r}")
    return value


def _min_output_length(path: Path, data: dict[str, Any]) -> int:
    """testing.min_output_length: JoeyNMT's search never ends a hypothesis before it (default 1)."""
    value = _section(path, data, "testing").get("min_output_length", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(path, f"testing.min_output_length must be 0 or more; got {value!r}")
    return value


def _refuse(path: Path, what: str) -> CheckpointError:
    return CheckpointError(path, f"{what} is not supported; this version imports {SUPPORTED}")


def _positive(path: Path, values: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = values[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise CheckpointError(path, f"{key} must be a positive integer; got {value!r}")


def _model_settings(config_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """What the model section says, with JoeyNMT's defaults where it says nothing; refuses what one config
    of ours cannot hold."""
    model = data["model"]
    encoder, decoder = _section(config_path, data, "model", "encoder"), _section(config_path, data, "model", "decoder")
    kinds = (encoder.get("type", "recurrent"), decoder.get("type", "transformer"))
    tied = bool(model.get("tied_embeddings", False))
    src_embeddings = _section(config_path, data, "model", "encoder", "embeddings")
    tgt_embeddings = src_embeddings if tied else _section(config_path, data, "model", "decoder", "embeddings")
    common = {"tied_embeddings": tied, "tied_softmax": bool(model.get("tied_softmax", False)),
              "encoder_type": kinds[0], "decoder_type": kinds[1],
              "min_output_length": _min_output_length(config_path, data)}
    if kinds == ("recurrent", "recurrent"):
        return {**common, **_rnn_settings(config_path, encoder, decoder=decoder, src_embeddings=src_embeddings,
                                          tgt_embeddings=tgt_embeddings)}
    if kinds != ("transformer", "transformer"):
        raise _refuse(config_path, f"a {kinds[0]} encoder with a {kinds[1]} decoder")
    read = {
        "hidden_size": (encoder.get("hidden_size", 512), decoder.get("hidden_size", 512)),
        "activation": (encoder.get("activation", "relu"), decoder.get("activation", "relu")),
        "alpha": (encoder.get("alpha", 1.0), decoder.get("alpha", 1.0)),
        "embeddings.scale": (bool(src_embeddings.get("scale", False)), bool(tgt_embeddings.get("scale", False))),
    }
    for key, (first, second) in read.items():
        if first != second:
            raise CheckpointError(config_path, f"encoder {key}={first!r} differs from decoder {key}={second!r}, "
                                               f"which one config cannot express")
    values = {key: pair[0] for key, pair in read.items()}
    # each side its own: JoeyNMT builds encoder layers pre-LN when the key is absent, decoder layers post-LN,
    # and a final norm only where the key says pre
    values.update({"num_heads": encoder.get("num_heads", 4), "decoder_num_heads": decoder.get("num_heads", 8),
                   "ff_size": encoder.get("ff_size", 2048), "decoder_ff_size": decoder.get("ff_size", 2048),
                   "layer_norm": encoder.get("layer_norm", "pre"),
                   "decoder_layer_norm": decoder.get("layer_norm", "post"),
                   "final_norm": encoder.get("layer_norm", "post") == "pre",
                   "decoder_final_norm": decoder.get("layer_norm", "post") == "pre"})
    if values["activation"] not in ACTIVATIONS:
        raise _refuse(config_path, f"activation {values['activation']!r}")
    for key, side in (("layer_norm", "encoder"), ("decoder_layer_norm", "decoder")):
        if values[key] not in ("pre", "post"):
            raise CheckpointError(config_path, f"model.{side}.layer_norm must be pre or post; got {values[key]!r}")
    alpha = values["alpha"]
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0:
        raise CheckpointError(config_path, f"alpha must be a positive number; got {alpha!r}")
    values.update(common, encoder_layers=encoder.get("num_layers", 8), decoder_layers=decoder.get("num_layers", 4),
                  dropout=encoder.get("dropout", 0.1))
    _positive(config_path, values, "hidden_size", "num_heads", "decoder_num_heads", "ff_size", "decoder_ff_size",
              "encoder_layers", "decoder_layers")
    return values


def _rnn_settings(config_path: Path, encoder: dict, decoder: dict, src_embeddings: dict,
                  tgt_embeddings: dict) -> dict[str, Any]:
    """JoeyNMT's RecurrentEncoder + RecurrentDecoder as rnn-luong can hold them (docs/architectures.md#rnn-luong)."""
    values = {
        "rnn_type": encoder.get("rnn_type", "gru"), "decoder_rnn_type": decoder.get("rnn_type", "gru"),
        "bidirectional": bool(encoder.get("bidirectional", True)),
        "encoder_hidden_size": encoder.get("hidden_size", 1), "hidden_size": decoder.get("hidden_size", 0),
        "encoder_layers": encoder.get("num_layers", 1), "decoder_layers": decoder.get("num_layers", 1),
        "attention": decoder.get("attention", "bahdanau"), "input_feeding": bool(decoder.get("input_feeding", True)),
        "init_hidden": decoder.get("init_hidden", "bridge"), "activation": decoder.get("activation", "tanh"),
        "embedding_dim": src_embeddings.get("embedding_dim", 64),
        "decoder_embedding_dim": tgt_embeddings.get("embedding_dim", 64),
        "embeddings.scale": bool(src_embeddings.get("scale", False) or tgt_embeddings.get("scale", False)),
        "dropout": decoder.get("dropout", 0.0),
    }
    _positive(config_path, values, "hidden_size", "encoder_hidden_size", "encoder_layers", "decoder_layers",
              "embedding_dim", "decoder_embedding_dim")
    checks = (
        (values["rnn_type"] in ("gru", "lstm"), f"rnn_type {values['rnn_type']!r}"),
        (values["decoder_rnn_type"] == values["rnn_type"],
         f"an encoder rnn_type {values['rnn_type']!r} with a decoder rnn_type {values['decoder_rnn_type']!r}"),
        (values["bidirectional"], "a unidirectional recurrent encoder (JoeyNMT 2.3's own encoder cannot run one)"),
        (values["attention"] in ("bahdanau", "luong"), f"attention {values['attention']!r}"),
        (values["init_hidden"] in ("bridge", "last", "zero"), f"init_hidden {values['init_hidden']!r}"),
        (values["activation"] == "tanh", f"decoder activation {values['activation']!r}"),
        (values["encoder_layers"] == values["decoder_layers"],
         f"{values['encoder_layers']} encoder layers with {values['decoder_layers']} decoder layers"),
        (values["embedding_dim"] == values["decoder_embedding_dim"],
         "source and target embeddings of different sizes"),
        (not values["embeddings.scale"], "scaled embeddings in a recurrent model"),
    )
    for fine, what in checks:
        if not fine:
            raise _refuse(config_path, what)
    return values


def _special_symbols(config_path: Path, data: dict[str, Any]) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """JoeyNMT's special symbols (``data.special_symbols``): role → (token, id), and the tokens it puts in
    front of every vocabulary (unk, pad, bos, eos, then the separator and language tags)."""
    given = _section(config_path, data, "data", "special_symbols")
    specials = {role: (given.get(f"{role}_token", token), given.get(f"{role}_id", index))
                for role, (token, index) in SPECIAL_DEFAULTS.items()}
    front = [specials[role][0] for role in ("unk", "pad", "bos", "eos")]
    if given.get("sep_token"):
        front.append(given["sep_token"])
    if given.get("lang_tags"):
        raise _refuse(config_path, f"special_symbols.lang_tags {given['lang_tags']!r} (multilingual prompts)")
    return specials, front


def inspect(source: Source, settings: Settings) -> Inspection:
    checkpoint, config_path = _source_files(source)
    data = _read_yaml(config_path)
    values = _model_settings(config_path, data)
    inspection = Inspection(NAME, source.path, dict(values), accepted=ACCEPTED)
    for side in ("src", "trg"):  # how its text was tokenised, kept in the provenance
        section = _section(config_path, data, "data", side)
        inspection.inferred[f"{side}.level"] = level = section.get("level", "word")
        if level == "bpe":
            inspection.inferred[f"{side}.tokenizer_type"] = section.get("tokenizer_type",
                                                                        section.get("bpe_type", "sentencepiece"))
        if section.get("lowercase"):
            inspection.inferred[f"{side}.lowercase"] = True
    for side in ("src", "trg"):
        if _vocab_file(config_path, data, side) is None:
            inspection.vocabularies["src" if side == "src" else "tgt"] = \
                f"{side}_vocab.txt of the model folder (one token a line)"
    inspection.found = {"checkpoint": checkpoint, "config_path": config_path, "data": data, "values": values}
    return inspection


def _resolve(config_path: Path, name: Any) -> Path | None:
    """A file the config names: as written (absolute or relative to where it was trained), relative to the
    config's folder, or by its name in the config's folder (a copied model folder)."""
    if not isinstance(name, str) or not name:
        return None
    given = Path(name)
    for candidate in (given if given.is_absolute() else config_path.parent / given, config_path.parent / given.name,
                      given):
        if candidate.is_file():
            return candidate
    return None


def _vocab_file(config_path: Path, data: dict[str, Any], side: str) -> Path | None:
    beside = config_path.parent / f"{side}_vocab.txt"  # JoeyNMT writes these into every model folder
    if beside.is_file():
        return beside
    return _resolve(config_path, _section(config_path, data, "data", side).get("voc_file"))


def _model_state(checkpoint: Source) -> dict[str, Tensor]:
    payload = checkpoint.payload
    if not isinstance(payload, dict) or "model_state" not in payload:
        raise checkpoint.error("not a JoeyNMT checkpoint (a dict with model_state, as its trainer saves)")
    state = tensor_dict(payload["model_state"])
    if state is None:
        raise checkpoint.error("its model_state is not a state dict")
    return state


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    found = inspection.found
    inspection.require(src_vocab, tgt_vocab)
    checkpoint, config_path, data, values = found["checkpoint"], found["config_path"], found["data"], found["values"]
    state = _model_state(checkpoint)
    specials, front = _special_symbols(config_path, data)
    vocab_paths = {"src": Path(src_vocab) if src_vocab else _vocab_file(config_path, data, "src"),
                   "trg": Path(tgt_vocab) if tgt_vocab else _vocab_file(config_path, data, "trg")}
    vocabularies = {side: _joey_vocabulary(path, front, checkpoint) for side, path in vocab_paths.items()}
    for side, key in (("src", "src_embed.lut.weight"), ("trg", "trg_embed.lut.weight")):
        if key in state:
            check_vocab_size(source=checkpoint, tokens=vocabularies[side], rows=int(state[key].shape[0]),
                             side="src" if side == "src" else "tgt", origin=str(vocab_paths[side]))
    for role, (token, index) in specials.items():
        for side, tokens in vocabularies.items():
            if not (isinstance(index, int) and 0 <= index < len(tokens) and tokens[index] == token):
                raise CheckpointError(vocab_paths[side], f"the {role} token {token!r} is not at id {index}, where "
                                                         f"config.yaml's special_symbols put it")
    ids = {role: specials[role][1] for role in ("pad", "unk", "bos", "eos")}
    if values["encoder_type"] == "recurrent":
        config: TransformerConfig | RNNConfig = _rnn_config(values, ids, vocabularies)
        weights = partial(_map_rnn_weights, source=checkpoint, state=state, config=config, values=values)
    else:
        config = _transformer_config(source=checkpoint, state=state, values=values, ids=ids, vocabularies=vocabularies)
        weights = partial(_map_weights, checkpoint, state, config)

    def tokenizers() -> Tokenizers:
        made, notes = zip(*(_prepared(_tokenizer(config_path=config_path, data=data, side=side,
                                                 vocabulary=vocabularies[side], ids=ids),
                                      _section(config_path, data, "data", side)) for side in ("src", "trg")))
        return Tokenizers(made[0], made[1], "; ".join(dict.fromkeys(notes)))

    details: dict[str, Any] = {"config": str(config_path.resolve())}
    stats = checkpoint.payload.get("stats_state")
    if isinstance(stats, dict) and isinstance(stats.get("steps"), int):
        details["steps"] = stats["steps"]
    return Converted(config, state, weights_file=checkpoint.path, weights=weights, tokenizers=tokenizers,
                     provenance=Provenance(checkpoint.path, inspection.inferred, details=details,
                                           vocabularies={"src": str(vocab_paths["src"].resolve()),
                                                         "tgt": str(vocab_paths["trg"].resolve())}))


def _joey_vocabulary(path: Path, front: list[str], source: Source) -> list[str]:
    """Tokens in id order as JoeyNMT's Vocabulary builds them from a file: its special symbols first, then the
    file's tokens, each token once (a file JoeyNMT wrote already starts with the specials)."""
    tokens = read_vocabulary(path, side="src", trust=source.trust)
    return list(dict.fromkeys([*front, *tokens]))


def _transformer_config(source: Source, state: dict[str, Tensor], values: dict[str, Any], ids: dict[str, int],
                        vocabularies: dict[str, list[str]]) -> TransformerConfig:
    d_model, heads, decoder_heads = values["hidden_size"], values["num_heads"], values["decoder_num_heads"]
    for side, count in (("encoder", heads), ("decoder", decoder_heads)):
        if d_model % count:
            raise source.error(f"hidden_size {d_model} is not divisible by the {side}'s num_heads {count}")
    counts = (layer_count(state, "encoder.layers."), layer_count(state, "decoder.layers."))
    if counts != (values["encoder_layers"], values["decoder_layers"]):
        raise source.error(f"model_state holds {counts[0]} encoder and {counts[1]} decoder layers; config.yaml "
                           f"says {values['encoder_layers']} and {values['decoder_layers']}")
    table = state.get("encoder.pe.pe")
    dropout = values["dropout"] if isinstance(values["dropout"], float) and 0 <= values["dropout"] < 1 else 0.1
    return TransformerConfig(
        arch="transformer-preln" if values["layer_norm"] == "pre" else "transformer-postln",
        src_vocab_size=len(vocabularies["src"]), tgt_vocab_size=len(vocabularies["trg"]), d_model=d_model,
        heads=heads, d_ff=values["ff_size"], decoder_heads=decoder_heads if decoder_heads != heads else 0,
        decoder_d_ff=values["decoder_ff_size"] if values["decoder_ff_size"] != values["ff_size"] else 0,
        encoder_layers=counts[0], decoder_layers=counts[1], dropout=dropout,
        max_len=int(table.shape[-2]) if table is not None else 5000, **_norm_settings(values),
        pre_norm_kv=True, layer_norm_eps=LAYER_NORM_EPS,
        activation=ACTIVATIONS[values["activation"]], positions="interleaved",
        scale_embedding=values["embeddings.scale"], share_embeddings=values["tied_embeddings"],
        tie_output=values["tied_softmax"], attention_bias=True, output_bias=False,
        residual_scale=float(values["alpha"]), suppress_bos=True, min_output_len=values["min_output_length"],
        pad_id=ids["pad"], bos_id=ids["bos"], eos_id=ids["eos"], src_append_eos=True)


def _norm_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Our norm fields for each stack's (placement, final norm): a decoder placement of its own where it differs,
    and where ``final_norm`` with the placements does not already say which stacks end with a norm (docs/
    architectures.md#transformer-switches), each stack's own: ``final_norm`` the encoder's, ``decoder_final_norm``
    the decoder's."""
    encoder = (values["layer_norm"], values["final_norm"])
    decoder = (values["decoder_layer_norm"], values["decoder_final_norm"])
    same = encoder[0] == decoder[0]
    any_final = encoder[1] or decoder[1]
    settings = {"norm_position": encoder[0], "decoder_norm_position": "" if same else decoder[0],
                "final_norm": any_final}
    if all(final == (any_final and (same or placement == "pre")) for placement, final in (encoder, decoder)):
        return settings
    return {**settings, "final_norm": encoder[1], "decoder_final_norm": decoder[1]}


def _map_weights(source: Source, state: dict[str, Tensor], config: TransformerConfig) -> WeightMap:
    weights = WeightMap(source, state, "JoeyNMT Transformer")
    map_stacks(weights, config, {"encoder": ("encoder.layers.{layer}.", ENCODER_LAYER),
                                 "decoder": ("decoder.layers.{layer}.", DECODER_LAYER)})
    for side in ("encoder", "decoder"):
        if config.final_norm_of(side):
            map_names(weights, both(f"{side}_norm", f"{side}.layer_norm"))
        fixed_positions(weights, f"{side}.pe.pe", expected=sinusoid_table(config.max_len, config.d_model,
                                                                          config.positions))
    weights.token_tables(config, "src_embed.lut.weight", target="trg_embed.lut.weight",
                         output="decoder.output_layer.weight")
    return weights


def _rnn_config(values: dict[str, Any], ids: dict[str, int], vocabularies: dict[str, list[str]]) -> RNNConfig:
    hidden, annotations = values["hidden_size"], 2 * values["encoder_hidden_size"]  # bidirectional
    dropout = values["dropout"] if isinstance(values["dropout"], float) and 0 <= values["dropout"] < 1 else 0.0
    return RNNConfig(
        arch="rnn-luong", src_vocab_size=len(vocabularies["src"]), tgt_vocab_size=len(vocabularies["trg"]),
        hidden=hidden, dropout=dropout, max_len=512, decoder_layers=values["decoder_layers"], bidirectional=True,
        embedding_size=values["embedding_dim"] if values["embedding_dim"] != hidden else 0,
        luong_score="mlp" if values["attention"] == "bahdanau" else "general", rnn_cell=values["rnn_type"],
        annotation_size=annotations if annotations != hidden else 0,
        input_feeding=values["input_feeding"], init_hidden=values["init_hidden"], attentional_bias=True,
        suppress_bos=True, min_output_len=values["min_output_length"], pad_id=ids["pad"], bos_id=ids["bos"],
        eos_id=ids["eos"], src_append_eos=True)


def _map_rnn_weights(source: Source, state: dict[str, Tensor], config: RNNConfig, values: dict[str, Any]) -> WeightMap:
    weights = WeightMap(source, state, "JoeyNMT recurrent")
    hidden = config.hidden
    map_layers(weights, recurrent("gru.{kind}_l{layer}{direction}", "rnn.{kind}_l{layer}{direction}",
                                  directions=("", "_reverse")), ours="encoder.", theirs="encoder.",
               count=config.decoder_layers)
    map_layers(weights, recurrent("{kind}", "rnn.{kind}_l{layer}"), ours="decoder.cells.{layer}.", theirs="decoder.",
               count=config.decoder_layers)
    if values["tied_embeddings"]:
        weights.ignore_copies("src_embed.lut.weight", "trg_embed.lut.weight")
    if values["tied_softmax"]:
        weights.ignore_copies("trg_embed.lut.weight", "decoder.output_layer.weight")
    target = "src_embed.lut.weight" if values["tied_embeddings"] else "trg_embed.lut.weight"
    map_names(weights, {
        "encoder.embedding.weight": "src_embed.lut.weight", "decoder.embedding.weight": target,
        # JoeyNMT's attentional layer reads [h; c], ours [c; h]
        "decoder.combine.weight": From("decoder.att_vector_layer.weight",
                                       lambda w: torch.cat([w[:, hidden:], w[:, :hidden]], dim=1)),
        "decoder.combine.bias": "decoder.att_vector_layer.bias",
        **(both("decoder.bridge", "decoder.bridge_layer") if config.init_hidden == "bridge" else {}),
        "decoder.output.weight": "trg_embed.lut.weight" if values["tied_softmax"] else "decoder.output_layer.weight",
        "decoder.output.bias": Zeros("decoder.output_layer.weight", config.tgt_vocab_size),
        **_rnn_attention(values["attention"], hidden)})
    return weights


def _rnn_attention(kind: str, hidden: int) -> Names:
    """The weights of our score for JoeyNMT's ``attention`` (``kind``)."""
    if kind == "bahdanau":  # vᵀ tanh(W_q h + U s): no bias on the query map
        return {"decoder.query.weight": "decoder.attention.query_layer.weight",
                "decoder.query.bias": Zeros("decoder.attention.query_layer.weight", hidden),
                "decoder.key.weight": "decoder.attention.key_layer.weight",
                "decoder.score.weight": "decoder.attention.energy_layer.weight"}
    # luong: hᵀ (W s) = (Wᵀ h)ᵀ s
    return {"decoder.query.weight": From("decoder.attention.key_layer.weight", lambda w: w.t().contiguous())}


def _prepared(made: tuple[Any, str], section: dict[str, Any]) -> tuple[Any, str]:
    """JoeyNMT's pre_process before it splits text: ``normalize``, then ``lowercase`` (with Moses, the
    tokenizer's Moses settings do both, around Moses)."""
    tokenizer, note = made
    if getattr(tokenizer, "moses", None) is None and (section.get("lowercase") or section.get("normalize")):
        base = "joeynmt" if section.get("normalize") else "nfkc"
        tokenizer.normalization = f"{base}-lowercase" if section.get("lowercase") else base
    return tokenizer, note


def _tokenizer(config_path: Path, data: dict[str, Any], side: str, vocabulary: list[str],
               ids: dict[str, int]) -> tuple[Any, str]:
    """The tokenizer JoeyNMT's data section describes for one side, and how the user's text should look."""
    section = _section(config_path, data, "data", side)
    level = section.get("level", "word")
    options = section.get("tokenizer_cfg") or {}
    if not isinstance(options, dict):
        raise CheckpointError(config_path, f"data.{side}.tokenizer_cfg must be a mapping; got {options!r}")
    pretokenizer = str(options.get("pretokenizer", "none")).lower()
    moses = None
    if pretokenizer == "moses":
        kind = section.get("tokenizer_type", section.get("bpe_type", "sentencepiece"))
        if level == "char" or level == "bpe" and kind != "subword-nmt":
            raise CheckpointError(config_path, f"data.{side}.tokenizer_cfg.pretokenizer 'moses' before "
                                               f"{'characters' if level == 'char' else kind} is not supported; "
                                               f"before words and subword-nmt it is")
        language = section.get("lang")
        if not isinstance(language, str) or not language:
            raise CheckpointError(config_path, f"data.{side}.lang must name the language Moses tokenises")
        # JoeyNMT's pre_process: Moses (after its normaliser where asked), then lower case
        moses = {"lang": language, "lowercase": bool(section.get("lowercase")), "style": "joeynmt",
                 "normalize": bool(section.get("normalize"))}
    elif pretokenizer != "none":
            raise CheckpointError(config_path, f"data.{side}.tokenizer_cfg.pretokenizer {options['pretokenizer']!r} "
                                           f"is not supported; none and moses are")
    note = ("normalised as JoeyNMT does, " if section.get("normalize") and moses is None else "") + \
        ("lower-cased, " if section.get("lowercase") and moses is None else "")
    if moses is not None:
        note = f"Moses' tokenizer ({moses['lang']}{', lower-cased' if moses['lowercase'] else ''}) then "
    try:
        if level == "word":
            return WordTokenizer(vocabulary, ids, split="whitespace", moses=moses), \
                f"{note}whitespace-separated words, as JoeyNMT's word level reads them"
        if level == "char":
            return WordTokenizer(vocabulary, ids, split="characters"), \
                f"{note}one token per character, spaces as ▁, as JoeyNMT's char level reads them"
        if level == "bpe":
            kind = section.get("tokenizer_type", section.get("bpe_type", "sentencepiece"))
            named = options.get("model_file") if kind == "sentencepiece" else options.get("codes")
            if kind == "sentencepiece":
                model_file = _resolve(config_path, named)
                if model_file is None:
                    raise CheckpointError(config_path, f"data.{side}.tokenizer_cfg.model_file {named!r} is not "
                                                       f"found; copy the sentencepiece model into the model folder")
                return SentencePieceVocabTokenizer(model_file.read_bytes(), vocabulary, ids), \
                    f"{note}sentencepiece pieces of {model_file.name}"
            if kind == "subword-nmt":
                codes = _resolve(config_path, named)
                if codes is not None:
                    return subword_nmt_tokenizer(codes, vocabulary, specials=ids, moses=moses, split_back=True), \
                        f"{note}split by subword-nmt with its codes {codes.name}"
                return WordTokenizer(vocabulary, ids, split="whitespace"), \
                    f"{note}give text already split by subword-nmt with its codes ({named}, not found beside the " \
                    f"config), pieces separated by spaces"
            raise CheckpointError(config_path, f"data.{side}.tokenizer_type {kind!r} is not supported; "
                                               f"sentencepiece and subword-nmt are")
    except ConfigError as error:
        raise CheckpointError(config_path, str(error)) from None
    raise CheckpointError(config_path, f"data.{side}.level {level!r} is not supported; word, char and bpe are")
