"""The encoder-only family's configuration (BERT, RoBERTa, DistilBERT: docs/architectures.md#encoder-only), saved
verbatim in every checkpoint like the other families' (models/nn/config.py)."""

from __future__ import annotations

from dataclasses import dataclass

from .config_checks import ACTIVATIONS, _check_choice, _check_positive, _require
from .validation import check_config_fields

ENCODER_ARCHS = ("encoder-only",)
POSITION_STYLES = ("index", "after_padding")


@dataclass(frozen=True)
class EncoderOnlyConfig:
    """A post-LN Transformer encoder with learned positions and a LayerNorm over the embeddings, and optionally the
    masked-language-model head (docs/architectures.md#encoder-only).

    Each layer: ``h = LN(x + attention(x))``, then ``LN(h + linear_out(act(linear_in(h))))``; the embeddings: ``LN(
    token + position + token_type)`` (``type_vocab_size`` 0: no token types, DistilBERT; a single sentence is
    type 0). ``position_style``: ``index`` (position p is row p: BERT, DistilBERT) or ``after_padding`` (RoBERTa:
    each real token's position is the count of real tokens up to it plus ``pad_id``, padding sits at ``pad_id``).
    ``mlm_head``: the head ``output(LN(head_act(dense(h))))`` whose output matrix is the token table when
    ``tie_output`` (with a bias of its own); without it the model gives hidden states and attention only.
    ``bos_id`` and ``eos_id`` are the tokens that frame a sentence (``[CLS]``/``[SEP]``, ``<s>``/``</s>``),
    ``mask_id`` the token whose positions are predicted (-1: none).
    """

    arch: str
    vocab_size: int
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.0
    max_len: int = 512  # tokens a sentence may have (the position table has ``position_rows``)
    type_vocab_size: int = 2
    position_style: str = "index"
    layer_norm_eps: float = 1e-12
    activation: str = "gelu"
    mlm_head: bool = True
    head_activation: str = "gelu"
    tie_output: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = -1
    src_append_eos: bool = False  # the tokenizer frames the sentence itself
    suppress_bos: bool = False  # the decoding loop's switches, as the other families have them
    min_output_len: int = 0

    @property
    def src_vocab_size(self) -> int:
        return self.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self.vocab_size

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def position_rows(self) -> int:
        """Rows of the position table: ``max_len``, and RoBERTa's ``pad_id + 1`` rows below its first position."""
        return self.max_len + (self.pad_id + 1 if self.position_style == "after_padding" else 0)

    def validate(self) -> None:
        check_config_fields(self)
        _check_choice("arch", self.arch, ENCODER_ARCHS)
        _check_positive(self, "vocab_size", "d_model", "layers", "heads", "d_ff", "max_len")
        _require(self.d_model % self.heads == 0, f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        _require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1); got {self.dropout}")
        _check_choice("position_style", self.position_style, POSITION_STYLES)
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("head_activation", self.head_activation, ACTIVATIONS)
        _require(self.layer_norm_eps > 0, f"layer_norm_eps must be positive; got {self.layer_norm_eps}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            _require(0 <= value < self.vocab_size,
                     f"{name} must be a token id below the vocabulary size ({self.vocab_size}); got {value!r}")
        _require(-1 <= self.mask_id < self.vocab_size,
                 f"mask_id must be -1 (none) or a token id below the vocabulary size ({self.vocab_size}); "
                 f"got {self.mask_id!r}")
