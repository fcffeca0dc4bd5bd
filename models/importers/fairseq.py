"""fairseq checkpoints (docs/checkpoint-formats.md#fairseq).

``fairseq-train`` saves ``checkpoint_best.pt``/``checkpoint_last.pt``: ``{'args': Namespace or None, 'cfg':
{'model': Namespace or dict, 'task': {...}, 'bpe': ...}, 'model': state dict, 'optimizer_history', 'extra_state',
'last_optimizer_state', ...}``; fairseq before 0.12 pickled ``cfg`` as omegaconf ``DictConfig`` objects, which
are read as plain data (safe_load's allow-list: inert stand-ins, no omegaconf code runs). The vocabularies are
not inside: ``dict.<lang>.txt`` beside the checkpoint or in the training's data-bin folder (``cfg.task.data``),
``symbol count`` per line after fairseq's four specials ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` (ids 0-3).

``transformer`` family (any ``transformer_*`` architecture): post-LN by default, pre-LN with
``encoder/decoder_normalize_before`` (then a LayerNorm after each stack), token embeddings ×√d unless
``no_scale_embedding``, fairseq's sinusoids (sines then cosines, position p at row pad + 1 + p) or learned
positions (``*_learned_pos``, the same offset), optional ``layernorm_embedding``, no output bias; sources end
with ``</s>``, and decoding starts from ``</s>``. ``lstm`` family: an LSTM encoder (optionally bidirectional,
the two directions' final states concatenated per layer) and an input-feeding LSTM decoder whose top cell's
output queries the annotations through ``input_proj`` (Luong's general score), then ``tanh(output_proj([context;
h]))`` feeds ``fc_out``: our ``rnn-luong`` (docs/architectures.md#rnn-luong) with LSTM cells. A decoder of
another width than the encoder's output starts from the encoder's final states through ``encoder_hidden_proj``
and ``encoder_cell_proj`` (our ``annotation_size``). Transformer stacks keep their own head counts and
feed-forward widths.

Text: a sentencepiece model (``sentencepiece.bpe.model``, ``spm.model``, …, or ``cfg.bpe``) splits typed text
into the pieces the dictionary lists; subword-nmt codes (``bpecodes``, ``codes``) split words into ``x@@``
pieces, optionally after Moses tokenisation (``--set moses=en``); with neither, text is taken as
whitespace-separated dictionary symbols.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..nn.config import RNNConfig, TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..text.tokenizers import SentencePieceVocabTokenizer, WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, layer_count, tensor_dict
from .vocabularies import subword_nmt_tokenizer, weight_rows
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import map_bart_layers
from .layer_names import Zeros, both, map_layers, map_names, recurrent
from .safe_load import TrustRequiredError

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(file=3, folder=7)  # when detection asks this format (contract.py)
ACCEPTED = {
    "bpe": "the sentencepiece model or subword-nmt codes the training text was split with (found beside the "
           "checkpoint otherwise)",
    "moses": "Moses-tokenise text before subword-nmt BPE, in this language (e.g. en); default: no",
}
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary puts these at ids 0-3
BOS, PAD, EOS, UNK = range(4)
SPM_NAMES = ("sentencepiece.bpe.model", "sentencepiece.model", "spm.model", "spm.bpe.model")
CODES_NAMES = ("bpecodes", "bpe.codes", "codes", "code")
# fairseq-generate and fairseq-interactive's --min-len: SequenceGenerator bans the end token before it.
SEARCH_MIN_LEN = 1
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh",
               "swish": "swish", "relu_squared": "relu2", "tanh": "tanh", "linear": "linear"}
SUPPORTED = ("the transformer family (post- or pre-LN, sinusoidal or learned positions, layernorm_embedding, "
             "shared embeddings, per-side head counts and feed-forward widths) and the lstm family (uni- or "
             "bidirectional encoder, input feeding, attention, any decoder hidden size), with one embedding width for "
             "encoder and decoder")
# Parts of other fairseq models, with what they are, for the one-line refusal.
UNSUPPORTED_KEYS = (
    ("encoder.layers.0.self_attn.in_proj_weight", "a pre-2019 transformer with packed q/k/v projections"),
    ("decoder.adaptive_softmax", "an adaptive softmax output"), ("adaptive_input", "adaptive input embeddings"),
    ("decoder.project_in_dim.weight", "a decoder input projection (decoder_input_dim ≠ embed dim)"),
    ("decoder.project_out_dim.weight", "a decoder output projection (decoder_output_dim ≠ embed dim)"),
    ("attn_ln", "NormFormer's extra norms"), ("ffn_layernorm", "NormFormer's extra norms"),
    ("c_attn", "NormFormer's head scales"), ("w_resid", "scaled residuals"),
    ("decoder.additional_fc.weight", "an LSTM decoder whose output width differs from its hidden size"),
)


def _plain(value: Any, depth: int = 0) -> Any:
    """Namespaces, mappings and omegaconf stand-ins as plain dicts and lists (fairseq's config objects)."""
    if depth > 40:
        return None
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    stub_of = getattr(type(value), "stub_of", None)
    if stub_of is not None:  # an omegaconf object read by safe_load as an inert stand-in
        content = value.__dict__.get("_content")
        if stub_of.endswith("Node") or "_val" in value.__dict__:
            return _plain(value.__dict__.get("_val"), depth + 1)
        return _plain(content, depth + 1)
    if isinstance(value, Mapping):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return value


def _checkpoint_in(folder: Path) -> Path | None:
    """The fairseq checkpoint a folder holds: checkpoint_best.pt, model.pt, checkpoint_last.pt, else the one .pt."""
    for name in ("checkpoint_best.pt", "model.pt", "checkpoint_last.pt"):
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob("*.pt"))
    return found[0] if len(found) == 1 else None


def _is_fairseq(payload: Any) -> bool:
    if not isinstance(payload, Mapping) or "model" not in payload or not ("cfg" in payload or "args" in payload):
        return False
    state = tensor_dict(payload["model"])
    return state is not None and any(key.startswith("encoder.embed_tokens.") for key in state)


def claims(source: Source) -> bool:
    path = source.path
    if path.is_dir():
        file = _checkpoint_in(path)
        if file is None or not any(path.glob("dict*.txt")):
            return False
        path = file
    elif path.suffix != ".pt":
        return False
    if path == source.path:
        return _is_fairseq(source.payload)
    file = source.__dict__.setdefault("fairseq_file", Source(path, source.trust))  # read once: convert reuses it
    try:
        return _is_fairseq(file.payload)
    except TrustRequiredError:
        return True  # a fairseq folder whose checkpoint needs trust: converting it says so
    except CheckpointError:
        return False


def _file(source: Source) -> Source:
    if "fairseq_file" in source.__dict__:  # the folder's checkpoint, already read by claims()
        return source.__dict__["fairseq_file"]
    if source.path.is_dir():
        file = _checkpoint_in(source.path)
        if file is None:
            raise source.error("a folder without a fairseq checkpoint (checkpoint_best.pt, model.pt or one .pt)")
        return Source(file, source.trust)
    return source


def _options(source: Source, payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The model's options, the task's and the BPE's, from ``cfg`` (fairseq ≥ 0.10) or ``args`` (older)."""
    cfg = _plain(payload.get("cfg"))
    args = _plain(payload.get("args"))
    if isinstance(cfg, dict) and isinstance(cfg.get("model"), dict):
        return cfg["model"], cfg.get("task") or {}, cfg.get("bpe") or {}
    if isinstance(args, dict):
        return args, args, {"_name": args.get("bpe"), **args}
    raise source.error("has neither 'cfg' with the model's options nor 'args': not a fairseq training checkpoint")


def _family(source: Source, state: Mapping[str, Tensor], options: Mapping[str, Any]) -> str:
    arch = str(options.get("arch") or options.get("_name") or "?")
    for key, what in UNSUPPORTED_KEYS:
        if any(name == key or name.startswith(key + ".") or f".{key}." in f".{name}" for name in state):
            raise source.error(f"{what} (arch {arch}) is not supported; this version imports {SUPPORTED}")
    if "encoder.lstm.weight_ih_l0" in state:
        return "lstm"
    if "encoder.layers.0.self_attn.k_proj.weight" in state:
        return "transformer"
    raise source.error(f"arch {arch} is not supported; this version imports {SUPPORTED}")


def inspect(source: Source, settings: Settings) -> Inspection:
    file = _file(source)
    payload = file.payload
    if not _is_fairseq(payload):
        raise file.error("not a fairseq checkpoint (a dict with 'model' weights and 'cfg' or 'args')")
    options, task, bpe = _options(file, payload)
    state = tensor_dict(payload["model"])
    family = _family(file, state, options)
    inferred = _transformer_inferred(file, state, options) if family == "transformer" \
        else _lstm_inferred(file, state, options)
    inferred = {"arch": options.get("arch") or options.get("_name"), "family": family, **inferred}
    for key in ("source_lang", "target_lang"):
        if task.get(key) or options.get(key):
            inferred[key] = task.get(key) or options.get(key)
    inspection = Inspection(NAME, source.path, inferred, accepted=ACCEPTED)
    try:
        _dictionaries(file, _folders(file, task), inferred, src_vocab=None, tgt_vocab=None)
    except CheckpointError as error:  # asked for: --src-vocab/--tgt-vocab, the GUI's import dialog
        why = str(error).split(": ", 1)[-1].split(": pass --src-vocab")[0]
        inspection.vocabularies = {"src": f"fairseq's source dictionary, dict.<lang>.txt; {why}",
                                   "tgt": "its target dictionary, dict.<lang>.txt"}
    inspection.found = (file, state, options, task, bpe)
    return inspection


def _flag(options: Mapping[str, Any], key: str) -> bool:
    return bool(options.get(key) or False)


def _transformer_inferred(source: Source, state: Mapping[str, Tensor], options: Mapping[str, Any]) -> dict:
    def same(key: str, encoder: Any, decoder: Any, *, what: str) -> Any:
        if encoder != decoder:
            raise source.error(f"encoder {key} {encoder} ≠ decoder {key} {decoder} ({what}) is not supported; "
                               f"this version imports {SUPPORTED}")
        return encoder

    d_model = same("embed dim", weight_rows(source, state, key="encoder.layers.0.fc2.weight", layout=NAME),
                   weight_rows(source, state, key="decoder.layers.0.fc2.weight", layout=NAME), what="one width")
    heads = {}
    for side in ("encoder", "decoder"):  # each stack its own head count and feed-forward width
        heads[side] = options.get(f"{side}_attention_heads")
        if not isinstance(heads[side], int) or heads[side] < 1 or d_model % heads[side]:
            raise source.error(f"{side}_attention_heads={heads[side]!r} does not divide the embed dim {d_model}")
    d_ff = {side: weight_rows(source, state, key=f"{side}.layers.0.fc1.weight", layout=NAME)
            for side in ("encoder", "decoder")}
    pre = same("normalize_before", _flag(options, "encoder_normalize_before"),
               _flag(options, "decoder_normalize_before"), what="one norm placement")
    learned = same("learned_pos", "encoder.embed_positions.weight" in state
                   and state["encoder.embed_positions.weight"].dim() == 2 and _flag(options, "encoder_learned_pos"),
                   _flag(options, "decoder_learned_pos"), what="one position kind")
    final = same("final layer_norm", "encoder.layer_norm.weight" in state, "decoder.layer_norm.weight" in state,
                 what="norms after both stacks or neither")
    embedding_norm = same("layernorm_embedding", "encoder.layernorm_embedding.weight" in state,
                          "decoder.layernorm_embedding.weight" in state, what="both or neither")
    activation = str(options.get("activation_fn") or "relu")
    if activation not in ACTIVATIONS:
        raise source.error(f"activation_fn {activation} is not supported; this version imports "
                           f"{', '.join(ACTIVATIONS)}")
    if _flag(options, "cross_self_attention") or _flag(options, "no_cross_attention"):
        raise source.error(f"cross_self_attention/no_cross_attention is not supported; this version imports "
                           f"{SUPPORTED}")
    if learned:
        max_len = same("positions", state["encoder.embed_positions.weight"].shape[0],
                       state["decoder.embed_positions.weight"].shape[0], what="one table length") - (PAD + 1)
    else:
        max_len = max(int(options.get("max_source_positions") or 1024),
                      int(options.get("max_target_positions") or 1024))
    return {
        "embed_dim": d_model,
        "encoder_attention_heads": heads["encoder"], "decoder_attention_heads": heads["decoder"],
        "encoder_ffn_embed_dim": d_ff["encoder"], "decoder_ffn_embed_dim": d_ff["decoder"],
        "encoder_layers": layer_count(state, "encoder.layers."),
        "decoder_layers": layer_count(state, "decoder.layers."),
        "normalize_before": pre, "final_layer_norm": final, "layernorm_embedding": embedding_norm,
        "positions": "none" if _flag(options, "no_token_positional_embeddings")
        else "learned" if learned else "sinusoidal",
        "max_positions": max_len, "activation_fn": activation,
        "scale_embedding": not _flag(options, "no_scale_embedding"),
        "share_all_embeddings": _flag(options, "share_all_embeddings"),
        "share_decoder_input_output_embed": _flag(options, "share_decoder_input_output_embed")
                                            or _flag(options, "share_all_embeddings"),
        "src_rows": weight_rows(source, state, key="encoder.embed_tokens.weight", layout=NAME),
        "tgt_rows": weight_rows(source, state, key="decoder.embed_tokens.weight", layout=NAME),
    }


def _lstm_inferred(source: Source, state: Mapping[str, Tensor], options: Mapping[str, Any]) -> dict:
    bidirectional = "encoder.lstm.weight_ih_l0_reverse" in state
    encoder_hidden = weight_rows(source, state, key="encoder.lstm.weight_hh_l0", layout=NAME) // 4
    hidden = weight_rows(source, state, key="decoder.layers.0.weight_hh", layout=NAME) // 4
    encoder_layers = sum(f"encoder.lstm.weight_ih_l{n}" in state for n in range(len(state)))
    decoder_layers = layer_count(state, "decoder.layers.")
    src_width = int(state["encoder.embed_tokens.weight"].shape[1])
    weight_rows(source, state, key="decoder.embed_tokens.weight", layout=NAME)  # present, else one line naming it
    tgt_width = int(state["decoder.embed_tokens.weight"].shape[1])
    problems = []
    if encoder_layers != decoder_layers:
        problems.append(f"encoder_layers {encoder_layers} ≠ decoder_layers {decoder_layers}")
    encoder_output = encoder_hidden * (2 if bidirectional else 1)
    if encoder_output != hidden and "decoder.encoder_hidden_proj.weight" not in state:
        problems.append(f"encoder output {encoder_output} ≠ decoder hidden {hidden} without encoder_hidden_proj")
    if src_width != tgt_width:
        problems.append(f"encoder_embed_dim {src_width} ≠ decoder_embed_dim {tgt_width}")
    if "decoder.attention.input_proj.weight" not in state:
        problems.append("a decoder without attention")
    if _flag(options, "residuals"):
        problems.append("residual connections between decoder layers")
    if problems:
        raise source.error(f"{problems[0]} is not supported; this version imports {SUPPORTED}")
    return {"bidirectional": bidirectional, "encoder_hidden_size": encoder_hidden,
            "encoder_output_units": encoder_output, "decoder_hidden_size": hidden,
            "layers": decoder_layers, "embed_dim": src_width,
            "share_decoder_input_output_embed": "decoder.fc_out.weight" not in state,
            "share_all_embeddings": _flag(options, "share_all_embeddings"),
            "max_positions": max(int(options.get("max_source_positions") or 1024),
                                 int(options.get("max_target_positions") or 1024)),
            "src_rows": int(state["encoder.embed_tokens.weight"].shape[0]),
            "tgt_rows": int(state["decoder.embed_tokens.weight"].shape[0])}


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    inspection = inspect(source, settings)
    (file, state, options, task, bpe) = inspection.found
    if src_vocab or tgt_vocab:
        inspection.vocabularies.clear()
    inspection.require()
    inferred = inspection.inferred
    folders = _folders(file, task)
    dicts = _dictionaries(file, folders, inferred, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    vocabularies = [_read_dictionary(path, rows=inferred[rows])
                    for path, rows in zip(dicts, ("src_rows", "tgt_rows"))]
    if inferred["family"] == "transformer":
        config: TransformerConfig | RNNConfig = _transformer_config(inferred)
        weights = partial(_map_transformer, file, state, config)
    else:
        config = _lstm_config(inferred)
        weights = partial(_map_lstm, file, state, config, shared_output=inferred["share_decoder_input_output_embed"])
    return Converted(config, state, weights_file=file.path, weights=weights,
                     tokenizers=partial(_tokenizers, file, settings, folders=folders, bpe=bpe,
                                        vocabularies=vocabularies),
                     provenance=Provenance(file.path, inferred, vocabularies={"src": str(dicts[0]),
                                                                              "tgt": str(dicts[1])}))


def _folders(file: Source, task: Mapping[str, Any]) -> list[Path]:
    """Where the dictionaries and the BPE model may be: beside the checkpoint, then the training's data-bin."""
    folders = [file.path.parent]
    data = task.get("data")
    if isinstance(data, str) and data:
        for part in data.split(":"):  # fairseq separates sharded data folders with ':'
            if Path(part).is_dir() and Path(part) not in folders:
                folders.append(Path(part))
    return folders


def _dictionaries(file: Source, folders: list[Path], inferred: Mapping[str, Any], src_vocab: str | None,
                  tgt_vocab: str | None) -> tuple[Path, Path]:
    if src_vocab or tgt_vocab:
        if not (src_vocab and tgt_vocab):
            raise file.error("give both --src-vocab and --tgt-vocab (fairseq's dict.<lang>.txt files), or neither")
        return Path(src_vocab), Path(tgt_vocab)
    langs = inferred.get("source_lang"), inferred.get("target_lang")
    for folder in folders:
        if all(langs):
            pair = folder / f"dict.{langs[0]}.txt", folder / f"dict.{langs[1]}.txt"
            if all(path.is_file() for path in pair):
                return pair
        found = sorted(folder.glob("dict.*.txt"))
        if (folder / "dict.txt").is_file() and not found:
            return folder / "dict.txt", folder / "dict.txt"
        if len(found) == 2 and found[0].read_bytes() == found[1].read_bytes():  # a joined dictionary
            return found[0], found[1]
        if len(found) == 2 and {path.name for path in found} == {"dict.src.txt", "dict.tgt.txt"}:
            return folder / "dict.src.txt", folder / "dict.tgt.txt"
        if len(found) >= 2:
            names = ", ".join(path.name for path in found)
            raise file.error(f"cannot tell which of {names} is the source dictionary (the checkpoint names no "
                             f"languages): pass --src-vocab and --tgt-vocab")
    raise file.error("no fairseq dictionaries (dict.<lang>.txt) beside it or in its data folder: pass "
                     "--src-vocab and --tgt-vocab")


def _read_dictionary(path: Path, rows: int) -> list[str]:
    """fairseq's Dictionary: the four specials, then one ``symbol count`` per line (``#fairseq:overwrite``
    flags a symbol that may repeat), padded with ``madeupwordNNNN`` up to the embedding's rows."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as a fairseq dictionary ({error})") from None
    symbols = list(SPECIALS)
    seen = set(symbols)
    for number, line in enumerate(lines, 1):
        line = line.rstrip()
        if not line:
            continue
        overwrite = line.endswith(" #fairseq:overwrite")
        if overwrite:
            line = line[: -len(" #fairseq:overwrite")]
        word, _, count = line.rpartition(" ")
        if not word or not count.lstrip("-").isdigit():
            raise CheckpointError(path, f"line {number} is not 'symbol count': {line[:60]!r}")
        if word in seen and not overwrite:
            raise CheckpointError(path, f"line {number} repeats {word!r} (fairseq refuses that too)")
        seen.add(word)
        symbols.append(word)
    if len(symbols) > rows:
        raise CheckpointError(path, f"has {len(symbols)} symbols with fairseq's four specials; the model's "
                                    f"embedding has {rows} rows")
    symbols += [f"madeupword{index:04d}" for index in range(rows - len(symbols))]
    return symbols


def _transformer_config(inferred: Mapping[str, Any]) -> TransformerConfig:
    pre = inferred["normalize_before"]
    positions = {"learned": "learned", "sinusoidal": "fairseq", "none": "none"}[inferred["positions"]]
    shared = inferred["share_all_embeddings"]
    heads, decoder_heads = inferred["encoder_attention_heads"], inferred["decoder_attention_heads"]
    d_ff, decoder_d_ff = inferred["encoder_ffn_embed_dim"], inferred["decoder_ffn_embed_dim"]
    return TransformerConfig(
        arch="transformer-preln" if pre else "transformer-postln", src_vocab_size=inferred["src_rows"],
        tgt_vocab_size=inferred["tgt_rows"], d_model=inferred["embed_dim"], heads=heads,
        decoder_heads=decoder_heads if decoder_heads != heads else 0, d_ff=d_ff,
        decoder_d_ff=decoder_d_ff if decoder_d_ff != d_ff else 0, encoder_layers=inferred["encoder_layers"],
        decoder_layers=inferred["decoder_layers"], dropout=0.1, max_len=inferred["max_positions"],
        norm_position="pre" if pre else "post", final_norm=inferred["final_layer_norm"], pre_norm_kv=pre,
        layer_norm_eps=1e-5, activation=ACTIVATIONS[inferred["activation_fn"]], positions=positions,
        position_offset=PAD + 1 if positions != "none" else 0, scale_embedding=inferred["scale_embedding"],
        share_embeddings=shared, tie_output=inferred["share_decoder_input_output_embed"],
        embedding_norm=inferred["layernorm_embedding"], attention_bias=True, output_bias=False,
        min_output_len=SEARCH_MIN_LEN, pad_id=PAD, bos_id=EOS, eos_id=EOS, src_append_eos=True)


def _map_transformer(file: Source, state: Mapping[str, Tensor], config: TransformerConfig) -> WeightMap:
    weights = WeightMap(file, state, NAME)
    map_bart_layers(weights, "", config)
    for side in ("encoder", "decoder"):
        weights.ignore(f"{side}.embed_positions._float_tensor")  # fairseq's sinusoid buffer, saved by old versions
    output = "decoder.output_projection.weight" if "decoder.output_projection.weight" in state else "decoder.embed_out"
    weights.token_tables(config, "encoder.embed_tokens.weight", target="decoder.embed_tokens.weight", output=output)
    return weights


def _lstm_config(inferred: Mapping[str, Any]) -> RNNConfig:
    hidden, width = inferred["decoder_hidden_size"], inferred["embed_dim"]
    annotations = inferred["encoder_output_units"]
    return RNNConfig(
        arch="rnn-luong", src_vocab_size=inferred["src_rows"], tgt_vocab_size=inferred["tgt_rows"], hidden=hidden,
        dropout=0.1, max_len=inferred["max_positions"], decoder_layers=inferred["layers"],
        bidirectional=inferred["bidirectional"], embedding_size=width if width != hidden else 0,
        annotation_size=annotations if annotations != hidden else 0, luong_score="general", rnn_cell="lstm",
        min_output_len=SEARCH_MIN_LEN, pad_id=PAD, bos_id=EOS, eos_id=EOS, src_append_eos=True)


def _map_lstm(file: Source, state: Mapping[str, Tensor], config: RNNConfig, shared_output: bool) -> WeightMap:
    weights = WeightMap(file, state, NAME)
    directions = ("", "_reverse") if config.bidirectional else ("",)
    map_layers(weights, recurrent("gru.{kind}_l{layer}{direction}", "lstm.{kind}_l{layer}{direction}", directions),
               ours="encoder.", theirs="encoder.", count=config.decoder_layers)
    map_layers(weights, recurrent("{kind}", "{kind}"), ours="decoder.cells.{layer}.", theirs="decoder.layers.{layer}.",
               count=config.decoder_layers)
    names: dict[str, str | Zeros] = {
        "encoder.embedding.weight": "encoder.embed_tokens.weight",
        "decoder.embedding.weight": "decoder.embed_tokens.weight",
        "decoder.query.weight": "decoder.attention.input_proj.weight",
        "decoder.combine.weight": "decoder.attention.output_proj.weight"}
    if config.annotation_width != config.hidden:  # the encoder's final states made as wide as the decoder's
        names |= both("decoder.hidden_projection", "decoder.encoder_hidden_proj")
        names |= both("decoder.cell_projection", "decoder.encoder_cell_proj")
    if shared_output:  # fairseq's F.linear(x, embed_tokens.weight): no bias
        names |= {"decoder.output.weight": "decoder.embed_tokens.weight",
                  "decoder.output.bias": Zeros("decoder.fc_out.bias", config.tgt_vocab_size)}
    else:
        names |= both("decoder.output", "decoder.fc_out")
    map_names(weights, names)
    return weights


def _bpe_file(file: Source, settings: Settings, folders: list[Path], bpe: Mapping[str, Any]) -> tuple[str, Path | None]:
    """("sentencepiece" | "subword_nmt" | "none", the file)."""
    if settings.has("bpe"):
        path = Path(settings.value("bpe", str))
        if not path.is_file():
            raise CheckpointError(path, "no such file (--set bpe=…)")
        return ("sentencepiece" if _is_sentencepiece(path) else "subword_nmt"), path
    named = bpe.get("sentencepiece_model") or bpe.get("bpe_codes")
    if isinstance(named, str) and Path(named).is_file():
        path = Path(named)
        return ("sentencepiece" if _is_sentencepiece(path) else "subword_nmt"), path
    for folder in folders:
        for name in SPM_NAMES:
            if (folder / name).is_file():
                return "sentencepiece", folder / name
        for name in CODES_NAMES:
            if (folder / name).is_file():
                return "subword_nmt", folder / name
        models = sorted(folder.glob("*.model"))
        if len(models) == 1 and _is_sentencepiece(models[0]):
            return "sentencepiece", models[0]
    return "none", None


def _is_sentencepiece(path: Path) -> bool:
    import sentencepiece as spm

    try:
        spm.SentencePieceProcessor(model_proto=path.read_bytes())
        return True
    except (RuntimeError, OSError):
        return False


def _tokenizers(file: Source, settings: Settings, folders: list[Path], bpe: Mapping[str, Any],
                vocabularies: list[list[str]]) -> Tokenizers:
    kind, path = _bpe_file(file, settings, folders=folders, bpe=bpe)
    specials = {"pad": PAD, "unk": UNK, "bos": EOS, "eos": EOS}
    moses = settings.value("moses", str, "") if settings.has("moses") else ""
    if moses and kind != "subword_nmt":
        raise file.error("--set moses applies to subword-nmt codes; this checkpoint's text is split "
                         + ("with a sentencepiece model" if kind == "sentencepiece" else "on whitespace"))
    try:
        if kind == "sentencepiece":
            proto = path.read_bytes()
            made = [SentencePieceVocabTokenizer(proto, vocabulary, specials) for vocabulary in vocabularies]
            return Tokenizers(made[0], made[1], f"sentencepiece model {path}")
        if kind == "subword_nmt":
            prepared = {"lang": moses, "lowercase": False} if moses else None
            made = [subword_nmt_tokenizer(path, vocabulary, specials=specials, moses=prepared)
                    for vocabulary in vocabularies]
            after = f" after Moses ({moses})" if moses else ""
            return Tokenizers(made[0], made[1], f"subword-nmt codes {path}{after}")
    except ConfigError as error:
        raise CheckpointError(path, str(error)) from None
    made = [WordTokenizer(vocabulary, specials) for vocabulary in vocabularies]
    return Tokenizers(made[0], made[1], "whitespace-separated dictionary symbols (no sentencepiece model or BPE codes "
                                        "found: give text split as the training data was, or --set bpe=FILE)")

