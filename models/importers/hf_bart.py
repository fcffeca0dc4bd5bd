"""Hugging Face folders of the BART layout (docs/checkpoint-formats.md#hf-bart): ``config.json`` with
``model_type`` ``bart``, ``mbart``, ``m2m_100`` (M2M100 and NLLB), ``pegasus`` or ``blenderbot-small``.

The families share their weight names (``{encoder,decoder}.layers.N.self_attn.q_proj``..., ``shared``,
``lm_head``, ``final_logits_bias``) and differ in what :data:`LAYOUTS` says:
``modeling_bart.py`` and ``modeling_blenderbot_small.py``: post-LN layers; ``modeling_mbart.py`` and
``modeling_pegasus.py``: pre-LN layers normalising query, keys and values, plus a final LayerNorm after each
stack. Token embedding ×√d when ``scale_embedding``; BART and mBART add a learned position table whose first 2
rows are never read (position p is row p + 2), then a LayerNorm (``layernorm_embedding``); BlenderbotSmall a
learned table from row 0, its encoder normalising token + position, its decoder the unscaled tokens alone
before the positions are added; Pegasus half-split sinusoids from position 0 and no LayerNorm; M2M100 (and
NLLB) fairseq's sinusoids from row pad id + 1 and no LayerNorm. Logits
``lm_head(x) + final_logits_bias``; decoding starts from ``decoder_start_token_id``. The tokenizer is the
folder's ``tokenizer.json``, whose post-processor frames each source (BART: ``<s> … </s>``; mBART:
``… </s> en_XX``; mBART-50, NLLB: ``en_XX … </s>``; Pegasus: ``… </s>``); a Pegasus folder without one is
read from ``spiece.model``, a BlenderbotSmall folder from ``vocab.json`` + ``merges.txt``, an M2M100 folder
from ``sentencepiece.bpe.model`` + ``vocab.json`` with its language codes after the pieces. Multilingual
tokenizers' language codes become the tokenizers' languages; the target language (``forced_bos_token_id``)
starts every output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..storage.files import read_json
from ..nn.config import TransformerConfig
from ..errors import CheckpointError, ConfigError
from ..text.tokenizers import SentencePieceVocabTokenizer, TokenizerJsonTokenizer
from .common import Inspection, Settings, Source, WeightMap
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import (
    bpe_tokenizer, hf_activation, hf_model_type, hf_sizes, key_prefix, map_bart_layers, piece_ids, read_hf_config,
    open_hf_folder, tokenizer_json_pair,
)

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=2, hf_folder=True)  # when detection asks this format (contract.py)


@dataclass(frozen=True)
class Layout:
    """What one family computes, in our config's terms."""

    pre_norm: bool  # pre-LN layers normalising q, k and v, and a final LayerNorm after each stack
    positions: str  # "learned" (a saved table) or one of our sinusoid layouts (rebuilt, a saved copy checked)
    position_offset: int  # rows of a learned table never read before position 0
    embedding_norm: bool  # ``layernorm_embedding`` on embedding + positions
    tgt_norm_before_positions: bool = False  # the decoder's ``layernorm_embedding`` reads the tokens alone
    tokenizer: str = "tokenizer.json"  # or "bpe-vocab": ``vocab.json`` + ``merges.txt`` with "@@" continuations
    sentencepiece: str = ""  # a sentencepiece model read when tokenizer.json is absent (Pegasus' offset layout)
    offset_after_pad: bool = False  # positions start at row pad id + 1 (fairseq's), whatever position_offset says


LAYOUTS = {"bart": Layout(pre_norm=False, positions="learned", position_offset=2, embedding_norm=True),
           "mbart": Layout(pre_norm=True, positions="learned", position_offset=2, embedding_norm=True),
           "m2m_100": Layout(pre_norm=True, positions="fairseq", position_offset=0, embedding_norm=False,
                             offset_after_pad=True),
           "pegasus": Layout(pre_norm=True, positions="half_split", position_offset=0, embedding_norm=False,
                             sentencepiece="spiece.model"),
           "blenderbot-small": Layout(pre_norm=False, positions="learned", position_offset=0, embedding_norm=True,
                                      tgt_norm_before_positions=True, tokenizer="bpe-vocab")}
# config.json fields a family's config class defaults differently from BartConfig
FAMILY_DEFAULTS = {"m2m_100": {"scale_embedding": True, "activation_function": "relu"},
                   "pegasus": {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
                               "max_position_embeddings": 512},
                   "blenderbot-small": {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                                        "decoder_start_token_id": 1, "max_position_embeddings": 512}}
MODEL_TYPES = tuple(LAYOUTS)
ACCEPTED = {"src_lang": "the source language's code, for multilingual models (default: the one the tokenizer "
                        "was saved with)",
            "tgt_lang": "the target language's code, for models that start each output with it (default: the "
                        "config's forced_bos_token_id)"}
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
    defaults.update(FAMILY_DEFAULTS.get(data.get("model_type"), {}))
    if data.get("model_type") == "pegasus":  # it has no start-of-text token: sources are labelled by the start
        defaults["bos_token_id"] = data.get("decoder_start_token_id", defaults["decoder_start_token_id"])
    data = {**defaults, **_generation_config(source),
            **{key: value for key, value in data.items() if value is not None or key not in defaults}}
    absent = [name for name in CONFIG_FIELDS if data.get(name) is None]
    if absent:
        raise CheckpointError(path, f"lacks {', '.join(absent)}")
    forced = data.get("forced_bos_token_id")
    if forced is not None and not (isinstance(forced, int) and not isinstance(forced, bool)):
        raise CheckpointError(path, f"forced_bos_token_id must be a token id; got {forced!r}")
    return {**{name: data[name] for name in CONFIG_FIELDS}, "forced_bos_token_id": forced}


def _generation_config(source: Source) -> dict[str, Any]:
    """generation_config.json's forced first token, where recent versions of transformers keep it."""
    data = read_json(source.path / "generation_config.json", missing={})
    forced = data.get("forced_bos_token_id") if isinstance(data, dict) else None
    return {} if forced is None else {"forced_bos_token_id": forced}


def tokenizer_files(source: Source, kind: str) -> tuple[str, ...]:
    """The tokenizer files a folder of this family is read with; a missing one is refused by name."""
    layout = LAYOUTS[kind]
    if layout.tokenizer == "bpe-vocab":
        needs: tuple[str, ...] = ("vocab.json", "merges.txt")
    elif kind == "m2m_100" and not (source.path / "tokenizer.json").is_file() \
            and (source.path / M2M100_SENTENCEPIECE).is_file():
        needs = (M2M100_SENTENCEPIECE, "vocab.json")
    elif layout.sentencepiece and not (source.path / "tokenizer.json").is_file() \
            and (source.path / layout.sentencepiece).is_file():
        needs = (layout.sentencepiece,)
    else:
        needs = ("tokenizer.json",)
    for name in needs:
        if not (source.path / name).is_file():
            slow = f" (nor {M2M100_SENTENCEPIECE} with vocab.json)" if kind == "m2m_100" else ""
            raise source.error(f"the {kind} folder has no {name}{slow}")
    return needs


def inspect(source: Source, settings: Settings) -> Inspection:
    config = _config(source)
    tokenizer_files(source, config["model_type"])
    return Inspection(NAME, source.path, dict(config), accepted=ACCEPTED, found=config)


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    folder = open_hf_folder(source, settings, inspect, vocabularies=(src_vocab, tgt_vocab))
    inspection, hf, state, weights_file = folder.inspection, folder.hf, folder.state, folder.weights_file
    files = tokenizer_files(source, hf["model_type"])
    sentencepiece = files in ((LAYOUTS[hf["model_type"]].sentencepiece,), (M2M100_SENTENCEPIECE, "vocab.json"))
    config = _our_config(source, hf, state, append_eos=sentencepiece)
    return Converted(config, state, weights_file=weights_file,
                     weights=partial(_map_weights, state, config, file=weights_file, kind=hf["model_type"]),
                     tokenizers=partial(_tokenizers, source, settings, config=config, hf=hf, files=files),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": ", ".join(files), "tgt": ", ".join(files)}))


def _tokenizers(source: Source, settings: Settings, *, config: TransformerConfig, hf: dict[str, Any],
                files: tuple[str, ...]) -> Tokenizers:
    """The tokenizers its files make, with the languages chosen (see :func:`_choose_languages`)."""
    if LAYOUTS[hf["model_type"]].tokenizer == "bpe-vocab":
        source_tokenizer, target_tokenizer = _bpe_vocab_tokenizers(source, config)
    elif files == (M2M100_SENTENCEPIECE, "vocab.json"):
        source_tokenizer, target_tokenizer = _m2m100_sentencepiece(source, config, hf)
    elif config.src_append_eos:
        source_tokenizer, target_tokenizer = _pegasus_sentencepiece(source, config, files[0])
    else:
        source_tokenizer, target_tokenizer = tokenizer_json_pair(source, config, hf["bos_token_id"])
    _choose_languages(source, settings, hf=hf, source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer)
    return Tokenizers(source_tokenizer, target_tokenizer, ", ".join(files))


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor], *, append_eos: bool) -> TransformerConfig:
    """``append_eos``: the tokenizer does not frame sources (a sentencepiece model), so the model ends them."""
    activation = hf_activation(source, hf)
    layout = LAYOUTS[hf["model_type"]]
    pre = layout.pre_norm
    prefix = key_prefix(state)
    lm_head = state.get("lm_head.weight")
    shared = state.get(f"{prefix}shared.weight")
    tied = bool(hf["tie_word_embeddings"]) or (lm_head is not None and shared is not None
                                               and torch.equal(lm_head, shared))
    return TransformerConfig(
        arch="transformer-preln" if pre else "transformer-postln", src_vocab_size=hf["vocab_size"],
        tgt_vocab_size=hf["vocab_size"], d_model=hf["d_model"], **hf_sizes(hf),
        encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"],
        dropout=float(hf["dropout"]), max_len=hf["max_position_embeddings"], norm_position="pre" if pre else "post",
        final_norm=pre, pre_norm_kv=pre, layer_norm_eps=1e-5, activation=activation, positions=layout.positions,
        position_offset=hf["pad_token_id"] + 1 if layout.offset_after_pad else layout.position_offset,
        scale_embedding=bool(hf["scale_embedding"]), share_embeddings=True,
        tie_output=tied, embedding_norm=layout.embedding_norm,
        tgt_norm_before_positions=layout.tgt_norm_before_positions, attention_bias=True, output_bias=True,
        pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], src_append_eos=append_eos)


def _map_weights(state: dict[str, Tensor], config: TransformerConfig, file: Path, kind: str) -> WeightMap:
    prefix = key_prefix(state)
    weights = WeightMap(Source(file), state, kind)
    map_bart_layers(weights, prefix, config)
    for side in ("encoder", "decoder"):
        weights.ignore(f"{prefix}{side}.embed_positions.weights")  # M2M100's sinusoid, saved by some versions
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


M2M100_SENTENCEPIECE = "sentencepiece.bpe.model"
# M2M100's language codes, in the order its vocabulary appends them after vocab.json's pieces (``__af__`` first);
# its tokenizer_config.json names the list ("language_codes") but not the codes.
M2M100_LANGUAGES = {
    "m2m100": ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he "
               "hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no "
               "ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh "
               "zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def _m2m100_sentencepiece(source: Source, config: TransformerConfig,
                          hf: dict[str, Any]) -> tuple[SentencePieceVocabTokenizer, SentencePieceVocabTokenizer]:
    """M2M100's own tokenizer: the sentencepiece model splits text into pieces, vocab.json gives their ids, then
    the language codes ``__xx__`` follow the pieces; a source is ``__src__ pieces </s>``, an output starts with
    ``__tgt__``. The languages chosen by default are tokenizer_config.json's ``src_lang``/``tgt_lang``."""
    folder = source.path
    vocab = piece_ids(folder / "vocab.json")
    path = folder / "tokenizer_config.json"
    settings_file = _json_object(path)
    listed = settings_file.get("language_codes", "m2m100")
    if listed not in M2M100_LANGUAGES:
        raise CheckpointError(folder / "tokenizer_config.json", f"language_codes {listed!r} is not one of "
                                                                 f"{', '.join(M2M100_LANGUAGES)}")
    size = max(vocab.values(), default=-1) + 1
    languages = {f"__{code}__": size + index for index, code in enumerate(M2M100_LANGUAGES[listed])}
    if size + len(languages) > config.tgt_vocab_size:
        raise CheckpointError(folder / "vocab.json", f"{size} pieces and {len(languages)} language codes do not fit "
                                                     f"the model's vocabulary of {config.tgt_vocab_size}")
    pieces = [f"<id {index}>" for index in range(config.tgt_vocab_size)]
    for piece, index in sorted(vocab.items(), key=lambda item: -item[1]):  # the lowest piece wins a shared id
        pieces[index] = piece
    for code, index in languages.items():
        pieces[index] = code
    ids = {role: vocab.get(token) for role, token in (("pad", "<pad>"), ("unk", "<unk>"), ("eos", "</s>"))}
    for role, expected in (("pad", config.pad_id), ("eos", config.eos_id)):
        if ids[role] != expected:
            raise CheckpointError(folder / "vocab.json", f"puts <{role}> at {ids[role]}; config.json says {expected}")
    proto = (folder / M2M100_SENTENCEPIECE).read_bytes()
    forced = hf["forced_bos_token_id"]
    by_id = {index: code for code, index in languages.items()}
    target_default = by_id.get(forced) if forced is not None else None
    defaults = [settings_file.get("src_lang"), target_default or settings_file.get("tgt_lang")]
    made = []
    for side, default in zip(("source", "target"), defaults):
        code = f"__{default}__" if isinstance(default, str) and f"__{default}__" in languages else \
            default if default in languages else None
        try:
            made.append(SentencePieceVocabTokenizer(proto, pieces, {**ids, "bos": config.bos_id}, languages=languages,
                                                    language=code, prefix_language=side == "source",
                                                    force_language=side == "target"))
        except ConfigError as error:
            raise CheckpointError(folder / M2M100_SENTENCEPIECE, str(error)) from None
    return made[0], made[1]


def _choose_languages(source: Source, settings: Settings, hf: dict[str, Any], source_tokenizer,
                      target_tokenizer) -> None:
    """The languages of a multilingual folder: the source's defaults to the one its tokenizer frames
    sources with, the target's to the config's forced first token, which then starts every output."""
    codes = {index: code for code, index in source_tokenizer.languages.items()}
    forced = hf["forced_bos_token_id"]
    if isinstance(source_tokenizer, SentencePieceVocabTokenizer):  # M2M100's own: its defaults are chosen
        for tokenizer, key in ((source_tokenizer, "src_lang"), (target_tokenizer, "tgt_lang")):
            code = settings.value(key, str, tokenizer.language)  # the folder's own is recorded as assumed
            try:
                if code is not None:
                    tokenizer.set_language(code)
            except ConfigError as error:
                raise CheckpointError(f"--set {key}", str(error)) from None
        return
    if not codes:
        for key in ("src_lang", "tgt_lang"):
            if settings.has(key):
                raise CheckpointError(f"--set {key}", "this model has no language codes in its tokenizer")
        if forced is not None:
            raise source.error(f"forced_bos_token_id {forced} is not a language code of its tokenizer; forced first "
                               f"tokens other than a language are not supported")
        return
    framed = next((codes[token_id] for token_id in _frame(source_tokenizer) if token_id in codes), None)
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


BPE_SPECIALS = {"pad": "__null__", "bos": "__start__", "eos": "__end__", "unk": "__unk__"}
BPE_PUNCTUATION = "[.,!?()]"  # split off before each of these, as BlenderbotSmallTokenizer does


def _bpe_vocab_tokenizers(source: Source, config: TransformerConfig) -> tuple[TokenizerJsonTokenizer,
                                                                              TokenizerJsonTokenizer]:
    """``vocab.json`` + ``merges.txt`` of BlenderbotSmall's tokenizer, expressed for the ``tokenizers`` library:
    lower case; words split at whitespace, before each of ``. , ! ? ( )`` and around ``'``; BPE over the
    characters with ``</w>`` on the last, then every piece but the last of a word written with ``@@`` and
    looked up in vocab.json (unknown pieces: the unknown token). In the library's terms a vocab.json piece
    ``x@@`` is the symbol ``x`` and a piece ``x`` is ``x</w>``; symbols the merges make that vocab.json lacks
    get ids beyond the model's vocabulary, read as the unknown token (transformers merges first and looks up
    after). No source framing: transformers adds no ``__end__``. Not expressed: its ``__newln__`` for a
    line break (text here is one line)."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    folder = source.path
    vocab = piece_ids(folder / "vocab.json")
    merges_path = folder / "merges.txt"
    try:  # transformers skips the first line (#version) and the last (empty when the file ends with a newline)
        lines = merges_path.read_text(encoding="utf-8").split("\n")[1:-1]
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(merges_path, f"cannot be read ({error})") from None
    merges = [tuple(line.split()) for line in lines]
    if any(len(merge) != 2 for merge in merges):
        raise CheckpointError(merges_path, "has a line that is not two symbols")
    names = _special_names(folder)
    specials = {role: vocab.get(name) for role, name in names.items()}
    for role in ("pad", "eos"):
        expected = config.pad_id if role == "pad" else config.eos_id
        if specials[role] != expected:
            raise CheckpointError(folder / "vocab.json", f"puts {names[role]} at {specials[role]}; config.json says "
                                                         f"{expected}")
    if specials["unk"] is None:
        raise CheckpointError(folder / "vocab.json", f"has no {names['unk']}")
    symbols: dict[str, int] = {}
    for piece, index in sorted(vocab.items(), key=lambda item: -item[1]):  # the lowest id wins a shared symbol
        special = piece in names.values()
        symbols[piece if special else piece[:-2] if piece.endswith("@@") and len(piece) > 2 else piece + "</w>"] = index
    tokenizer = bpe_tokenizer(merges_path, symbols, merges=merges, unk=names["unk"], vocab_size=config.tgt_vocab_size)
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(BPE_PUNCTUATION), "merged_with_next"),
        pre_tokenizers.Split("'", "isolated")])
    tokenizer.decoder = decoders.BPEDecoder(suffix="</w>")
    tokenizer.add_special_tokens([name for name in names.values() if name in vocab])
    pieces = [f"<id {index}>" for index in range(config.tgt_vocab_size)]
    for piece, index in sorted(vocab.items(), key=lambda item: -item[1]):
        pieces[index] = piece
    ids = {role: specials[role] for role in ("pad", "unk", "eos")}
    try:
        return tuple(TokenizerJsonTokenizer(tokenizer.to_str(), pieces, {**ids, "bos": config.bos_id},
                                            beyond_is_unknown=True) for _ in range(2))
    except ConfigError as error:
        raise CheckpointError(folder / "vocab.json", str(error)) from None


def _special_names(folder: Path) -> dict[str, str]:
    """The special tokens tokenizer_config.json names, else the defaults."""
    settings = _json_object(folder / "tokenizer_config.json")
    return {role: _token_name(settings.get(f"{role}_token"), default) for role, default in BPE_SPECIALS.items()}


def _pegasus_sentencepiece(source: Source, config: TransformerConfig,
                           name: str) -> tuple[SentencePieceVocabTokenizer, SentencePieceVocabTokenizer]:
    """Pegasus' ``spiece.model`` with its id layout: ``<pad>`` 0, ``</s>`` 1, ``mask_token_sent`` (``<mask_1>``) 2,
    ``mask_token`` (``<mask_2>``) 3, ``<unk_2>``..``<unk_{offset-1}>``, then sentencepiece piece i at id
    i + ``offset`` (103) from piece 2 on (names and offset from tokenizer_config.json when it gives them)."""
    import sentencepiece as spm

    path = source.path / name
    settings = _json_object(source.path / "tokenizer_config.json")
    offset = settings.get("offset", 103)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 2:
        raise CheckpointError(source.path / "tokenizer_config.json", f"offset must be an integer of 2 or more; "
                                                                     f"got {offset!r}")
    names = {key: _token_name(settings.get(key), default) for key, default in
             (("pad_token", "<pad>"), ("eos_token", "</s>"), ("unk_token", "<unk>"), ("mask_token", "<mask_2>"),
              ("mask_token_sent", "<mask_1>"))}
    try:
        proto = path.read_bytes()
        processor = spm.SentencePieceProcessor(model_proto=proto)
    except (OSError, RuntimeError) as error:
        raise CheckpointError(path, f"cannot be read as a sentencepiece model ({error})") from None
    head = [names["pad_token"], names["eos_token"], names["mask_token_sent"], names["mask_token"]]
    head += [f"<unk_{index}>" for index in range(2, offset)]
    pieces = (head + [processor.id_to_piece(index) for index in range(2, processor.get_piece_size())])
    if len(pieces) > config.tgt_vocab_size:
        raise CheckpointError(path, f"with offset {offset} gives {len(pieces)} ids; the model has "
                                    f"{config.tgt_vocab_size}")
    pieces += [f"<id {index}>" for index in range(len(pieces), config.tgt_vocab_size)]
    unk = processor.unk_id() + offset if processor.unk_id() >= 2 else None
    specials = {"pad": config.pad_id, "unk": unk, "bos": config.bos_id, "eos": config.eos_id}
    for role, token in (("pad", names["pad_token"]), ("eos", names["eos_token"])):
        if pieces.index(token) != specials[role]:
            raise CheckpointError(path, f"puts {token} at {pieces.index(token)}; config.json says {specials[role]}")
    try:
        return tuple(SentencePieceVocabTokenizer(proto, pieces, specials) for _ in range(2))
    except ConfigError as error:
        raise CheckpointError(path, str(error)) from None


def _json_object(path: Path) -> dict[str, Any]:
    data = read_json(path, missing={})
    return data if isinstance(data, dict) else {}


def _token_name(value: Any, default: str) -> str:
    """A special token as tokenizer_config.json gives it: a string or an added-token object."""
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else default
