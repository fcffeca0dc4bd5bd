"""Encoder-decoder Transformer: pre-LN or post-LN (docs/architectures.md), chosen by ``TransformerConfig``.

Dimension legend: B batch, S source length, T target length, E d_model, H heads, V vocabulary.
Masks: True = may attend. Encoder self-attention and cross-attention mask padded source keys; decoder
self-attention masks future positions and padded target keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .ablation import NO_ABLATION, Ablation
from .attention import MultiHeadAttention
from .base import DecoderState, LayerCache, Seq2Seq, StepOutput, sinusoid_table
from .config import TransformerConfig, attention_shape
from .masks import target_mask
from .intermediates import Intermediates, kept, note_block, note_residual

# Laplace's mean and width as transformers' LaplaceActivation has them (MEGA's attention activation).
LAPLACE_MU, LAPLACE_SIGMA = 0.707107, 0.282095
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "swish": F.silu, "gelu_clipped": lambda x: F.gelu(x).clamp(-10.0, 10.0),
               "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "relu2": lambda x: F.relu(x).square(),
               "relu6": F.relu6, "leaky_relu": F.leaky_relu, "mish": F.mish, "hardswish": F.hardswish,
               "tanh": torch.tanh, "sigmoid": torch.sigmoid, "linear": lambda x: x,
               "sqrt_softplus": lambda x: F.softplus(x).sqrt(),
               "laplace": lambda x: 0.5 * (1.0 + torch.erf((x - LAPLACE_MU) / (LAPLACE_SIGMA * math.sqrt(2.0))))}


class UnbiasedStdNorm(nn.Module):
    """The annotated transformer's LayerNorm: ``weight · (x − mean) / (std + eps) + bias`` with the unbiased
    (n − 1) std, eps added to the std rather than the variance. Same parameter names as ``nn.LayerNorm``."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps) + self.bias


def layer_norm(config: TransformerConfig) -> nn.Module:
    if config.norm_kind == "unbiased_std":
        return UnbiasedStdNorm(config.d_model, config.layer_norm_eps)
    if config.norm_kind == "rms":  # weight · x / sqrt(mean(x²) + eps): no mean subtracted, no bias (T5)
        return nn.RMSNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


class TokenEmbedding(nn.Module):
    """Token embedding (×√E when configured) plus sinusoidal or learned positions, then dropout, then a LayerNorm
    when ``embedding_norm`` is set (jadore v3 normalises here instead of after the last layer). With
    ``norm_before_positions`` (the target side of ``tgt_norm_before_positions``) the LayerNorm reads the unscaled
    token vectors and the positions are added to its output."""

    def __init__(self, vocab_size: int, config: TransformerConfig, *, norm_before_positions: bool = False):
        super().__init__()
        self.norm_before_positions = norm_before_positions
        self.tokens = nn.Embedding(vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.position_offset = config.position_offset
        self.learned_positions = None
        table = None  # positions="none": no absolute positions
        if config.positions == "learned":
            self.learned_positions = nn.Embedding(config.max_len + config.position_offset, config.d_model)
        elif config.positions != "none":
            table = sinusoid_table(config.max_len + config.position_offset, config.d_model, config.positions)
        self.register_buffer("positions", table, persistent=False)  # rebuilt from the config, never saved
        # fairseq's padding tokens read the table's zero row at the pad id
        self.unplaced_id = config.pad_id if config.positions == "fairseq" else None
        self.dropout = nn.Dropout(config.dropout)
        self.norm = layer_norm(config) if config.embedding_norm else None

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        """Shape: ids ``[B, L]`` → ``[B, L, E]``; ``offset`` is the position of ``ids[:, 0]``."""
        start = offset + self.position_offset
        table = self.positions if self.learned_positions is None else self.learned_positions.weight
        positions = 0.0 if table is None else table[start: start + ids.shape[1]]  # [L, E]; none: T5
        if self.unplaced_id is not None:
            positions = positions * (ids != self.unplaced_id)[..., None]  # [B, L, E]
        if self.norm_before_positions:
            return self.dropout(self.norm(self.tokens(ids)) + positions)
        x = self.dropout(self.tokens(ids) * self.scale + positions)
        return x if self.norm is None else self.norm(x)


class AttentionSublayer(nn.Module):
    """Multi-head attention with its residual and LayerNorm.

    pre-LN: ``x + Dropout(Attention(LN(x), kv))``; post-LN: ``LN(x + Dropout(Attention(x, kv)))``.
    """

    def __init__(self, config: TransformerConfig, side: str = "encoder"):
        super().__init__()
        self.attention = MultiHeadAttention(config.d_model, config.heads_of(side), head_dim=config.head_dim_of(side),
                                            bias=config.attention_bias, dropout=config.dropout,
                                            scale=config.scale_attention)
        self.norm = layer_norm(config)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm_position_of(side) == "pre"
        self.pre_norm_kv = config.pre_norm_kv
        self.residual_scale = config.residual_scale

    def _residual(self, x: Tensor, attended: Tensor) -> Tensor:
        x = (x if self.residual_scale == 1.0 else self.residual_scale * x) + self.dropout(attended)
        return x if self.pre_norm else self.norm(x)

    def self_attend(self, x: Tensor, mask: Tensor | None, *, cache: LayerCache | None, need_weights: bool,
                    bias: Tensor | None = None, heads_off: tuple[int, ...] = ()) -> tuple[Tensor, Tensor | None]:
        """Shape: x ``[B, L, E]`` (L = 1 when decoding with a cache), bias ``[1, H, L, K]`` → ``[B, L, E]``,
        weights ``[B, H, L, K]``."""
        normed = self.norm(x) if self.pre_norm else x
        # The pre-LN design this follows normalises only the query; keys and values read the un-normalised input.
        kv_input = normed if self.pre_norm_kv or not self.pre_norm else x
        k, v = self.attention.project_kv(kv_input, kv_input)  # [B, H, L, D]
        if cache is not None:
            k, v = cache.extend_self(k, v)  # [B, H, K, D], K = all positions so far
        attended, weights = self.attention.attend(normed, k, v=v, mask=mask, bias=bias, need_weights=need_weights,
                                                  heads_off=heads_off)
        output = self._residual(x, attended)
        note_block(self, x=x, k=k, v=v, weights=weights, attended=attended, output=output, mask=mask, bias=bias)
        return output, weights

    def cross_attend(self, x: Tensor, k: Tensor, *, v: Tensor, mask: Tensor | None,
                     need_weights: bool, heads_off: tuple[int, ...] = ()) -> tuple[Tensor, Tensor | None]:
        normed = self.norm(x) if self.pre_norm else x
        attended, weights = self.attention.attend(normed, k, v=v, mask=mask, need_weights=need_weights,
                                                  heads_off=heads_off)
        output = self._residual(x, attended)
        note_block(self, x=x, k=k, v=v, weights=weights, attended=attended, output=output, mask=mask, bias=None)
        return output, weights


class FeedForwardSublayer(nn.Module):
    """Linear → activation → Linear, with residual and LayerNorm placed like the attention sublayers; gated
    (``gated_ffn``): ``linear_out(act(linear_in(h)) · linear_gate(h))``."""

    def __init__(self, config: TransformerConfig, side: str = "encoder"):
        super().__init__()
        bias, d_ff = config.feed_forward_bias, config.d_ff_of(side)
        self.linear_in = nn.Linear(config.d_model, d_ff, bias=bias)
        self.linear_gate = nn.Linear(config.d_model, d_ff, bias=bias) if config.gated_ffn else None
        self.linear_out = nn.Linear(d_ff, config.d_model, bias=bias)
        self.activation = ACTIVATIONS[config.activation]
        self.norm = layer_norm(config)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm_position_of(side) == "pre"
        self.residual_scale = config.residual_scale

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.norm(x) if self.pre_norm else x
        inner = self.activation(self.linear_in(hidden))  # [B, L, d_ff]
        if self.linear_gate is not None:
            inner = inner * self.linear_gate(hidden)
        x = (x if self.residual_scale == 1.0 else self.residual_scale * x) + self.dropout(self.linear_out(inner))
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attention = AttentionSublayer(config)
        self.feed_forward = FeedForwardSublayer(config)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool,
                bias: Tensor | None = None, heads_off: tuple[int, ...] = ()) -> tuple[Tensor, Tensor | None]:
        x, weights = self.self_attention.self_attend(x, mask, cache=None, need_weights=need_weights, bias=bias,
                                                     heads_off=heads_off)
        return self.feed_forward(x), weights


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attention = AttentionSublayer(config, "decoder")
        self.cross_attention = AttentionSublayer(config, "decoder")
        self.feed_forward = FeedForwardSublayer(config, "decoder")

    def forward(self, x: Tensor, memory: Tensor, *, self_mask: Tensor | None, cross_mask: Tensor,
                cache: LayerCache | None, need_weights: bool, self_bias: Tensor | None = None,
                self_off: tuple[int, ...] = (),
                cross_off: tuple[int, ...] = ()) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Shape: x ``[B, L, E]``, memory ``[B, S, E]``, self_bias ``[1, H, L, K]`` → x, self weights
        ``[B, H, L, K]``, cross ``[B, H, L, S]``. ``self_off``/``cross_off``: heads whose output is zeroed
        (models/nn/ablation.py)."""
        x, self_weights = self.self_attention.self_attend(x, self_mask, cache=cache, need_weights=need_weights,
                                                          bias=self_bias,
                                                          heads_off=self_off)
        project = lambda: self.cross_attention.attention.project_kv(memory, memory)  # noqa: E731
        k, v = cache.cross_kv(project) if cache is not None else project()  # [B, H, S, D]
        x, cross_weights = self.cross_attention.cross_attend(x, k, v=v, mask=cross_mask, need_weights=need_weights,
                                                             heads_off=cross_off)
        return self.feed_forward(x), self_weights, cross_weights


def relative_position_buckets(distance: Tensor, buckets: int, max_distance: int, *, bidirectional: bool) -> Tensor:
    """The bucket of each key-minus-query ``distance`` (docs/architectures.md#relative-position-bias).

    Bidirectional: keys after the query take the upper half of the buckets, before it the lower half, by
    |distance|; past-only: keys after the query share bucket 0 with the query itself. Within a half, the
    first half of its buckets hold one distance each; the rest grow logarithmically up to ``max_distance``,
    and every farther distance shares the last one. Computed in float32 as T5 does, so that distances at a
    bucket edge fall where they fell in training.
    """
    span = buckets
    bucket = torch.zeros_like(distance)
    if bidirectional:
        span = buckets // 2
        bucket = (distance > 0).long() * span
        distance = distance.abs()
    else:
        distance = (-distance).clamp(min=0)
    exact = span // 2
    far = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                   * (span - exact)).to(torch.long)
    far = far.clamp(max=span - 1)
    return bucket + torch.where(distance < exact, distance, far)


class TransformerSeq2Seq(Seq2Seq):
    kinds = ("enc_self", "dec_self", "cross")
    widens_gates = True  # models/nn/ablation.py: HeadGates.widened

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.src_embedding = TokenEmbedding(config.src_vocab_size, config)
        self.tgt_embedding = TokenEmbedding(config.tgt_vocab_size, config,
                                            norm_before_positions=config.tgt_norm_before_positions)
        if config.share_embeddings:
            self.tgt_embedding.tokens.weight = self.src_embedding.tokens.weight
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.encoder_relative_bias = self.decoder_relative_bias = None
        if config.relative_buckets:  # one table per stack, shared by all its layers
            self.encoder_relative_bias = nn.Embedding(config.relative_buckets, config.heads_of("encoder"))
            self.decoder_relative_bias = nn.Embedding(config.relative_buckets, config.heads_of("decoder"))
        self.encoder_norm = layer_norm(config) if config.final_norm_of("encoder") else None
        self.decoder_norm = layer_norm(config) if config.final_norm_of("decoder") else None
        self.output = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self.logit_scale = config.logit_scale
        if config.tie_output:
            self.output.weight = self.tgt_embedding.tokens.weight
        self._init_weights()

    def _init_weights(self) -> None:
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
            elif name.endswith("bias"):
                nn.init.zeros_(parameter)
        # Token vectors start at the scale of the sinusoids they are added to (unit variance per
        # dimension after the optional ×√E); Xavier would make them ~20× smaller for a large vocabulary,
        # and the positions would drown the tokens out.
        std = self.config.d_model ** -0.5 if self.config.scale_embedding else 1.0
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.tokens.weight, std=std)

    def attention_shape(self) -> dict[str, tuple[int, int]]:
        return attention_shape(self.config)

    def encode(self, src_ids: Tensor, need_weights: bool,
               ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Shape: src_ids ``[B, S]`` → memory ``[B, S, E]``, src_mask ``[B, 1, 1, S]``, weights per layer."""
        src_mask = self.source_mask(src_ids)
        x = self.src_embedding(src_ids)
        length = src_ids.shape[1]
        bias = self.relative_bias(self.encoder_relative_bias, length, length, offset=0, bidirectional=True)
        weights = []
        note_residual("encoder", x)
        for index, layer in enumerate(self.encoder_layers):
            x, src_mask = ablation.widened("enc_self", index, x, src_mask)
            x, layer_weights = layer(x, src_mask, need_weights=need_weights, bias=bias,
                                     heads_off=ablation.heads_off("enc_self", index, self.config.heads_of("encoder")))
            weights.append(kept(layer_weights))
            note_residual("encoder", x)
        return self.memory(x), src_mask, weights

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, *, self_mask: Tensor | None,
               caches: list[LayerCache] | None, offset: int, need_weights: bool, ablation: Ablation = NO_ABLATION):
        """Shape: tgt_ids ``[B, L]`` → logits ``[B, L, V]``, self and cross weights per layer."""
        x = self.tgt_embedding(tgt_ids, offset)
        length = tgt_ids.shape[1]  # the queries are positions offset..offset+length-1, the keys 0..offset+length-1
        bias = self.relative_bias(self.decoder_relative_bias, length, offset + length, offset=offset,
                                  bidirectional=False)
        self_weights, cross_weights = [], []
        heads = self.config.heads_of("decoder")
        note_residual("decoder", x)
        for index, layer in enumerate(self.decoder_layers):
            x, memory, src_mask, self_mask = ablation.widened("dec_self", index, x, memory, src_mask, self_mask)
            cache = caches[index] if caches is not None else None
            x, self_w, cross_w = layer(x, memory, self_mask=self_mask, cross_mask=src_mask, cache=cache,
                                       need_weights=need_weights, self_bias=bias,
                                       self_off=ablation.heads_off("dec_self", index, heads),
                                       cross_off=ablation.heads_off("cross", index, heads))
            self_weights.append(kept(self_w))
            cross_weights.append(kept(cross_w))
            note_residual("decoder", x)
        return self.head(x), self_weights, cross_weights

    def head(self, x: Tensor) -> Tensor:
        """The output head: the decoder's residual stream ``[..., E]`` → logits ``[..., V]`` (the final norm where
        the model has one, the output projection with its bias (Marian's and BART's final_logits_bias), the logit
        scale (T5's d_model^-0.5 with a tied projection))."""
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        logits = self.output(x)  # [..., V]
        if self.logit_scale != 1.0:
            logits = logits * self.logit_scale
        return logits

    def memory(self, x: Tensor) -> Tensor:
        """What the decoder reads of the encoder's residual stream ``[B, S, E]``: it through the encoder's final
        norm where the model has one."""
        return self.encoder_norm(x) if self.encoder_norm is not None else x

    def relative_bias(self, table: nn.Embedding | None, query_len: int, key_len: int, *, offset: int,
                      bidirectional: bool) -> Tensor | None:
        """The relative position bias ``[1, H, Q, K]`` of queries at positions ``offset..offset+Q-1`` over keys
        at ``0..K-1`` (docs/architectures.md#relative-position-bias), or None without a table."""
        if table is None:
            return None
        device = table.weight.device
        queries = torch.arange(offset, offset + query_len, device=device)[:, None]
        keys = torch.arange(key_len, device=device)[None, :]
        buckets = relative_position_buckets(keys - queries, self.config.relative_buckets,
                                            self.config.relative_max_distance, bidirectional=bidirectional)
        return table(buckets).permute(2, 0, 1)[None]  # [Q, K, H] → [1, H, Q, K]

    def forward(self, src_ids: Tensor, tgt_in: Tensor, *, need_weights: bool = False,
                ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Intermediates]:
        memory, src_mask, enc_weights = self.encode(src_ids, need_weights, ablation)
        self_mask = target_mask(tgt_in, self.pad_id)  # [B, 1, T, T]
        logits, self_weights, cross_weights = self.decode(tgt_in, memory, src_mask, self_mask=self_mask, caches=None,
                                                          offset=0, need_weights=need_weights, ablation=ablation)
        intermediates = Intermediates(masks={"enc_self": src_mask, "dec_self": self_mask, "cross": src_mask})
        if need_weights:
            intermediates.attention = {"enc_self": enc_weights, "dec_self": self_weights, "cross": cross_weights}
        return logits, intermediates

    def start(self, src_ids: Tensor, *, need_weights: bool = True,
              ablation: Ablation = NO_ABLATION) -> tuple[DecoderState, Intermediates]:
        memory, src_mask, enc_weights = self.encode(src_ids, need_weights, ablation)
        state = DecoderState(memory, src_mask, caches=[LayerCache() for _ in self.decoder_layers], ablation=ablation)
        intermediates = Intermediates(masks={"enc_self": src_mask})
        if need_weights:
            intermediates.attention = {"enc_self": enc_weights}
        return state, intermediates

    def step(self, tokens: Tensor, state: DecoderState, *, need_weights: bool = True) -> StepOutput:
        # The one new query may attend to every cached position: no self mask is needed.
        logits, self_weights, cross_weights = self.decode(
            tokens[:, None], state.memory, state.src_mask, self_mask=None, caches=state.caches, offset=state.position,
            need_weights=need_weights, ablation=state.ablation)
        state.position += 1
        batch = tokens.shape[0]
        masks = {"dec_self": torch.ones(batch, state.position, dtype=torch.bool, device=tokens.device),
                 "cross": state.src_mask[:, 0, 0, :].expand(batch, -1)}
        attention = {}
        if need_weights:
            attention = {"dec_self": [w[:, :, 0] for w in self_weights], "cross": [w[:, :, 0] for w in cross_weights]}
        return StepOutput(logits[:, 0], attention, masks=masks, state=state)
