"""Architecture configurations: one frozen dataclass per family, saved verbatim in every checkpoint.

The ``arch`` field names the architecture as the CLI's ``--arch`` does. Family-specific switches exist
so that checkpoints from other codebases can be expressed exactly (docs/checkpoint-formats.md);
the defaults are the seed documents' architectures.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Union

from ..errors import ConfigError
from .config_checks import (
    ACTIVATIONS, _check_choice, _check_min_output_len, _check_positive, _check_special_ids, _require,
)
from .encoder_config import ENCODER_ARCHS, EncoderOnlyConfig
from .validation import check_config_fields

TRANSFORMER_ARCHS = ("transformer-preln", "transformer-postln")
RNN_ARCHS = ("gru-none", "gru-additive", "gru-scaled-dot", "gru-causal-scaled-dot", "gru-transformer-decoder",
             "rnn-luong")
LUONG_SCORES = ("dot", "general", "mlp")
RNN_CELLS = ("gru", "lstm")
INIT_HIDDEN = ("encoder", "bridge", "last", "zero")
ARCHS = TRANSFORMER_ARCHS + RNN_ARCHS  # the encoder-decoder and GRU architectures
DECODER_ARCHS = ("decoder-only",)
TRAINED_ARCHS = ARCHS + DECODER_ARCHS + ENCODER_ARCHS  # what `attnviz train --arch` builds
LOADED_ARCHS = ARCHS + DECODER_ARCHS + ENCODER_ARCHS  # what a checkpoint may hold

POSITION_LAYOUTS = ("interleaved", "half_split", "learned", "fairseq", "none")
NORM_KINDS = ("layer_norm", "unbiased_std", "rms")


@dataclass(frozen=True)
class TransformerConfig:
    """Encoder-decoder Transformer, pre-LN or post-LN (docs/architectures.md#pre-ln-transformer).

    ``norm_position="pre"``: ``x + Dropout(Sublayer(LN(x)))``; the pre-LN design normalises only the attention
    query, keys and values come from the un-normalised input (``pre_norm_kv=False``); ``nn.Transformer``
    with ``norm_first=True`` normalises all three (``pre_norm_kv=True``).
    ``norm_position="post"``: ``LN(x + Dropout(Sublayer(x)))``.
    ``embedding_norm``: a LayerNorm on embedding + positions before the first layer (jadore v3).
    ``logit_scale``: logits are multiplied by it (jadore: d_model^-0.5 with a tied output projection).
    ``norm_kind="unbiased_std"``: every LayerNorm divides by the unbiased std + eps (the annotated transformer).
    ``positions="learned"``: a trained table of ``max_len + position_offset`` rows per side, position p read
    from row ``p + position_offset`` (BART and mBART keep 2 unused rows first). ``positions="fairseq"``: fairseq's
    sinusoid table (docs/architectures.md#transformer-common), position p read from row ``p + position_offset``
    (FSMT, M2M100, NLLB: pad id + 1), padding tokens given no position (zeros). ``positions="none"``: no
    absolute positions at all (T5: order comes from the relative position bias only).
    ``tgt_norm_before_positions``: the target side's embedding LayerNorm reads the token vectors alone and the
    positions are added after it, without the ×√E scale (BlenderbotSmall's decoder); needs ``embedding_norm``.
    ``relative_buckets`` > 0: a learned bias ``[relative_buckets, heads]`` per stack added to the self-attention
    scores, looked up by the bucket of the key's distance from the query (bidirectional in the encoder,
    past-only in the decoder; distances from ``relative_max_distance`` on share the last bucket); none on
    cross-attention (docs/architectures.md#relative-position-bias).
    ``scale_attention=False``: scores are ``q·k`` without the 1/√D. ``norm_kind="rms"``: ``weight · x /
    sqrt(mean(x²) + eps)``, no bias (T5). ``gated_ffn``: ``linear_out(act(linear_in(h)) · linear_gate(h))``;
    ``feed_forward_bias``: biases of those maps.
    ``residual_scale``: every residual connection adds ``residual_scale × x`` instead of ``x`` (JoeyNMT's
    ``alpha``).
    ``heads`` and ``d_ff`` hold for both stacks unless ``decoder_heads``/``decoder_d_ff`` (0: the same) give the
    decoder's own (Marian and BART configs may differ per side); the decoder's heads serve its self- and its
    cross-attention. ``d_head`` (0: d_model // that side's heads) is one size for both.
    ``decoder_norm_position`` ("": as ``norm_position``): the decoder's own placement (JoeyNMT builds pre-LN
    encoders and post-LN decoders unless told otherwise); with one given, ``final_norm`` puts a norm after the
    pre-LN stacks only, as JoeyNMT does with ``layer_norm`` named on both sides.
    ``decoder_final_norm`` (None: as ``final_norm`` says): whether the decoder ends with a norm; with it given,
    ``final_norm`` is the encoder's alone, whatever the placements (JoeyNMT's pre-LN encoder without a final
    norm, its ``layer_norm`` left unnamed, beside a decoder with one).
    """

    arch: str
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 256
    heads: int = 4
    d_head: int = 0  # 0: d_model // heads
    d_ff: int = 1024
    decoder_heads: int = 0  # 0: heads
    decoder_d_ff: int = 0  # 0: d_ff
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    max_len: int = 512
    norm_position: str = "pre"
    decoder_norm_position: str = ""  # "": norm_position
    final_norm: bool = True
    decoder_final_norm: bool | None = None  # None: as final_norm says
    pre_norm_kv: bool = False
    layer_norm_eps: float = 1e-5
    activation: str = "relu"
    positions: str = "interleaved"
    scale_embedding: bool = False
    share_embeddings: bool = False
    tie_output: bool = False
    attention_bias: bool = True
    output_bias: bool = True
    embedding_norm: bool = False
    logit_scale: float = 1.0
    norm_kind: str = "layer_norm"
    position_offset: int = 0
    tgt_norm_before_positions: bool = False
    relative_buckets: int = 0  # 0: no relative position bias
    relative_max_distance: int = 0
    scale_attention: bool = True
    gated_ffn: bool = False
    feed_forward_bias: bool = True
    residual_scale: float = 1.0  # each sublayer adds residual_scale × its input (JoeyNMT's alpha)
    suppress_bos: bool = False  # decoding never outputs bos_id (JoeyNMT's search)
    min_output_len: int = 0  # greedy and beam search never end before this many tokens (fairseq, JoeyNMT: 1)
    pad_id: int = 0
    bos_id: int = 2  # the start token fed to the decoder first
    eos_id: int = 3
    src_append_eos: bool = True  # end every source with eos_id

    @property
    def head_dim(self) -> int:
        return self.head_dim_of("encoder")

    def heads_of(self, side: str) -> int:
        """The heads of each attention in the ``"encoder"`` or ``"decoder"`` stack."""
        return self.decoder_heads or self.heads if side == "decoder" else self.heads

    def head_dim_of(self, side: str) -> int:
        return self.d_head or self.d_model // self.heads_of(side)

    def norm_position_of(self, side: str) -> str:
        """"pre" or "post": where the ``"encoder"`` or ``"decoder"`` stack's sublayers normalise."""
        return self.decoder_norm_position or self.norm_position if side == "decoder" else self.norm_position

    def final_norm_of(self, side: str) -> bool:
        """Whether the ``"encoder"`` or ``"decoder"`` stack ends with a norm."""
        if self.decoder_final_norm is not None:
            return self.decoder_final_norm if side == "decoder" else self.final_norm
        return self.final_norm and (not self.decoder_norm_position or self.norm_position_of(side) == "pre")

    def d_ff_of(self, side: str) -> int:
        """The feed-forward width of the ``"encoder"`` or ``"decoder"`` stack."""
        return self.decoder_d_ff or self.d_ff if side == "decoder" else self.d_ff

    def validate(self) -> None:
        check_config_fields(self)
        _check_choice("arch", self.arch, TRANSFORMER_ARCHS)
        _check_positive(self, "src_vocab_size", "tgt_vocab_size", "d_model", "heads", "d_ff",
                        "encoder_layers", "decoder_layers", "max_len")
        for name in ("decoder_heads", "decoder_d_ff"):
            value = getattr(self, name)
            _require(value >= 0, f"{name} must be 0 (as the encoder) or a positive integer; got {value!r}")
        for name, heads in (("heads", self.heads), ("decoder_heads", self.decoder_heads)):
            _require(self.d_head > 0 or heads == 0 or self.d_model % heads == 0,
                     f"d_model ({self.d_model}) must be divisible by {name} ({heads}) unless d_head is set")
        _require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1); got {self.dropout}")
        _check_choice("norm_position", self.norm_position, ("pre", "post"))
        _check_choice("decoder_norm_position", self.decoder_norm_position, ("", "pre", "post"))
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("positions", self.positions, POSITION_LAYOUTS)
        _check_choice("norm_kind", self.norm_kind, NORM_KINDS)
        _require(self.relative_buckets == 0 or (self.relative_buckets >= 4
                                                 and self.relative_max_distance > self.relative_buckets // 2),
                 f"relative_buckets must be 0 (no relative position bias) or at least 4, with relative_max_distance "
                 f"above half of it; got {self.relative_buckets} and {self.relative_max_distance}")
        _require(isinstance(self.position_offset, int) and not isinstance(self.position_offset, bool)
                 and self.position_offset >= 0
                 and (self.position_offset == 0 or self.positions in ("learned", "fairseq")),
                 f"position_offset must be a non-negative integer, used only with learned or fairseq positions; "
                 f"got {self.position_offset!r}")
        _require(not self.tgt_norm_before_positions or self.embedding_norm,
                 "tgt_norm_before_positions needs embedding_norm")
        _require(isinstance(self.residual_scale, (int, float)) and not isinstance(self.residual_scale, bool)
                 and self.residual_scale > 0, f"residual_scale must be a positive number; got {self.residual_scale!r}")
        _require(isinstance(self.logit_scale, (int, float)) and self.logit_scale > 0,
                 f"logit_scale must be a positive number; got {self.logit_scale!r}")
        _require(not self.share_embeddings or self.src_vocab_size == self.tgt_vocab_size,
                 "share_embeddings needs equal source and target vocabulary sizes")
        _check_min_output_len(self)
        _check_special_ids(self)


@dataclass(frozen=True)
class RNNConfig:
    """GRU encoder with one of its decoders (docs/architectures.md#gru-encoder).

    ``gru-none``: GRU decoder without attention, started from the encoder's final hidden state.
    ``gru-additive`` / ``gru-scaled-dot`` / ``gru-causal-scaled-dot``: at each step attention over the
    encoder annotations; the GRU reads ``[embedding; context]``. ``attention_query`` picks the query:
    ``"hidden"`` (the decoder's previous hidden state, Bahdanau and the PyTorch tutorial) or
    ``"embedding"`` (the current input embedding). The causal variant lets output
    step t attend to source positions 0..t only.
    ``gru-transformer-decoder``: ``decoder_layers`` blocks of causal self-attention, attention over the
    annotations and a Linear→ReLU MLP, each with a residual, then a linear output layer.
    ``rnn-luong``: Luong's global attention with input feeding (OpenNMT-py's RNN decoder): ``decoder_layers``
    encoder layers of ``rnn_cell`` GRU or LSTM (``bidirectional``: hidden/2 per direction) and as many stacked
    decoder cells reading
    ``[embedding; previous attentional state]``, attention after the cell (``luong_score`` dot, general or mlp),
    attentional state ``tanh(W[context; h])`` (no tanh, with a bias, for mlp) feeding the output layer.
    ``embedding_size`` 0 means ``hidden``. JoeyNMT's RecurrentDecoder (rnn-luong only): ``input_feeding=False``:
    the first cell reads the embedding alone; ``init_hidden`` ``bridge``/``last``/``zero``: every decoder layer
    (and an LSTM's cell) starts from ``tanh(W h + b)`` of the encoder's top-layer final state ``h``, from ``h``, or
    from zeros (``encoder``: each layer from its own encoder layer); ``attentional_bias``: the attentional state
    is ``tanh(W[context; h] + b)`` whatever the score.
    ``annotation_size`` (rnn-luong only; 0: ``hidden``): an encoder wider or narrower than the decoder, its
    annotations (both directions together) this wide. The attention then maps the query into their width
    (``general``; ``mlp``: the keys into the decoder's), the attentional layer reads ``[context; h]`` of both
    widths, and the decoder's first states come from the encoder's through ``bridge`` (a map to ``hidden``),
    ``last`` (the forward direction of a bidirectional encoder twice as wide), or, with ``encoder``, one map for
    the hidden states and one for an LSTM's cells, with biases and no activation (fairseq's).
    """

    arch: str
    src_vocab_size: int
    tgt_vocab_size: int
    hidden: int = 128
    dropout: float = 0.1
    max_len: int = 256
    attention_query: str = "hidden"
    additive_activation: str = "relu"
    decoder_layers: int = 2
    decoder_heads: int = 1
    positions: bool = True
    pad_id: int = 0
    bos_id: int = 2  # the start token fed to the decoder first
    eos_id: int = 3
    src_append_eos: bool = True  # end every source with eos_id
    bidirectional: bool = False  # rnn-luong only, as the three below
    embedding_size: int = 0  # 0: hidden
    luong_score: str = "general"
    rnn_cell: str = "gru"
    input_feeding: bool = True  # rnn-luong only, as the two below
    init_hidden: str = "encoder"
    attentional_bias: bool = False
    suppress_bos: bool = False  # decoding never outputs bos_id (JoeyNMT's search)
    min_output_len: int = 0  # greedy and beam search never end before this many tokens (fairseq, JoeyNMT: 1)
    annotation_size: int = 0  # 0: hidden; rnn-luong only

    @property
    def annotation_width(self) -> int:
        """How wide the encoder's annotations are (both directions together)."""
        return self.annotation_size or self.hidden

    def validate(self) -> None:
        check_config_fields(self)
        _check_choice("arch", self.arch, RNN_ARCHS)
        self._check_annotation_size()
        _check_choice("luong_score", self.luong_score, LUONG_SCORES)
        _check_choice("rnn_cell", self.rnn_cell, RNN_CELLS)
        _require(not self.bidirectional or self.annotation_width % 2 == 0,
                 f"a bidirectional encoder needs an even width; got {self.annotation_width}")
        _check_choice("init_hidden", self.init_hidden, INIT_HIDDEN)
        _require(self.arch == "rnn-luong" or (not self.bidirectional and self.embedding_size == 0
                                              and self.rnn_cell == "gru" and self.input_feeding
                                              and self.init_hidden == "encoder" and not self.attentional_bias),
                 "bidirectional, embedding_size, rnn_cell, input_feeding, init_hidden and attentional_bias apply to "
                 "rnn-luong only")
        _check_positive(self, "src_vocab_size", "tgt_vocab_size", "hidden", "max_len",
                        "decoder_layers", "decoder_heads")
        _require(self.hidden % self.decoder_heads == 0,
                 f"hidden ({self.hidden}) must be divisible by decoder_heads ({self.decoder_heads})")
        _require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1); got {self.dropout}")
        _check_choice("attention_query", self.attention_query, ("hidden", "embedding"))
        _check_choice("additive_activation", self.additive_activation, ("relu", "tanh"))
        _check_min_output_len(self)
        _check_special_ids(self)

    def _check_annotation_size(self) -> None:
        if self.annotation_width == self.hidden:
            return
        _require(self.arch == "rnn-luong", "annotation_size applies to rnn-luong only")
        _require(self.luong_score != "dot", f"the dot score needs annotations as wide as the decoder "
                                            f"({self.hidden}); got annotation_size {self.annotation_size}")
        _require(self.init_hidden != "last" or self.annotation_size == 2 * self.hidden,
                 f"init_hidden last needs annotations as wide as the decoder ({self.hidden}) or twice as wide; got "
                 f"annotation_size {self.annotation_size}")


DECODER_POSITIONS = ("learned", "rotary")
ROPE_SCALINGS = ("", "llama3")


@dataclass(frozen=True)
class DecoderOnlyConfig:
    """Decoder-only Transformer language model, pre-LN (docs/architectures.md#decoder-only): GPT-2, Llama,
    Mistral, Qwen2, Qwen3, Gemma 2 and models trained here.

    ``positions``: ``learned`` (a table of ``max_len`` rows added to the token vectors, GPT-2) or ``rotary``
    (RoPE on queries and keys, base ``rope_theta``; ``rope_scaling="llama3"`` rescales its frequencies with
    ``rope_factor``, ``rope_low_freq_factor``, ``rope_high_freq_factor`` and ``rope_original_max_len``).
    ``kv_heads`` (0: ``heads``): key/value heads, each shared by ``heads // kv_heads`` query heads (grouped-query;
    1: multi-query). ``norm_kind`` ``layer_norm`` or ``rms``; an RMS norm multiplies by ``norm_offset + weight``
    (Gemma: 1); ``norm_bias=False``: LayerNorms with a weight and no bias (nanoGPT's ``bias=False``).
    ``gated_ffn``: ``linear_out(act(linear_in(h)) · linear_gate(h))`` (SwiGLU, GeGLU), else
    ``linear_out(act(linear_in(h)))``. ``qkv_bias``, ``out_bias``, ``ffn_bias``: biases of the projections.
    ``qk_norm``: an RMS norm over each head's query and key before the rotation (Qwen3). ``sandwich_norms``: the
    attention and feed-forward outputs are normalised again before their residual (Gemma 2).
    ``sliding_window`` > 0: local layers let a query see the keys less than that many positions back;
    ``window_layers`` gives per layer ``L`` (local) or ``G`` (global), "" making every layer local.
    ``query_scalar`` (0: the head size): scores are ``q·k / √query_scalar``. ``attention_softcap`` and
    ``logit_softcap`` (0: none): scores and final logits become ``cap · tanh(x / cap)``. ``scale_embedding``:
    token vectors × √d_model (Gemma). ``stop_ids``: more tokens that end a continuation besides ``eos_id``.
    ``prompt_separator``: the model was trained (``attnviz train --arch decoder-only``) on sequences ``source
    tokens, bos_id, target tokens, eos_id``: ``bos_id`` is the separator that ends every prompt, fed first when
    decoding (docs/architectures.md#decoder-only).
    """

    arch: str
    vocab_size: int
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 0  # 0: heads
    d_head: int = 0  # 0: d_model // heads
    d_ff: int = 1024
    dropout: float = 0.0
    max_len: int = 1024
    positions: str = "rotary"
    rope_theta: float = 10000.0
    rope_scaling: str = ""
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_len: int = 0
    norm_kind: str = "rms"
    norm_eps: float = 1e-6
    norm_offset: float = 0.0
    norm_bias: bool = True  # layer_norm only: whether each LayerNorm adds a bias
    activation: str = "swish"
    gated_ffn: bool = True
    qkv_bias: bool = False
    out_bias: bool = False
    ffn_bias: bool = False
    qk_norm: bool = False
    sandwich_norms: bool = False
    sliding_window: int = 0  # 0: none
    window_layers: str = ""
    query_scalar: float = 0.0  # 0: the head size
    attention_softcap: float = 0.0
    logit_softcap: float = 0.0
    scale_embedding: bool = False
    tie_output: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    stop_ids: tuple[int, ...] = ()
    src_append_eos: bool = False  # the decoding loop's switches, as the other families have them
    suppress_bos: bool = False
    min_output_len: int = 0
    prompt_separator: bool = False

    def __post_init__(self):
        if isinstance(self.stop_ids, list):  # as read back from JSON
            object.__setattr__(self, "stop_ids", tuple(self.stop_ids))

    @property
    def src_vocab_size(self) -> int:  # the prompt and the continuation share one vocabulary
        return self.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self.vocab_size

    @property
    def decoder_layers(self) -> int:
        return self.layers

    @property
    def key_value_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d_model // self.heads

    def window_of(self, layer: int) -> int:
        """The sliding window of ``layer`` (0: it sees every earlier position)."""
        local = not self.window_layers or self.window_layers[layer] == "L"
        return self.sliding_window if local else 0

    def validate(self) -> None:
        check_config_fields(self)
        _check_choice("arch", self.arch, DECODER_ARCHS)
        _check_positive(self, "vocab_size", "d_model", "layers", "heads", "d_ff", "max_len")
        _require(self.kv_heads == 0 or self.heads % self.kv_heads == 0,
                 f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        _require(self.d_head > 0 or self.d_model % self.heads == 0,
                 f"d_model ({self.d_model}) must be divisible by heads ({self.heads}) unless d_head is set")
        _require(self.positions != "rotary" or self.head_dim % 2 == 0,
                 f"rotary positions need an even head size; got {self.head_dim}")
        _require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1); got {self.dropout}")
        _check_choice("positions", self.positions, DECODER_POSITIONS)
        _check_choice("rope_scaling", self.rope_scaling, ROPE_SCALINGS)
        _require(self.rope_theta > 0, f"rope_theta must be positive; got {self.rope_theta}")
        _require(not self.rope_scaling or (self.rope_factor > 0 and self.rope_original_max_len > 0
                                           and self.rope_high_freq_factor > self.rope_low_freq_factor > 0),
                 "llama3 rope scaling needs rope_factor > 0, rope_original_max_len > 0 and "
                 "rope_high_freq_factor > rope_low_freq_factor > 0")
        _check_choice("norm_kind", self.norm_kind, ("layer_norm", "rms"))
        _require(self.norm_eps > 0, f"norm_eps must be positive; got {self.norm_eps}")
        _require(self.norm_bias or self.norm_kind == "layer_norm", "norm_bias=False applies to layer_norm only (an "
                                                                   "RMS norm has no bias)")
        _check_choice("activation", self.activation, ACTIVATIONS)
        _require(set(self.window_layers) <= {"L", "G"} and len(self.window_layers) in (0, self.layers),
                 f"window_layers must hold one L (local) or G (global) per layer ({self.layers}); "
                 f"got {self.window_layers[:40]!r}")
        for name in ("query_scalar", "attention_softcap", "logit_softcap"):
            _require(getattr(self, name) >= 0, f"{name} must be 0 (none) or positive; got {getattr(self, name)}")
        _check_min_output_len(self)
        _check_special_ids(self)
        _require(isinstance(self.stop_ids, tuple) and all(isinstance(i, int) and not isinstance(i, bool)
                                                          and 0 <= i < self.vocab_size for i in self.stop_ids),
                 f"stop_ids must be token ids below the vocabulary size ({self.vocab_size}); "
                 f"got {str(self.stop_ids)[:60]}")


ModelConfig = Union[TransformerConfig, RNNConfig, DecoderOnlyConfig, EncoderOnlyConfig]


# Fields added after checkpoints were first shared, with the value that means "not used": left out of a
# saved config when they hold it, so that a checkpoint not using the feature still opens in older versions.
LATER_FIELDS = {"decoder_heads": 0, "decoder_d_ff": 0, "decoder_norm_position": "", "decoder_final_norm": None,
                "position_offset": 0,
                "tgt_norm_before_positions": False, "relative_buckets": 0,
                "relative_max_distance": 0, "scale_attention": True, "gated_ffn": False, "feed_forward_bias": True,
                "residual_scale": 1.0,
                "bidirectional": False, "embedding_size": 0, "luong_score": "general", "rnn_cell": "gru",
                "input_feeding": True, "init_hidden": "encoder", "attentional_bias": False,
                "suppress_bos": False, "min_output_len": 0, "annotation_size": 0}


def attention_shape(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """Per attention kind the model ``config`` describes has, ``(layers, heads)``, in the order the model runs
    them (``Seq2Seq.attention_shape``; read from the config alone: a header's shape check needs no torch)."""
    if isinstance(config, DecoderOnlyConfig):
        return {"dec_self": (config.layers, config.heads)}
    if isinstance(config, EncoderOnlyConfig):
        return {"enc_self": (config.layers, config.heads)}
    if isinstance(config, TransformerConfig):
        decoder = (config.decoder_layers, config.heads_of("decoder"))
        return {"enc_self": (config.encoder_layers, config.heads_of("encoder")), "dec_self": decoder, "cross": decoder}
    if config.arch == "gru-transformer-decoder":
        shape = (config.decoder_layers, config.decoder_heads)
        return {"dec_self": shape, "cross": shape}
    return {} if config.arch == "gru-none" else {"cross": (1, 1)}


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    if isinstance(config, (DecoderOnlyConfig, EncoderOnlyConfig)):  # every field: these came after LATER_FIELDS
        return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}
    return {key: value for key, value in data.items() if key not in LATER_FIELDS or value != LATER_FIELDS[key]}


def config_from_dict(data: dict[str, Any]) -> ModelConfig:
    """Rebuild a config saved by :func:`config_to_dict`; unknown or missing fields are a ConfigError."""
    if not isinstance(data, dict) or "arch" not in data:
        raise ConfigError("the architecture config has no 'arch' field")
    arch = data["arch"]
    _check_choice("arch", arch, LOADED_ARCHS)
    cls = TransformerConfig if arch in TRANSFORMER_ARCHS else DecoderOnlyConfig if arch in DECODER_ARCHS \
        else EncoderOnlyConfig if arch in ENCODER_ARCHS else RNNConfig
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    _require(not unknown, f"unknown {cls.__name__} fields: {', '.join(unknown)}")
    try:
        config = cls(**data)
    except TypeError as error:  # a required field is missing
        raise ConfigError(f"incomplete {cls.__name__}: {error}") from None
    config.validate()
    return config


# Set from --arch and the tokenizers, never --set (a trained decoder-only model's prompts always end with the
# separator: the training layout, models/inference/batches.py).
SIZED_BY_TRAINER = ("arch", "src_vocab_size", "tgt_vocab_size", "vocab_size", "prompt_separator", "mask_id")
FEED_FORWARD_RATIO = 4  # d_ff = 4 × d_model unless set (the 2017 paper's 512 → 2048)
# What `attnviz train --arch decoder-only` builds beyond DecoderOnlyConfig's own defaults (pre-LN blocks, rotary
# positions, SwiGLU, RMSNorm, tied output): a training dropout, the encoder-decoder models' length, the special ids
# of the tokenizers attnviz trains (models/text/tokenizer.py), the start token <s> as the prompt's separator.
DECODER_ONLY_TRAINING = {"dropout": 0.1, "max_len": 512, "pad_id": 0, "bos_id": 2, "eos_id": 3,
                         "prompt_separator": True}
# What `attnviz train --arch encoder-only` builds beyond EncoderOnlyConfig's own defaults (a masked-language model,
# models/training/masked_lm.py): a training dropout, no token types, the special ids of the tokenizers attnviz trains,
# the end token </s> after each sentence; the mask token's id is the tokenizer's (set by the trainer).
ENCODER_ONLY_TRAINING = {"dropout": 0.1, "max_len": 128, "type_vocab_size": 0, "layer_norm_eps": 1e-5, "pad_id": 0,
                         "bos_id": 2, "eos_id": 3, "src_append_eos": True}


def _family_defaults(arch: str) -> tuple[type, dict[str, Any]]:
    """The config class of ``arch`` and the defaults its name implies beyond the class's own."""
    _check_choice("arch", arch, TRAINED_ARCHS)
    if arch in TRANSFORMER_ARCHS:
        post = arch == "transformer-postln"
        return TransformerConfig, {"norm_position": "post" if post else "pre", "final_norm": not post}
    if arch in DECODER_ARCHS:
        return DecoderOnlyConfig, dict(DECODER_ONLY_TRAINING)
    if arch in ENCODER_ARCHS:
        return EncoderOnlyConfig, dict(ENCODER_ONLY_TRAINING)
    return RNNConfig, {}


def settings_of(arch: str) -> dict[str, Any]:
    """The ``--set`` keys of ``arch`` (its config's fields but the architecture, the vocabulary sizes and the
    decoder-only layout) with the values ``make_config`` gives them when they are not set."""
    cls, implied = _family_defaults(arch)
    values = {**{field.name: field.default for field in dataclasses.fields(cls)}, **implied}
    return {key: value for key, value in values.items() if key not in SIZED_BY_TRAINER}


def make_config(arch: str, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> ModelConfig:
    """The config for an ``--arch`` name; pre-LN keeps a final norm after each stack, post-LN has
    none (docs/architectures.md); decoder-only is ``DECODER_ONLY_TRAINING`` and takes one vocabulary (equal
    sizes). A Transformer's or decoder-only model's ``d_ff`` follows ``d_model`` (``FEED_FORWARD_RATIO`` times
    it) unless it is set; a key the architecture lacks is one error naming the nearest key and all of them."""
    import difflib

    cls, defaults = _family_defaults(arch)
    keys = settings_of(arch)
    unknown = sorted(set(overrides) - set(keys))
    if unknown:
        nearest = difflib.get_close_matches(unknown[0], list(keys), n=1, cutoff=0.6)
        guess = f" (did you mean {nearest[0]}?)" if nearest else ""
        raise ConfigError(f"{arch} has no settings named {', '.join(unknown)}{guess}; its --set keys: "
                          f"{', '.join(keys)}")
    if cls is not RNNConfig and "d_model" in overrides and "d_ff" not in overrides \
            and isinstance(overrides["d_model"], int) and not isinstance(overrides["d_model"], bool):
        defaults["d_ff"] = FEED_FORWARD_RATIO * overrides["d_model"]
    if cls is EncoderOnlyConfig:
        sizes = {"vocab_size": src_vocab_size}
    elif cls is DecoderOnlyConfig:
        _require(src_vocab_size == tgt_vocab_size, f"a decoder-only model reads one vocabulary for the prompt and "
                                                   f"the continuation; got {src_vocab_size} source and "
                                                   f"{tgt_vocab_size} target tokens (train with --shared-vocab)")
        sizes = {"vocab_size": src_vocab_size}
    else:
        sizes = {"src_vocab_size": src_vocab_size, "tgt_vocab_size": tgt_vocab_size}
    config = cls(arch=arch, **sizes, **{**defaults, **overrides})
    config.validate()
    return config


def parse_settings(items: list[str]) -> dict:
    """``KEY=VALUE`` strings → a dict; values are read as JSON when they parse (numbers, true/false)."""
    settings = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise ConfigError(f"--set takes KEY=VALUE; got {item!r}")
        try:
            settings[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            settings[key.strip()] = value
    return settings


@dataclass(frozen=True)
class TrainingConfig:
    """How to train. ``batch_size`` counts sentence pairs per step over all processes; ``eval_every`` and
    ``save_every`` of 0 mean only at the end; ``clip_norm`` of 0 disables clipping; ``device`` None: auto."""

    steps: int = 2_000
    batch_size: int = 64
    learning_rate: float = 1e-3  # the peak, reached at the end of warm-up
    warmup_steps: int = 200
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    eval_every: int = 500
    save_every: int = 500
    validation_sentences: int = 200  # validation pairs decoded greedily for chrF and BLEU
    seed: int = 0
    device: str | None = None
    progress: bool = True
    snapshots: int = 0  # float16 checkpoints kept at evenly spaced steps in OUT.snapshots/ (0: none)

    def validate(self) -> None:
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise ConfigError(message)

        for name in ("steps", "batch_size"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"{name} must be at least 1; got {value!r}")
        for name in ("warmup_steps", "eval_every", "save_every", "validation_sentences", "snapshots"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, f"{name} must be 0 or more; got {value!r}")
        require(self.learning_rate > 0, f"learning_rate must be positive; got {self.learning_rate}")
        require(0.0 <= self.label_smoothing < 1.0, f"label_smoothing must be in [0, 1); got {self.label_smoothing}")
        require(self.clip_norm >= 0, f"clip_norm must be 0 (off) or positive; got {self.clip_norm}")
        require(isinstance(self.seed, int), f"seed must be an integer; got {self.seed!r}")
        require(self.snapshots <= self.steps, f"snapshots ({self.snapshots}) must be at most steps ({self.steps})")
