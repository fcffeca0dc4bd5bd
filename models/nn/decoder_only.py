"""Decoder-only Transformer language model (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma 2), chosen by
``DecoderOnlyConfig`` (docs/architectures.md#decoder-only).

Dimension legend: B batch, S prompt length fed by ``start``/``forward``, T continuation length, L positions fed
at once, K keys, E d_model, H query heads, G key/value heads, D head size, V vocabulary.

How it keeps the ``Seq2Seq`` protocol (the prompt plays the source's part, so the decoding loop drives it):

- ``start(src_ids [B, S])``: ``src_ids`` is the prompt without its last token (S may be 0); it is run through
  every layer and fills the key/value caches. Returns the ``DecoderState`` (``memory`` ``[B, S, 0]`` only tells
  S; ``src_mask`` ``[B, 1, 1, S]`` the prompt's real tokens) and ``Intermediates`` with ``dec_self`` per layer
  ``[B, H, S, S]`` and its mask.
- ``step(tokens [B], state)``: feeds one position; the first step feeds the prompt's last token, in the start
  token's role. ``dec_self`` rows are ``[B, H, S + t + 1]`` at step t, the mask row ``[B, S + t + 1]``.
- ``forward(src_ids [B, S], tgt_in [B, T])``: the sequence ``cat(src_ids, tgt_in)`` in one pass; logits of the
  ``tgt_in`` positions ``[B, T, V]``, ``dec_self`` ``[B, H, S + T, S + T]`` per layer.

Prompts of different lengths in one batch are right-padded: the trailing run of ``pad_id`` in each row of
``src_ids`` beyond the shortest such run among the rows is padding (a pad id inside the prompt is a real token, and
so is one that ends every prompt; see ``prompt_tokens``). Padding is masked as keys and takes no
position: the tokens after it continue from the row's last real token, so every row gets the numbers it gets
alone. Masks are boolean, True = may attend; ``Intermediates.masks["dec_self"]`` is causal and blocks padding;
a local layer (``sliding_windows()``) also blocks the keys ``window`` or more positions back (its weights there
are 0). Query head h reads key/value head ``kv_groups()[h]`` (= h // (H / G), as transformers' ``repeat_kv``).
Head ablation zeroes a query head's output before ``output`` combines the heads (kind ``dec_self``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from .ablation import NO_ABLATION, Ablation
from .attention import masked_softmax, switch_heads
from .base import DecoderState, LayerCache, Seq2Seq, StepOutput, init_normal
from .config import DecoderOnlyConfig, attention_shape
from .intermediates import Intermediates, kept, kept_dtype, note_residual
from .masks import causal_mask
from .transformer import ACTIVATIONS


class OffsetRMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · (offset + weight)``, computed in float32 and returned in x's dtype (Llama:
    offset 0; Gemma stores ``weight`` around 0 and adds 1)."""

    def __init__(self, size: int, eps: float, offset: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.full((size,), 1.0 - offset))
        self.eps, self.offset = eps, offset

    def forward(self, x: Tensor) -> Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        scale = self.weight.float() + self.offset if self.offset else self.weight.float()
        return (normed * scale).type_as(x)


def make_norm(config: DecoderOnlyConfig, size: int | None = None) -> nn.Module:
    size = size or config.d_model
    if config.norm_kind == "rms":
        return OffsetRMSNorm(size, config.norm_eps, config.norm_offset)
    return nn.LayerNorm(size, eps=config.norm_eps, bias=config.norm_bias)


def rotary_frequencies(config: DecoderOnlyConfig) -> Tensor:
    """RoPE's inverse frequencies ``[D / 2]`` in float32: ``1 / theta^(2i / D)``, with Llama 3's rescaling: kept
    where the wavelength is below ``original / high_freq_factor``, divided by ``factor`` above ``original /
    low_freq_factor``, interpolated between."""
    dim = config.head_dim
    inverse = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if config.rope_scaling != "llama3":
        return inverse
    factor, low, high = config.rope_factor, config.rope_low_freq_factor, config.rope_high_freq_factor
    original = config.rope_original_max_len
    wavelength = 2 * math.pi / inverse
    scaled = torch.where(wavelength > original / low, inverse / factor, inverse)
    smooth = (original / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelength < original / high) * ~(wavelength > original / low)
    return torch.where(medium, smoothed, scaled)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in the half-split layout: ``x · cos + rotate_half(x) · sin``; x ``[B, H, L, D]``, cos/sin ``[B, 1, L,
    D]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


PREFILL_CHUNK = 128  # queries per block of a long pass with weights (GroupedAttention._weighted)


class GroupedAttention(nn.Module):
    """Causal self-attention with ``heads`` query heads over ``kv_heads`` key/value heads, optional q/k norms,
    rotary positions, a score scale of ``1/√query_scalar`` and soft-capped scores."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.key_value_heads, config.head_dim
        d = config.d_model
        self.query = nn.Linear(d, self.heads * self.head_dim, bias=config.qkv_bias)
        self.key = nn.Linear(d, self.kv_heads * self.head_dim, bias=config.qkv_bias)
        self.value = nn.Linear(d, self.kv_heads * self.head_dim, bias=config.qkv_bias)
        self.output = nn.Linear(self.heads * self.head_dim, d, bias=config.out_bias)
        self.q_norm = make_norm(config, self.head_dim) if config.qk_norm else None
        self.k_norm = make_norm(config, self.head_dim) if config.qk_norm else None
        self.scaling = (config.query_scalar or self.head_dim) ** -0.5
        self.softcap = config.attention_softcap

    def _split(self, x: Tensor, heads: int, norm: nn.Module | None) -> Tensor:
        """``[B, L, heads·D]`` → ``[B, heads, L, D]``, each head normalised first when ``norm`` is given."""
        batch, length, _ = x.shape
        x = x.view(batch, length, heads, self.head_dim)
        return (x if norm is None else norm(x)).transpose(1, 2)

    def queries_keys(self, x: Tensor, *, rotary: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor]:
        """The query vectors ``[B, H, L, D]`` and key vectors ``[B, G, L, D]`` of x ``[B, L, E]``, normalised and
        rotated as the scores read them (models/analysis/neuron.py shows them)."""
        q = self._split(self.query(x), self.heads, self.q_norm)
        k = self._split(self.key(x), self.kv_heads, self.k_norm)  # [B, G, L, D]
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        return q, k

    def forward(self, x: Tensor, *, rotary: tuple[Tensor, Tensor] | None, mask: Tensor, cache: LayerCache | None,
                need_weights: bool, heads_off) -> tuple[Tensor, Tensor | None]:
        """Shape: x ``[B, L, E]``, mask ``[B, 1, L, K]`` → ``[B, L, E]``, weights ``[B, H, L, K]``."""
        q, k = self.queries_keys(x, rotary=rotary)  # [B, H, L, D], [B, G, L, D]
        v = self._split(self.value(x), self.kv_heads, None)
        if cache is not None:
            k, v = cache.extend_self(k, v)  # [B, G, K, D]
        group = self.heads // self.kv_heads
        if not need_weights and not self.softcap:
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [B, H, K, D]
            heads_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
            weights = None
        else:
            weights, heads_out = self._weighted(q, k, v, mask=mask)
        heads_out = switch_heads(heads_out, heads_off)
        batch, _, length, _ = heads_out.shape
        return self.output(heads_out.transpose(1, 2).reshape(batch, length, -1)), weights


    def _weighted(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Weights ``[B, H, L, K]`` (in the type the model keeps them in: :func:`kept_dtype`) and head outputs
        ``[B, H, L, D]`` from q ``[B, H, L, D]``, k, v ``[B, G, K, D]``. A long pass (a prompt's prefill) runs
        ``PREFILL_CHUNK`` queries at a time over the keys the chunk's last query can see (the mask is causal: the
        keys after them have weight 0), so no float32 ``[B, H, L, K]`` is ever whole and the causal future's
        half of the scores is never computed; each chunk's weights are written straight into the kept type."""
        batch, heads, length, size = q.shape
        keys = k.shape[-2]
        if length <= PREFILL_CHUNK:
            return self._block(q, k, v, mask=mask)
        weights = q.new_empty(batch, heads, length, keys, dtype=kept_dtype() or q.dtype)
        heads_out = q.new_empty(batch, heads, length, size)
        for start in range(0, length, PREFILL_CHUNK):
            end = min(start + PREFILL_CHUNK, length)
            seen = keys - length + end  # the chunk's last query's own key, and every key before it
            rows, heads_out[:, :, start:end] = self._block(q[:, :, start:end], k[:, :, :seen], v[:, :, :seen],
                                                           mask=mask[..., start:end, :seen])
            weights[:, :, start:end, :seen] = rows
            weights[:, :, start:end, seen:] = 0.0
        return weights, heads_out

    def _block(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Float weights ``[B, H, L, K]`` and head outputs ``[B, H, L, D]`` of queries q ``[B, H, L, D]`` over the
        G key/value heads' k, v ``[B, G, K, D]``: the r = H / G query heads of a group are stacked along the query
        axis (``[B, G, r·L, D]``), so each key/value head is read where it is, not copied r times (a long prompt's
        keys and values repeated for every query head cost more than the scores)."""
        batch, heads, length, size = q.shape
        grouped = q.reshape(batch, self.kv_heads, -1, size)  # [B, G, r·L, D]
        scores = torch.matmul(grouped, k.transpose(-2, -1)).view(batch, heads, length, -1) * self.scaling
        if self.softcap:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        weights = masked_softmax(scores, mask, in_place=True)  # [B, H, L, K]
        heads_out = torch.matmul(weights.view(batch, self.kv_heads, -1, weights.shape[-1]), v)
        return weights, heads_out.view(batch, heads, length, size)


class FeedForward(nn.Module):
    """``linear_out(act(linear_in(h)) · linear_gate(h))`` when gated (SwiGLU, GeGLU: transformers' gate_proj is
    ``linear_in``, up_proj ``linear_gate``), else ``linear_out(act(linear_in(h)))``."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        d, d_ff, bias = config.d_model, config.d_ff, config.ffn_bias
        self.linear_in = nn.Linear(d, d_ff, bias=bias)
        self.linear_gate = nn.Linear(d, d_ff, bias=bias) if config.gated_ffn else None
        self.linear_out = nn.Linear(d_ff, d, bias=bias)
        self.activation = ACTIVATIONS[config.activation]

    def forward(self, h: Tensor) -> Tensor:
        inner = self.activation(self.linear_in(h))
        if self.linear_gate is not None:
            inner = inner * self.linear_gate(h)
        return self.linear_out(inner)


class DecoderOnlyLayer(nn.Module):
    """Pre-LN block: ``x + post(attention(norm(x)))``, then ``x + post(feed_forward(norm(x)))``; the ``post``
    norms only with ``sandwich_norms`` (Gemma 2)."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        self.attention_norm = make_norm(config)
        self.attention = GroupedAttention(config)
        self.feed_forward_norm = make_norm(config)
        self.feed_forward = FeedForward(config)
        self.post_attention_norm = make_norm(config) if config.sandwich_norms else None
        self.post_feed_forward_norm = make_norm(config) if config.sandwich_norms else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, *, rotary, mask: Tensor, cache: LayerCache | None, need_weights: bool,
                heads_off) -> tuple[Tensor, Tensor | None]:
        attended, weights = self.attention(self.attention_norm(x), rotary=rotary, mask=mask, cache=cache,
                                           need_weights=need_weights, heads_off=heads_off)
        if self.post_attention_norm is not None:
            attended = self.post_attention_norm(attended)
        x = x + self.dropout(attended)
        fed = self.feed_forward(self.feed_forward_norm(x))
        if self.post_feed_forward_norm is not None:
            fed = self.post_feed_forward_norm(fed)
        return x + self.dropout(fed), weights


def prompt_tokens(src_ids: Tensor, pad_id: int) -> Tensor:
    """Which positions of right-padded prompts are real. Padding only lengthens a row to the longest one, so some
    row has none: a row's padding is its trailing run of ``pad_id`` beyond the shortest such run among the rows (one
    prompt alone is never padded, and prompts that all end in the pad token keep it: a model without a padding
    token of its own pads with a real one, nanoGPT's character models with the newline).
    Shape: ``[B, S]`` → bool ``[B, S]``."""
    length = src_ids.shape[1]
    if not length:
        return src_ids != pad_id
    run = length - (src_ids != pad_id).flip(1).cummax(1).values.sum(1)  # [B] each row's trailing run of pad_id
    padding = run - run.min()
    return torch.arange(length, device=src_ids.device) < (length - padding)[:, None]


class DecoderOnlyLM(Seq2Seq):
    kinds = ("dec_self",)
    widens_gates = True  # models/nn/ablation.py: HeadGates.widened

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__(config)
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.max_len, config.d_model) if config.positions == "learned" else None
        self.layers = nn.ModuleList(DecoderOnlyLayer(config) for _ in range(config.layers))
        self.norm = make_norm(config)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_output:
            self.output.weight = self.tokens.weight
        self.inverse_frequencies = rotary_frequencies(config) if config.positions == "rotary" else None
        self.dropout = nn.Dropout(config.dropout)
        init_normal(self)

    def attention_shape(self) -> dict[str, tuple[int, int]]:
        return attention_shape(self.config)

    def source_mask(self, src_ids: Tensor) -> Tensor:
        """The prompt's real tokens ``[B, 1, 1, S]`` (each row's trailing run of ``pad_id`` is padding)."""
        return prompt_tokens(src_ids, self.pad_id)[:, None, None, :]

    def kv_groups(self) -> list[int]:
        """The key/value head each query head reads."""
        group = self.config.heads // self.config.key_value_heads
        return [head // group for head in range(self.config.heads)]

    def sliding_windows(self) -> list[int]:
        """Per layer its sliding window (0: none, every earlier position is seen)."""
        return [self.config.window_of(layer) for layer in range(self.config.layers)]

    # the three entry points

    def forward(self, src_ids: Tensor, tgt_in: Tensor, *, need_weights: bool = False,
                ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Intermediates]:
        real = prompt_tokens(src_ids, self.pad_id)
        prompt_len = src_ids.shape[1]
        ids = torch.cat([src_ids, tgt_in], dim=1)  # [B, S + T]
        keys = torch.cat([real, torch.ones_like(tgt_in, dtype=torch.bool)], dim=1)
        positions = self._positions(real, prompt_len, tgt_in.shape[1])
        logits, weights, mask = self._run(ids, positions, keys, caches=None, need_weights=need_weights,
                                          ablation=ablation)
        intermediates = Intermediates(masks={"dec_self": mask})
        if need_weights:
            intermediates.attention = {"dec_self": weights}
        return logits[:, prompt_len:], intermediates

    def start(self, src_ids: Tensor, *, need_weights: bool = True,
              ablation: Ablation = NO_ABLATION) -> tuple[DecoderState, Intermediates]:
        real = prompt_tokens(src_ids, self.pad_id)
        batch, prompt_len = src_ids.shape
        caches = [LayerCache() for _ in self.layers]
        state = DecoderState(self.tokens.weight.new_zeros(batch, prompt_len, 0), self.source_mask(src_ids),
                             caches=caches, ablation=ablation)
        positions = self._positions(real, prompt_len, 0)
        if prompt_len:
            _, weights, mask = self._run(src_ids, positions, real, caches=caches, need_weights=need_weights,
                                         ablation=ablation)
        else:
            mask = torch.ones(batch, 1, 0, 0, dtype=torch.bool, device=src_ids.device)
            weights = [self.tokens.weight.new_zeros(batch, self.config.heads, 0, 0) for _ in self.layers]
        intermediates = Intermediates(masks={"dec_self": mask})
        if need_weights:
            intermediates.attention = {"dec_self": weights}
        return state, intermediates

    def step(self, tokens: Tensor, state: DecoderState, *, need_weights: bool = True) -> StepOutput:
        real = state.src_mask[:, 0, 0, :]  # [B, S]
        prompt_len = real.shape[1]
        fed = torch.ones(tokens.shape[0], state.position + 1, dtype=torch.bool, device=tokens.device)
        keys = torch.cat([real, fed], dim=1)  # [B, S + t + 1]
        positions = self._positions(real, prompt_len, state.position + 1)  # every key's position
        if self.positions is not None and prompt_len + state.position >= self.config.max_len:
            raise self._beyond(prompt_len + state.position)  # bounded on the host: a step reads nothing off the device
        logits, weights, mask = self._run(tokens[:, None], positions, keys, caches=state.caches,
                                          need_weights=need_weights, ablation=state.ablation, bounded=True)
        state.position += 1
        attention = {"dec_self": [w[:, :, 0] for w in weights]} if need_weights else {}
        return StepOutput(logits[:, 0], attention, masks={"dec_self": mask[:, 0, 0]}, state=state)

    # the pass itself

    def _positions(self, real: Tensor, prompt_len: int, fed: int) -> Tensor:
        """The position of each of ``prompt_len + fed`` indices ``[B, S + fed]``: the prompt's indices as they are
        (padding keeps its index, never seen), then each row on from its real prompt's length."""
        batch = real.shape[0]
        prompt = torch.arange(prompt_len, device=real.device).expand(batch, -1)
        after = real.sum(1, keepdim=True) + torch.arange(fed, device=real.device)
        return torch.cat([prompt, after], dim=1)

    def _mask(self, positions: Tensor, keys: Tensor, query_len: int, *, window: int) -> Tensor:
        """``[B, 1, Q, K]`` for the last ``query_len`` of the indices ``positions`` ``[B, K]``: real keys at or
        before the query, fewer than ``window`` positions back (0: any); a padding query sees itself, so that no
        row is empty."""
        key_len = positions.shape[1]
        mask = keys[:, None, :] & causal_mask(query_len, key_len, device=keys.device)  # [B, Q, K]
        if window:
            query_pos = positions[:, key_len - query_len:]
            mask = mask & (query_pos[:, :, None] - positions[:, None, :] < window)
        index = torch.arange(key_len, device=keys.device)
        itself = (index[None, :] == index[key_len - query_len:, None])[None] & ~keys[:, key_len - query_len:, None]
        return (mask | itself)[:, None]

    def _beyond(self, position: int) -> InputError:
        return InputError(f"the prompt and its continuation reach position {position + 1}; this model has "
                          f"{self.config.max_len} positions")

    def _embed(self, ids: Tensor, positions: Tensor, *, bounded: bool = False) -> Tensor:
        """``bounded``: the caller checked that ``positions`` are within the table."""
        x = self.tokens(ids)
        if self.config.scale_embedding:
            x = x * torch.tensor(self.config.d_model ** 0.5, dtype=x.dtype)
        if self.positions is not None:
            if not bounded and positions.numel() and int(positions.max()) >= self.config.max_len:
                raise self._beyond(int(positions.max()))
            x = x + self.positions(positions)
        return self.dropout(x)

    def _rotary(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        """cos and sin ``[B, 1, L, D]`` at ``positions`` ``[B, L]`` (computed in float32)."""
        if self.inverse_frequencies is None:
            return None
        if self.inverse_frequencies.device != positions.device:  # a plain tensor: moved once, not with the model
            self.inverse_frequencies = self.inverse_frequencies.to(positions.device)
        angles = positions[..., None].float() * self.inverse_frequencies
        angles = torch.cat([angles, angles], dim=-1)[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def _run(self, ids: Tensor, positions: Tensor, keys: Tensor, *, caches: list[LayerCache] | None,
             need_weights: bool, ablation: Ablation, bounded: bool = False) -> tuple[Tensor, list[Tensor], Tensor]:
        """Feed ``ids`` ``[B, L]``, the last L of the K indices ``positions``/``keys`` ``[B, K]`` (earlier ones
        cached) → logits ``[B, L, V]``, weights per layer ``[B, H, L, K]``, the mask without windows (``bounded``:
        the positions were checked against a learned table)."""
        query_len = ids.shape[1]
        x = self._embed(ids, positions[:, -query_len:], bounded=bounded)
        rotary = self._rotary(positions[:, -query_len:], x.dtype)
        full = self._mask(positions, keys, query_len, window=0)
        windowed = {window: self._mask(positions, keys, query_len, window=window)
                    for window in set(self.sliding_windows()) if window}
        weights = []
        note_residual("decoder", x)
        for index, layer in enumerate(self.layers):
            window = self.config.window_of(index)
            mask = windowed[window] if window else full
            x, mask, *rotary_widened = ablation.widened("dec_self", index, x, mask,
                                                        *(rotary if rotary is not None else ()))
            x, layer_weights = layer(x, rotary=tuple(rotary_widened) or None, mask=mask,
                                     cache=caches[index] if caches is not None else None, need_weights=need_weights,
                                     heads_off=ablation.heads_off("dec_self", index, self.config.heads))
            weights.append(kept(layer_weights))
            note_residual("decoder", x)
        return self.head(x), weights, full

    def head(self, x: Tensor) -> Tensor:
        """The output head: the residual stream ``[..., E]`` → logits ``[..., V]`` (the final norm, the output
        projection, Gemma 2's final logit soft-capping)."""
        logits = self.output(self.norm(x))
        if self.config.logit_softcap:
            cap = self.config.logit_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits
