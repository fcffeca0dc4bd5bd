"""Encoder-only Transformer (BERT, RoBERTa, DistilBERT) with its masked-language-model head, chosen by
``EncoderOnlyConfig`` (docs/architectures.md#encoder-only).

Dimension legend: B batch, S sentence length, E d_model, H heads, V vocabulary.

How it keeps the ``Seq2Seq`` protocol: there is one attention kind, ``enc_self``, and nothing decodes.

- ``encode(src_ids [B, S])``: the final hidden states ``[B, S, E]``, the padding mask ``[B, 1, 1, S]`` and the
  attention weights per layer ``[B, H, S, S]``.
- ``forward(src_ids [B, S])``: the masked-language-model logits of every position ``[B, S, V]`` and ``Intermediates``
  with ``enc_self``; a target (``tgt_in``, what teacher-forced scoring passes) is refused in one line, as there is
  no decoder, and so is a model without the head (a bare ``BertModel``): its hidden states are ``encode``'s.
- ``start(src_ids)``: encodes; the ``DecoderState``'s ``memory`` holds the hidden states. ``step`` refuses in one
  line: an encoder-only model fills masked positions (models/inference/fill_mask.py) instead of decoding.

Sentences of different lengths in one batch are right-padded with ``pad_id``; padding is masked as keys (True = may
attend) and, with ``position_style="after_padding"`` (RoBERTa), takes the padding position. Each layer is the
encoder-decoder Transformer's post-LN ``EncoderLayer`` (models/nn/transformer.py); head ablation zeroes a head's
output before the heads are combined (kind ``enc_self``), as there.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import InputError
from .ablation import NO_ABLATION, Ablation
from .base import DecoderState, Seq2Seq, StepOutput, init_normal
from .config import TransformerConfig, attention_shape
from .encoder_config import EncoderOnlyConfig
from .intermediates import Intermediates, kept
from .transformer import ACTIVATIONS, EncoderLayer

NO_HEAD = "this model has no masked-language-model head: it gives attention, and predictions need the head"
NO_DECODING = "an encoder-only model does not decode: it predicts the tokens at its mask positions"
NO_TARGET = "an encoder-only model reads no target sentence: it predicts the tokens at its mask positions"


def layer_config(config: EncoderOnlyConfig) -> TransformerConfig:
    """The post-LN encoder layer's settings, as the encoder-decoder Transformer's layers read them."""
    return TransformerConfig(arch="transformer-postln", src_vocab_size=config.vocab_size,
                             tgt_vocab_size=config.vocab_size, d_model=config.d_model, heads=config.heads,
                             d_ff=config.d_ff, encoder_layers=config.layers, decoder_layers=1, dropout=config.dropout,
                             norm_position="post", final_norm=False, layer_norm_eps=config.layer_norm_eps,
                             activation=config.activation, positions="none", pad_id=config.pad_id,
                             bos_id=config.bos_id, eos_id=config.eos_id)


def position_ids(src_ids: Tensor, config: EncoderOnlyConfig) -> Tensor:
    """Each token's row of the position table ``[B, S]``: its index (``index``), or RoBERTa's count of real tokens
    up to it plus ``pad_id``, padding at ``pad_id`` (``after_padding``)."""
    if config.position_style == "index":
        return torch.arange(src_ids.shape[1], device=src_ids.device).expand_as(src_ids)
    real = (src_ids != config.pad_id).long()
    return torch.cumsum(real, dim=1) * real + config.pad_id


class EncoderEmbedding(nn.Module):
    """``LN(token + token_type + position)``, then dropout; a single sentence is token type 0."""

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.token_types = nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        self.positions = nn.Embedding(config.position_rows, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor) -> Tensor:
        """Shape: ids ``[B, S]`` → ``[B, S, E]``."""
        if ids.shape[1] > self.config.max_len:
            raise InputError(f"the sentence has {ids.shape[1]} tokens; this model has {self.config.max_len} "
                             f"positions")
        x = self.tokens(ids)  # [B, S, E]
        if self.token_types is not None:
            x = x + self.token_types.weight[0]
        x = x + self.positions(position_ids(ids, self.config))
        return self.dropout(self.norm(x))


class MaskedLMHead(nn.Module):
    """``output(LN(act(dense(h))))``: BERT's ``cls.predictions``, RoBERTa's ``lm_head``, DistilBERT's
    ``vocab_transform``/``vocab_layer_norm``/``vocab_projector``; ``output`` has a bias of its own."""

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.activation = ACTIVATIONS[config.head_activation]
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, hidden: Tensor) -> Tensor:
        """Shape: ``[B, S, E]`` → logits ``[B, S, V]``."""
        return self.output(self.norm(self.activation(self.dense(hidden))))


class EncoderOnlyModel(Seq2Seq):
    kinds = ("enc_self",)
    widens_gates = True  # models/nn/ablation.py: HeadGates.widened
    decodes = False  # what runs it is models/inference/fill_mask.py

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__(config)
        self.embedding = EncoderEmbedding(config)
        layers = layer_config(config)
        self.layers = nn.ModuleList(EncoderLayer(layers) for _ in range(config.layers))
        self.head = MaskedLMHead(config) if config.mlm_head else None
        if self.head is not None and config.tie_output:
            self.head.output.weight = self.embedding.tokens.weight
        init_normal(self)

    @property
    def has_predictions(self) -> bool:
        """Whether the masked-language-model head is there (a bare encoder gives attention only)."""
        return self.head is not None

    def attention_shape(self) -> dict[str, tuple[int, int]]:
        return attention_shape(self.config)

    def encode(self, src_ids: Tensor, need_weights: bool,
               ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Shape: src_ids ``[B, S]`` → hidden ``[B, S, E]``, mask ``[B, 1, 1, S]``, weights per layer."""
        src_mask = self.source_mask(src_ids)
        x = self.embedding(src_ids)
        weights = []
        for index, layer in enumerate(self.layers):
            x, src_mask = ablation.widened("enc_self", index, x, src_mask)
            x, layer_weights = layer(x, src_mask, need_weights=need_weights,
                                     heads_off=ablation.heads_off("enc_self", index, self.config.heads))
            weights.append(kept(layer_weights))
        return x, src_mask, weights

    def predict(self, hidden: Tensor) -> Tensor:
        """The masked-language-model logits ``[B, S, V]`` of hidden states ``[B, S, E]``."""
        if self.head is None:
            raise InputError(NO_HEAD)
        return self.head(hidden)

    def forward(self, src_ids: Tensor, tgt_in: Tensor | None = None, *, need_weights: bool = False,
                ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Intermediates]:
        if tgt_in is not None:
            raise InputError(NO_TARGET)
        if self.head is None:
            raise InputError(NO_HEAD)
        hidden, src_mask, weights = self.encode(src_ids, need_weights, ablation)
        intermediates = Intermediates(masks={"enc_self": src_mask})
        if need_weights:
            intermediates.attention = {"enc_self": weights}
        return self.head(hidden), intermediates

    def start(self, src_ids: Tensor, *, need_weights: bool = True,
              ablation: Ablation = NO_ABLATION) -> tuple[DecoderState, Intermediates]:
        hidden, src_mask, weights = self.encode(src_ids, need_weights, ablation)
        intermediates = Intermediates(masks={"enc_self": src_mask})
        if need_weights:
            intermediates.attention = {"enc_self": weights}
        return DecoderState(hidden, src_mask, ablation=ablation), intermediates

    def step(self, tokens: Tensor, state: DecoderState, *, need_weights: bool = True) -> StepOutput:
        raise InputError(NO_DECODING)
