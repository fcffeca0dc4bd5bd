"""Sockeye 3 model folders (docs/checkpoint-formats.md#sockeye).

``sockeye-train --output MODEL`` leaves ``MODEL/config`` (the ``ModelConfig`` as YAML with Python tags such as
``!ModelConfig`` and ``!!python/tuple``: read here as plain mappings and lists, no object is built),
``params.best`` (``torch.save`` of the state dict; ``params.NNNNN`` for each checkpoint), ``vocab.src.0.json`` and
``vocab.trg.0.json`` (token → id; ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3), ``args.yaml`` and ``version``.

Its Transformer: ``preprocess_sequence`` ``n`` / ``postprocess_sequence`` ``dr`` is pre-LN (q, k and v all
read the normalised input: ``pre_norm_kv``), ``r``/``dr`` + ``n`` post-LN; LayerNorm eps 1e-6 and a LayerNorm
after each stack (``final_process``) when pre-LN; token vectors ×√d (its positional layer scales the input up)
plus fixed sinusoids (sines then cosines, our ``half_split``, from position 0; the stored table is checked) or
learned positions; attention projections without biases: ``ff_in`` (self-attention) stacks the queries, then per
head that head's keys and values (``[h0 k, h0 v, h1 k, h1 v, …]``), ``ff_kv`` (cross-attention) the same without
queries; a feed-forward ``ff2(act(ff1 x))`` (``use_glu``: ``· linear x``, our ``gated_ffn``); an output layer with
a bias; ``weight_tying_type`` ``src_trg_softmax`` / ``src_trg`` / ``trg_softmax`` / none. Sources end with
``</s>``, decoding starts from ``<s>``; text is whitespace-separated vocabulary tokens, as ``sockeye-translate``
reads it (subword splitting happens before Sockeye).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from ..storage.files import read_json
from ..nn.base import sinusoid_table
from ..nn.config import TransformerConfig
from ..errors import CheckpointError
from ..text.tokenizers import WordTokenizer
from .common import Inspection, Settings, Source, WeightMap, tensor_dict
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .layer_names import From, Names, both, fixed_positions, map_names, map_stacks

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=6)  # when detection asks this format (contract.py)
ACCEPTED: dict[str, str] = {}  # the folder says everything
SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish1": "swish"}
TYING = {"src_trg_softmax": (True, True), "src_trg": (True, False), "trg_softmax": (False, True),
         "none": (False, False)}
PROCESSING = {("n", "dr"): "pre", ("n", "r"): "pre", ("", "drn"): "post", ("", "rn"): "post"}
SUPPORTED = ("Sockeye 3 Transformers (pre- or post-LN, fixed or learned positions, relu/gelu/swish1, GLU, any "
             "weight tying) with one source and one target factor")


def _params(folder: Path) -> Path | None:
    if (folder / "params.best").is_file():
        return folder / "params.best"
    numbered = sorted(folder.glob("params.[0-9][0-9][0-9][0-9][0-9]"))
    return numbered[-1] if numbered else None


def _folder(source: Source) -> Path:
    path = source.path
    return path.parent if path.is_file() else path


def claims(source: Source) -> bool:
    folder = _folder(source)
    config = folder / "config"
    if not config.is_file() or _params(folder) is None:
        return False
    try:
        with open(config, encoding="utf-8") as handle:
            return handle.read(64).lstrip().startswith("!ModelConfig")
    except (OSError, UnicodeDecodeError):
        return False


def _yaml(path: Path) -> dict[str, Any]:
    """Sockeye's YAML with its Python tags read as plain data: a tagged mapping is a dict (its tag kept as
    ``__tag__``), a tuple a list; nothing is constructed."""
    import yaml  # a dependency of attnviz; imported here, as only some formats read YAML

    class PlainLoader(yaml.SafeLoader):
        pass

    def tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return {"__tag__": suffix, **loader.construct_mapping(node, deep=True)}
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    PlainLoader.add_multi_constructor("!", tagged)
    PlainLoader.add_constructor("tag:yaml.org,2002:python/tuple",
                                lambda loader, node: loader.construct_sequence(node, deep=True))
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=PlainLoader)  # noqa: S506 - plain data only
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise CheckpointError(path, f"cannot be read as Sockeye's model config ({error})") from None
    if not isinstance(data, dict) or data.get("__tag__") != "ModelConfig":
        raise CheckpointError(path, "is not a Sockeye ModelConfig (it should start with !ModelConfig)")
    return data


def inspect(source: Source, settings: Settings) -> Inspection:
    folder = _folder(source)
    config_path = folder / "config"
    config = _yaml(config_path)
    params = _params(folder)
    if params is None:
        raise source.error("a Sockeye folder without params.best (or params.NNNNN)")
    for name in ("config_encoder", "config_decoder", "config_embed_source", "config_embed_target"):
        if not isinstance(config.get(name), dict):
            raise CheckpointError(config_path, f"has no {name}")
    encoder, decoder = config["config_encoder"], config["config_decoder"]
    _refuse_unsupported(config_path, config)
    inferred = {
        "model_size": encoder.get("model_size"), "attention_heads": encoder.get("attention_heads"),
        "feed_forward_num_hidden": encoder.get("feed_forward_num_hidden"),
        "encoder_layers": encoder.get("num_layers"), "decoder_layers": decoder.get("num_layers"),
        "preprocess_sequence": encoder.get("preprocess_sequence"),
        "postprocess_sequence": encoder.get("postprocess_sequence"), "act_type": encoder.get("act_type"),
        "use_glu": bool(encoder.get("use_glu")), "positional_embedding_type": encoder.get("positional_embedding_type"),
        "max_seq_len_source": encoder.get("max_seq_len_source"),
        "max_seq_len_target": decoder.get("max_seq_len_target"),
        "weight_tying_type": str(config.get("weight_tying_type") or "none"),
        "vocab_source_size": config.get("vocab_source_size"), "vocab_target_size": config.get("vocab_target_size"),
        "params": params.name,
    }
    return Inspection(NAME, folder, inferred, accepted=ACCEPTED, found=(config, params))


def _refuse_unsupported(path: Path, config: Mapping[str, Any]) -> None:
    encoder, decoder = config["config_encoder"], config["config_decoder"]

    def refuse(what: str) -> None:
        raise CheckpointError(path, f"{what} is not supported; this version imports {SUPPORTED}")

    for key in ("model_size", "attention_heads", "feed_forward_num_hidden", "preprocess_sequence",
                "postprocess_sequence", "act_type", "use_glu", "positional_embedding_type"):
        if encoder.get(key) != decoder.get(key):
            refuse(f"encoder {key} {encoder.get(key)!r} ≠ decoder {key} {decoder.get(key)!r}")
    if decoder.get("decoder_type", "transformer") != "transformer":
        refuse(f"decoder_type {decoder.get('decoder_type')} (SSRU layers)")
    if (encoder.get("preprocess_sequence") or "", encoder.get("postprocess_sequence") or "") not in PROCESSING:
        refuse(f"preprocess_sequence {encoder.get('preprocess_sequence')!r} / postprocess_sequence "
               f"{encoder.get('postprocess_sequence')!r}")
    if encoder.get("act_type") not in ACTIVATIONS:
        refuse(f"act_type {encoder.get('act_type')}")
    if encoder.get("positional_embedding_type") not in ("fixed", "learned"):
        refuse(f"positional_embedding_type {encoder.get('positional_embedding_type')}")
    if config.get("lhuc") or encoder.get("use_lhuc") or decoder.get("use_lhuc"):
        refuse("LHUC")
    if config.get("neural_vocab_selection"):
        refuse("neural vocabulary selection")
    if decoder.get("block_prepended_cross_attention"):
        refuse("block_prepended_cross_attention")
    data = config.get("config_data") or {}
    if (data.get("num_source_factors") or 1) > 1 or (data.get("num_target_factors") or 1) > 1:
        refuse("source or target factors")
    if str(config.get("weight_tying_type") or "none") not in TYING:
        refuse(f"weight_tying_type {config.get('weight_tying_type')}")
    if config.get("config_embed_source", {}).get("num_embed") != encoder.get("model_size"):
        refuse("an embedding size other than the model size")


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    if src_vocab or tgt_vocab:
        raise source.error("a Sockeye folder carries its vocabularies (vocab.src.0.json, vocab.trg.0.json); drop "
                           "--src-vocab/--tgt-vocab")
    inspection = inspect(source, settings)
    config, params = inspection.found
    inferred = inspection.inferred
    folder = inspection.path
    state = tensor_dict(Source(params, source.trust).payload)
    if state is None:
        raise CheckpointError(params, "is not a state dict")
    vocabularies = [_vocabulary(folder / name, rows=inferred[rows])
                    for name, rows in (("vocab.src.0.json", "vocab_source_size"),
                                       ("vocab.trg.0.json", "vocab_target_size"))]
    ours = _config(config, inferred)
    specials = {"pad": 0, "unk": 1, "bos": 2, "eos": 3}  # _vocabulary checked them
    tokenization = ("whitespace-separated tokens of its vocabularies, as sockeye-translate reads text (any subword "
                    "splitting happens before Sockeye: split text the same way)")
    return Converted(ours, state, weights_file=params, weights=lambda: _map_weights(Source(params), state, ours),
                     tokenizers=lambda: Tokenizers(WordTokenizer(vocabularies[0], specials),
                                                   WordTokenizer(vocabularies[1], specials), tokenization),
                     provenance=Provenance(folder, inferred,
                                           vocabularies={"src": "vocab.src.0.json", "tgt": "vocab.trg.0.json"}))


def _vocabulary(path: Path, rows: Any) -> list[str]:
    ids = read_json(path, what="a Sockeye vocabulary")
    if not isinstance(ids, dict) or not all(isinstance(index, int) for index in ids.values()):
        raise CheckpointError(path, "is not a token → id object")
    size = max(ids.values(), default=-1) + 1
    if size != rows or len(set(ids.values())) != size:
        raise CheckpointError(path, f"holds ids for {size} tokens ({len(ids)} entries); the model config says "
                                    f"{rows}")
    tokens = [""] * size
    for token, index in ids.items():
        tokens[index] = token
    for role, token in SPECIALS.items():
        if ids.get(token) != ("pad", "unk", "bos", "eos").index(role):
            raise CheckpointError(path, f"puts {token} at {ids.get(token)}; Sockeye's vocabularies start with "
                                        f"<pad>, <unk>, <s>, </s>")
    return tokens


def _config(config: Mapping[str, Any], inferred: Mapping[str, Any]) -> TransformerConfig:
    encoder = config["config_encoder"]
    norm = PROCESSING[(encoder.get("preprocess_sequence") or "", encoder.get("postprocess_sequence") or "")]
    share, tie = TYING[inferred["weight_tying_type"]]
    learned = encoder["positional_embedding_type"] == "learned"
    return TransformerConfig(
        arch="transformer-preln" if norm == "pre" else "transformer-postln",
        src_vocab_size=inferred["vocab_source_size"], tgt_vocab_size=inferred["vocab_target_size"],
        d_model=inferred["model_size"], heads=inferred["attention_heads"], d_ff=inferred["feed_forward_num_hidden"],
        encoder_layers=inferred["encoder_layers"], decoder_layers=inferred["decoder_layers"],
        dropout=float(encoder.get("dropout_prepost") or 0.0),
        max_len=max(inferred["max_seq_len_source"], inferred["max_seq_len_target"]), norm_position=norm,
        final_norm=norm == "pre", pre_norm_kv=norm == "pre", layer_norm_eps=1e-6,
        activation=ACTIVATIONS[inferred["act_type"]], positions="learned" if learned else "half_split",
        scale_embedding=True, share_embeddings=share, tie_output=tie, attention_bias=False, output_bias=True,
        gated_ffn=inferred["use_glu"], pad_id=0, bos_id=2, eos_id=3, src_append_eos=True)


def _split_heads(weight: Tensor, heads: int, which: int) -> Tensor:
    """Keys (``which`` 0) or values (1) from Sockeye's interleaved ``[h0 k, h0 v, h1 k, h1 v, …]`` rows."""
    rows, width = weight.shape
    return weight.reshape(heads, 2, rows // (2 * heads), width)[:, which].reshape(rows // 2, width)


def _map_weights(params: Source, state: Mapping[str, Tensor], config: TransformerConfig) -> WeightMap:
    weights = WeightMap(params, state, NAME)
    map_stacks(weights, config, {side: (f"{side}.layers.{{layer}}.", _layer_names(config, side))
                                 for side in ("encoder", "decoder")})
    for side, ours in (("encoder", "src"), ("decoder", "tgt")):
        if config.final_norm:
            map_names(weights, both(f"{side}_norm", f"{side}.final_process.layer_norm"))
        table = f"{side}.pos_embedding.weight"
        if config.positions == "learned":
            weights.copy(f"{ours}_embedding.learned_positions.weight", table)
        elif table in state:  # fixed sinusoids, as long as the table saved
            fixed_positions(weights, table, expected=sinusoid_table(state[table].shape[0], config.d_model,
                                                                    "half_split"))
    weights.token_tables(config, "embedding_source.embedding.weight", target="embedding_target.embedding.weight",
                         output="output_layer.weight", output_bias="output_layer.bias")
    return weights


def _layer_names(config: TransformerConfig, side: str) -> Names:
    """One layer of a stack: ``ff_in`` (self-attention) stacks the queries, then per head that head's keys and
    values; ``ff_kv`` (cross-attention) the keys and values so, its queries apart in ``ff_q``; a norm before each
    sublayer (pre-LN) or after it (post-LN)."""
    d, heads, pre = config.d_model, config.heads, config.norm_position == "pre"
    own = "self_attention" if side == "encoder" else "autoregr_layer"
    names: dict[str, str | From] = {
        "self_attention.attention.query.weight": From(f"{own}.ff_in.weight", lambda w: w[:d]),
        "self_attention.attention.key.weight": From(f"{own}.ff_in.weight", lambda w: _split_heads(w[d:], heads, 0)),
        "self_attention.attention.value.weight": From(f"{own}.ff_in.weight", lambda w: _split_heads(w[d:], heads, 1)),
        "self_attention.attention.output.weight": f"{own}.ff_out.weight",
        **both("self_attention.norm", f"pre_{own}.layer_norm" if pre else f"post_{own}.layer_norm")}
    if side == "decoder":
        names |= {
            "cross_attention.attention.query.weight": "enc_attention.ff_q.weight",
            "cross_attention.attention.key.weight": From("enc_attention.ff_kv.weight",
                                                         lambda w: _split_heads(w, heads, 0)),
            "cross_attention.attention.value.weight": From("enc_attention.ff_kv.weight",
                                                           lambda w: _split_heads(w, heads, 1)),
            "cross_attention.attention.output.weight": "enc_attention.ff_out.weight",
            **both("cross_attention.norm", "pre_enc_attention.layer_norm" if pre else "post_enc_attention.layer_norm")}
    linears = (("linear_in", "ff1"), ("linear_out", "ff2")) + ((("linear_gate", "linear"),) if config.gated_ffn else ())
    for ours, theirs in linears:
        names |= both(f"feed_forward.{ours}", f"ff.{theirs}")
    return names | both("feed_forward.norm", "pre_ff.layer_norm" if pre else "post_ff.layer_norm")
