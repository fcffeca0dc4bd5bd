"""GRU encoder with its decoders: none, additive, scaled-dot, causal scaled-dot, Transformer decoder over
the annotations (docs/architectures.md#gru-encoder).

Dimension legend: B batch, S source length, T target length, N hidden size, V vocabulary.
Masks: True = may attend. Attention decoders attend over the encoder annotations (one per source
token); the causal variant lets output step t see source positions 0..t only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .ablation import NO_ABLATION, Ablation
from .attention import AdditiveAttention, MultiHeadAttention, switch_heads
from .base import DecoderState, LayerCache, Seq2Seq, StepOutput, sinusoid_table
from .config import RNNConfig, attention_shape
from .masks import target_mask
from .intermediates import Intermediates, kept


class GRUEncoder(nn.Module):
    """Embedding → dropout → GRU. Returns every annotation and the hidden state after the last real token.

    ``rnn-luong`` (docs/architectures.md#rnn-luong): ``decoder_layers`` layers of GRU or LSTM (``rnn_cell``),
    optionally bidirectional (hidden/2 per direction, the two concatenated), embeddings of ``embedding_size``;
    each sentence runs over its own tokens only (packed), and the final state holds every layer's ``[L, B, N]``
    (an LSTM's hidden states, then its cell states: ``[2L, B, N]``).
    """

    def __init__(self, config: RNNConfig):
        super().__init__()
        self.luong = config.arch == "rnn-luong"
        directions = 2 if config.bidirectional else 1
        width = config.embedding_size or config.hidden
        self.embedding = nn.Embedding(config.src_vocab_size, width)
        self.dropout = nn.Dropout(config.dropout)
        layers = config.decoder_layers if self.luong else 1
        recurrent = nn.LSTM if config.rnn_cell == "lstm" else nn.GRU
        self.gru = recurrent(width, config.annotation_width // directions, num_layers=layers,
                          dropout=config.dropout if layers > 1 else 0.0,
                          bidirectional=config.bidirectional, batch_first=True)

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Shape: src_ids ``[B, S]``, src_mask ``[B, 1, 1, S]`` → annotations ``[B, S, N]``, final ``[B, N]``
        (``rnn-luong``: ``[L, B, N]``).

        Sources are right-padded, so positions up to a sentence's length never see its padding.
        """
        lengths = src_mask[:, 0, 0, :].sum(dim=1).clamp(min=1)  # [B]
        embedded = self.dropout(self.embedding(src_ids))
        if self.luong:
            packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
            annotations, final = self.gru(packed)  # final [L·directions, B, N/directions] (LSTM: h and c)
            annotations = pad_packed_sequence(annotations, batch_first=True, total_length=src_ids.shape[1])[0]
            states = list(final) if isinstance(final, tuple) else [final]
            if self.gru.bidirectional:  # per layer: [forward; backward]
                states = [torch.cat([state[0::2], state[1::2]], dim=2) for state in states]
            return annotations, torch.cat(states, dim=0)
        annotations, _ = self.gru(embedded)  # [B, S, N]
        final = annotations[torch.arange(src_ids.shape[0], device=src_ids.device), lengths - 1]  # [B, N]
        return annotations, final


class LuongDecoder(nn.Module):
    """Luong's global attention with input feeding (docs/architectures.md#rnn-luong), one step per token.

    The stacked cells read ``[embedding; previous attentional state]``; the top cell's output queries the
    annotations; the attentional state ``tanh(W[context; h])`` (mlp: ``W[context; h] + b``) feeds the output
    layer and the next step. ``state.hidden`` is ``[B, L + 1, N]``: the L layers' states, then the feed
    (LSTM: ``[B, 2L + 1, N]``, hidden states, cell states, feed). Annotations of another width A
    (``annotation_size``) are read through maps sized for them: the query map ``[N → A]`` (mlp: the key map
    ``[A → N]``), the attentional layer ``[A + N → N]``, and the maps that make the first states.
    """

    def __init__(self, config: RNNConfig):
        super().__init__()
        hidden, width = config.hidden, config.embedding_size or config.hidden
        annotations = config.annotation_width
        self.score_kind = config.luong_score
        self.embedding = nn.Embedding(config.tgt_vocab_size, width)
        self.dropout = nn.Dropout(config.dropout)
        cell = nn.LSTMCell if config.rnn_cell == "lstm" else nn.GRUCell
        self.lstm = config.rnn_cell == "lstm"
        self.input_feeding = config.input_feeding
        first = width + hidden if config.input_feeding else width
        self.cells = nn.ModuleList(cell(first if index == 0 else hidden, hidden)
                                   for index in range(config.decoder_layers))
        self.init_hidden = config.init_hidden
        if config.init_hidden == "bridge":
            self.bridge = nn.Linear(annotations, hidden)
        # the encoder's own final states, each layer's, made as wide as the decoder's
        self.projects_states = config.init_hidden == "encoder" and annotations != hidden
        if self.projects_states:
            self.hidden_projection = nn.Linear(annotations, hidden)
            if self.lstm:
                self.cell_projection = nn.Linear(annotations, hidden)
        if self.score_kind == "general":
            self.query = nn.Linear(hidden, annotations, bias=False)
        elif self.score_kind == "mlp":
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(annotations, hidden, bias=False)
            self.score = nn.Linear(hidden, 1, bias=False)
        self.combine = nn.Linear(annotations + hidden, hidden,
                                 bias=self.score_kind == "mlp" or config.attentional_bias)
        self.combine_tanh = self.score_kind != "mlp" or config.attentional_bias
        self.output = nn.Linear(hidden, config.tgt_vocab_size)

    def initial(self, final: Tensor) -> Tensor:
        """The encoder's per-layer final states ``[L, B, A]`` (LSTM ``[2L, B, A]``) and a zero feed, as
        ``[B, L + 1, N]``; with ``init_hidden`` other than ``encoder`` every layer (and an LSTM's cell) starts from
        one state made from the top layer's final hidden state: ``tanh(bridge(h))``, ``h`` itself (its forward
        half when twice as wide), or zeros."""
        hidden = self.combine.out_features
        if self.init_hidden != "encoder":
            top = final[len(self.cells) - 1]  # [B, A]
            if self.init_hidden == "bridge":
                top = torch.tanh(self.bridge(top))
            elif self.init_hidden == "zero":
                top = top.new_zeros(top.shape[0], hidden)
            final = top[:, :hidden][None].expand(final.shape[0], -1, -1)
        elif self.projects_states:
            count = len(self.cells)
            states = [self.hidden_projection(final[:count])]
            if self.lstm:
                states.append(self.cell_projection(final[count:]))
            final = torch.cat(states, dim=0)
        final = final.transpose(0, 1)
        return torch.cat([final, torch.zeros_like(final[:, :1])], dim=1)

    def step(self, tokens: Tensor, state: DecoderState, need_weights: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Shape: tokens ``[B]`` → logits ``[B, V]``, weights ``[B, 1, S]``, mask row ``[B, S]``."""
        x = self.dropout(self.embedding(tokens))
        if self.input_feeding:
            x = torch.cat([x, state.hidden[:, -1]], dim=-1)
        count = len(self.cells)
        layers, memory_cells = [], []
        for index, cell in enumerate(self.cells):
            if self.lstm:
                x, kept = cell(x, (state.hidden[:, index], state.hidden[:, count + index]))
                memory_cells.append(kept)
            else:
                x = cell(x, state.hidden[:, index])
            layers.append(x)
            if index + 1 < count:
                x = self.dropout(x)
        query, memory = layers[-1], state.memory  # [B, N], [B, S, N]
        if self.score_kind == "mlp":
            scores = self.score(torch.tanh(self.query(query)[:, None] + self.key(memory)))[..., 0]
        else:
            scores = torch.einsum("bn,bsn->bs", self.query(query) if self.score_kind == "general" else query, memory)
        mask = state.src_mask[:, 0, 0, :]
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # [B, S]
        context = torch.einsum("bs,bsn->bn", weights, memory)
        # the one head switched off: no context reaches the output
        context = switch_heads(context[:, None], state.ablation.heads_off("cross", 0, 1))[:, 0]
        attentional = self.combine(torch.cat([context, query], dim=-1))
        if self.combine_tanh:
            attentional = torch.tanh(attentional)
        attentional = self.dropout(attentional)
        state.hidden = torch.stack([*layers, *memory_cells, attentional], dim=1)
        return self.output(attentional), weights[:, None], mask


class GRUDecoder(nn.Module):
    """The GRU decoder, without attention or with one attention over the encoder's annotations: one GRU cell
    step per output token.

    Without attention the cell reads the embedding; with attention it reads ``[embedding; context]``.
    """

    def __init__(self, config: RNNConfig):
        super().__init__()
        hidden = config.hidden
        self.kind = config.arch
        self.query_source = config.attention_query
        self.embedding = nn.Embedding(config.tgt_vocab_size, hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.attention: nn.Module | None = None
        if config.arch == "gru-additive":
            self.attention = AdditiveAttention(hidden, hidden, hidden=hidden, activation=config.additive_activation)
        elif config.arch in ("gru-scaled-dot", "gru-causal-scaled-dot"):
            self.attention = MultiHeadAttention(hidden, 1, output_projection=False)
        self.cell = nn.GRUCell(hidden * (2 if self.attention is not None else 1), hidden)
        self.output = nn.Linear(hidden, config.tgt_vocab_size)

    def cross_mask(self, state: DecoderState, batch: int) -> Tensor:
        """The mask row ``[B, S]`` for the query at ``state.position``."""
        mask = state.src_mask[:, 0, 0, :].expand(batch, -1)
        if self.kind == "gru-causal-scaled-dot":
            allowed = torch.arange(mask.shape[1], device=mask.device) <= state.position
            mask = mask & allowed
        return mask

    def step(self, tokens: Tensor, state: DecoderState, need_weights: bool) -> tuple[Tensor, Tensor | None, Tensor]:
        """Shape: tokens ``[B]`` → logits ``[B, V]``, weights ``[B, 1, S]`` or None, mask row ``[B, S]``."""
        embedded = self.dropout(self.embedding(tokens))  # [B, N]
        mask = self.cross_mask(state, tokens.shape[0])
        weights = None
        cell_input = embedded
        if self.attention is not None:
            query = (state.hidden if self.query_source == "hidden" else embedded)[:, None]  # [B, 1, N]
            context, weights = self._attend(query, state, mask[:, None, None, :])  # [B, 1, N], [B, 1, 1, S]
            # the one head switched off: the cell reads no context
            context = switch_heads(context, state.ablation.heads_off("cross", 0, 1))
            cell_input = torch.cat([embedded, context[:, 0]], dim=-1)  # [B, 2N]
            weights = weights[:, :, 0]
        state.hidden = self.cell(cell_input, state.hidden)
        return self.output(state.hidden), weights, mask

    def _attend(self, query: Tensor, state: DecoderState, mask: Tensor) -> tuple[Tensor, Tensor]:
        if isinstance(self.attention, AdditiveAttention):
            return self.attention(query, state.memory, values=state.memory, mask=mask)
        k, v = state.caches[0].cross_kv(lambda: self.attention.project_kv(state.memory, state.memory))
        return self.attention.attend(query, k, v=v, mask=mask)


class TransformerBlock(nn.Module):
    """A Transformer decoder layer over GRU annotations: causal self-attention, attention over annotations,
    Linear→ReLU, each added to its input (no LayerNorm, no output projection: single-head ScaledDotAttention)."""

    def __init__(self, config: RNNConfig):
        super().__init__()
        self.self_attention = MultiHeadAttention(config.hidden, config.decoder_heads, output_projection=False)
        self.encoder_attention = MultiHeadAttention(config.hidden, config.decoder_heads, output_projection=False)
        self.mlp = nn.Linear(config.hidden, config.hidden)

    def forward(self, x: Tensor, memory: Tensor, *, self_mask: Tensor | None, cross_mask: Tensor,
                cache: LayerCache | None, self_off: tuple[int, ...] = (),
                cross_off: tuple[int, ...] = ()) -> tuple[Tensor, Tensor, Tensor]:
        """Shape: x ``[B, L, N]`` → x, self weights ``[B, h, L, K]``, cross weights ``[B, h, L, S]``.
        ``self_off``/``cross_off``: heads whose output is zeroed (models/nn/ablation.py)."""
        k, v = self.self_attention.project_kv(x, x)
        if cache is not None:
            k, v = cache.extend_self(k, v)
        attended, self_weights = self.self_attention.attend(x, k, v=v, mask=self_mask, heads_off=self_off)
        x = x + attended
        project = lambda: self.encoder_attention.project_kv(memory, memory)  # noqa: E731
        k, v = cache.cross_kv(project) if cache is not None else project()
        attended, cross_weights = self.encoder_attention.attend(x, k, v=v, mask=cross_mask, heads_off=cross_off)
        x = x + attended
        return x + F.relu(self.mlp(x)), self_weights, cross_weights


class GRUTransformerDecoder(nn.Module):
    def __init__(self, config: RNNConfig):
        super().__init__()
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.hidden)
        table = (sinusoid_table(config.max_len, config.hidden) if config.positions
                 else torch.zeros(config.max_len, config.hidden))
        self.register_buffer("positions", table, persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.decoder_layers))
        self.output = nn.Linear(config.hidden, config.tgt_vocab_size)

    def forward(self, tgt_ids: Tensor, memory: Tensor, *, self_mask: Tensor | None, cross_mask: Tensor,
                caches: list[LayerCache] | None, offset: int, ablation: Ablation = NO_ABLATION):
        x = self.dropout(self.embedding(tgt_ids) + self.positions[offset: offset + tgt_ids.shape[1]])
        self_weights, cross_weights = [], []
        for index, layer in enumerate(self.layers):
            heads = layer.self_attention.heads
            x, self_w, cross_w = layer(x, memory, self_mask=self_mask, cross_mask=cross_mask,
                                       cache=caches[index] if caches else None,
                                       self_off=ablation.heads_off("dec_self", index, heads),
                                       cross_off=ablation.heads_off("cross", index, heads))
            self_weights.append(kept(self_w))
            cross_weights.append(kept(cross_w))
        return self.output(x), self_weights, cross_weights


class RNNSeq2Seq(Seq2Seq):
    """GRU encoder + the decoder ``config.arch`` names. Weights are always captured (GRU attention is
    computed explicitly; it is cheap next to the recurrent steps)."""

    def __init__(self, config: RNNConfig):
        super().__init__(config)
        self.encoder = GRUEncoder(config)
        if config.arch == "gru-transformer-decoder":
            self.decoder: nn.Module = GRUTransformerDecoder(config)
            self.kinds = ("dec_self", "cross")
        elif config.arch == "rnn-luong":
            self.decoder = LuongDecoder(config)
            self.kinds = ("cross",)
        else:
            self.decoder = GRUDecoder(config)
            self.kinds = () if config.arch == "gru-none" else ("cross",)

    @property
    def transformer_decoder(self) -> bool:
        return isinstance(self.decoder, GRUTransformerDecoder)

    def attention_shape(self) -> dict[str, tuple[int, int]]:
        return attention_shape(self.config)

    def start(self, src_ids: Tensor, *, need_weights: bool = True,
              ablation: Ablation = NO_ABLATION) -> tuple[DecoderState, Intermediates]:
        src_mask = self.source_mask(src_ids)
        annotations, final = self.encoder(src_ids, src_mask)
        if isinstance(self.decoder, LuongDecoder):
            final = self.decoder.initial(final)
        layers = self.config.decoder_layers if self.transformer_decoder else 1
        state = DecoderState(annotations, src_mask, hidden=final, caches=[LayerCache() for _ in range(layers)],
                             ablation=ablation)
        return state, Intermediates()

    def step(self, tokens: Tensor, state: DecoderState, *, need_weights: bool = True) -> StepOutput:
        batch = tokens.shape[0]
        if self.transformer_decoder:
            logits, self_w, cross_w = self.decoder(tokens[:, None], state.memory, self_mask=None,
                                                   cross_mask=state.src_mask, caches=state.caches,
                                                   offset=state.position, ablation=state.ablation)
            state.position += 1
            masks = {"dec_self": torch.ones(batch, state.position, dtype=torch.bool, device=tokens.device),
                     "cross": state.src_mask[:, 0, 0, :].expand(batch, -1)}
            attention = {"dec_self": [w[:, :, 0] for w in self_w], "cross": [w[:, :, 0] for w in cross_w]}
            return StepOutput(logits[:, 0], attention if need_weights else {}, masks=masks, state=state)
        logits, weights, mask = self.decoder.step(tokens, state, need_weights)
        state.position += 1
        attention = {"cross": [weights]} if weights is not None and need_weights else {}
        return StepOutput(logits, attention, masks={"cross": mask} if weights is not None else {}, state=state)

    def forward(self, src_ids: Tensor, tgt_in: Tensor, *, need_weights: bool = False,
                ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Intermediates]:
        state, _ = self.start(src_ids, ablation=ablation)
        if self.transformer_decoder:
            self_mask = target_mask(tgt_in, self.pad_id)
            logits, self_w, cross_w = self.decoder(tgt_in, state.memory, self_mask=self_mask,
                                                   cross_mask=state.src_mask, caches=None, offset=0,
                                                   ablation=ablation)
            intermediates = Intermediates(masks={"dec_self": self_mask, "cross": state.src_mask})
            if need_weights:
                intermediates.attention = {"dec_self": self_w, "cross": cross_w}
            return logits, intermediates
        return self._forward_recurrent(tgt_in, state, need_weights)

    def _forward_recurrent(self, tgt_in: Tensor, state: DecoderState,
                           need_weights: bool) -> tuple[Tensor, Intermediates]:
        """Teacher forcing through the recurrent decoder, one step per target position."""
        logits, rows, mask_rows = [], [], []
        for position in range(tgt_in.shape[1]):
            step_logits, weights, mask = self.decoder.step(tgt_in[:, position], state, need_weights)
            state.position += 1
            logits.append(step_logits)
            rows.append(weights)
            mask_rows.append(mask)
        intermediates = Intermediates()
        if "cross" in self.kinds:
            intermediates.masks = {"cross": torch.stack(mask_rows, dim=1)[:, None]}  # [B, 1, T, S]
            if need_weights:
                intermediates.attention = {"cross": [torch.stack(rows, dim=2)]}  # [B, 1, T, S]
        return torch.stack(logits, dim=1), intermediates
