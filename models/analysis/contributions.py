"""Contributions beyond attention weights: how much each input token shaped each output, per head, per block
and through the whole model.

- ``value_norms``: Kobayashi et al. (2020), ‖α_ij · f(x_j)‖ with f(x) = (x W_V + b_V) W_O^h, per head.
- ``alti``: ALTI+ (Ferrando et al. 2022) as its authors compute it (models/analysis/alti.py). Each attention
  block's output y_i, biases included, is split exactly into one term per input token and a bias; token j's
  contribution is max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁), each row normalised, and the blocks are rolled out through
  the layers. For the decoder every prediction splits into a source and a target-prefix share that add up to 1.
- ``value_zeroing``: Mohebbi et al. (2023), the cosine distance of a layer's output when one token's value
  vector is zeroed in every head of that layer, all tokens of a sentence at once as a batch.
- input × gradient and integrated gradients: models/analysis/gradients.py; every method by its name:
  models/analysis/methods.py.

Every method takes the model, the source ids and the output ids (``DecodeResult.token_ids``: the decoder is fed
the start token and all but the last), and answers numpy arrays in a frozen ``ContributionMaps``, laid out as
the trace is: per kind and layer ``[heads, query, key]`` (per-head methods) or ``[query, key]`` (per block).
A decoder-only model's source ids are its whole prompt (``DecodeResult.prompt_ids``), and its maps cover the
prompt and the continuation as one sequence (models/analysis/decoder_only.py).
The methods that read the traced forward share one ``Captured`` pass (``capture_forward``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import InputError
from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..nn.intermediates import noting_blocks, noting_residuals, to_numpy
from . import catalogue
from .alti import BlockTerms, alti_block, alti_maps, block_terms, transformed, transformed_values  # noqa: F401
from . import decoder_only, encoder_only

# Floats of activations one value-zeroing batch may hold (copies × tokens × d_model, a few of each).
ZEROING_FLOATS = 1 << 22
# Value zeroing: a layer's output that moves by at most this many units of its dtype's rounding (ε) relative to
# its norm when a value is zeroed moved by rounding alone (a re-run adds in another order): 9.5e-7 in float32,
# 7.8e-3 in float16, 0.0625 in bfloat16; a float32 layer's own rounding error measures 1–3 ε.
ROUNDING_UNITS = 8


class ContributionError(InputError):
    """A contribution method the model cannot give (one line naming what the model lacks)."""


@dataclass(frozen=True)
class ContributionMethod(catalogue.ContributionMethod):
    """A method of the catalogue (models/analysis/catalogue.py: name, label, unit, kinds, what it needs) with what
    only a model can answer: whether this one can give it (``unavailable``) and its computation."""

    # Its computation, ``compute(model, src_ids, output_ids, captured=, ablation=, ig_steps=)`` → ContributionMaps,
    # registered by the module that computes it (``computes``); None for the attention weights, the trace itself.
    compute: Callable[..., ContributionMaps] | None = field(default=None, compare=False, repr=False)

    def unavailable(self, model: Seq2Seq) -> str | None:
        """Why ``model`` cannot give this method (one line), or None when it can."""
        return _LACKS[self.needs](model, self.label)

    def applies(self, model: Seq2Seq) -> bool:
        return self.unavailable(model) is None

    def check(self, model: Seq2Seq) -> None:
        reason = self.unavailable(model)
        if reason is not None:
            raise ContributionError(reason)


def _lacks_transformer(model: Seq2Seq, label: str) -> str | None:
    if traceable(model):
        return None
    if _decoder_attentions(model):
        return (f"{label} needs Transformer blocks (attention sublayers with a residual and a norm) "
                f"throughout; this {model.config.arch} model's encoder is recurrent and its decoder "
                "blocks have no norm")
    return (f"{label} needs Transformer blocks (attention sublayers with a residual and a norm); "
            f"this {model.config.arch} model has none")


def _lacks_values(model: Seq2Seq, label: str) -> str | None:
    if _has_values(model):
        return None
    return (f"{label} need Transformer blocks or a recurrent decoder's attention over the annotations; "
            f"this {model.config.arch} model has neither")


def _lacks_embeddings(model: Seq2Seq, label: str) -> str | None:
    if _embeddings(model) is not None:
        return None
    return f"{label} needs the model's token embeddings; this {model.config.arch} model exposes none"


def _lacks_attention(model: Seq2Seq, label: str) -> str | None:
    return None if model.kinds else f"{label} needs attention; this {model.config.arch} model has none"


def _lacks_logits(model: Seq2Seq, label: str) -> str | None:
    return (f"{label} explains a decoder's logits; this {model.config.arch} model fills masks and decodes nothing"
            if encoder_only.is_encoder_only(model) else _lacks_transformer(model, label))


# What the model lacks for each of the catalogue's needs (one line), or None.
_LACKS = {catalogue.NEEDS_TRANSFORMER: _lacks_transformer, catalogue.NEEDS_VALUES: _lacks_values,
          catalogue.NEEDS_EMBEDDINGS: _lacks_embeddings, catalogue.NEEDS_ATTENTION: _lacks_attention,
          catalogue.NEEDS_LOGITS: _lacks_logits}

# The catalogue's methods, each carrying its computation once the module computing it is imported.
CONTRIBUTION_METHODS = {name: ContributionMethod(**catalogue.method_fields(method))
                        for name, method in catalogue.CONTRIBUTION_METHODS.items()}


def computes(name: str):
    """Register the decorated function as the computation of ``CONTRIBUTION_METHODS[name]``: every method is then
    computed the same way (``models.analysis.methods.contributions``), by whoever iterates the registry."""
    def register(function: Callable[..., ContributionMaps]) -> Callable[..., ContributionMaps]:
        CONTRIBUTION_METHODS[name] = dataclasses.replace(CONTRIBUTION_METHODS[name], compute=function)
        return function
    return register


# Integrated gradients' completeness: the error each step may keep, relative to its log-probability change, and the
# least change (nats) an error is measured against (a change near 0 would make any error look infinite).
COMPLETENESS_TOLERANCE = 0.05
COMPLETENESS_FLOOR = 1e-3


@dataclass(frozen=True)
class ContributionMaps:
    """One method's answer for one sentence, laid out like the trace.

    ``layers[kind]``: per layer ``[heads, query, key]`` (``per_head``) or ``[query, key]``; a cross block's
    map is the share of each source token (``cross_residual[layer]`` ``[target]`` is the share its residual
    keeps). ``source`` ``[target, source]`` and ``target`` ``[target, target]``: the whole model's (ALTI+
    rolled out: each row of the two together sums to 1; gradients: each token's attribution), else None."""

    method: str
    per_head: bool
    layers: dict[str, list[np.ndarray]] = field(default_factory=dict)
    source: np.ndarray | None = None
    target: np.ndarray | None = None
    # value zeroing: per kind and layer ``[query]``, True where every change was at rounding level (the row is 0)
    rounding_rows: dict[str, list[np.ndarray]] = field(default_factory=dict)
    cross_residual: list[np.ndarray] = field(default_factory=list)
    completeness: np.ndarray | None = None  # integrated gradients: [target] each step's relative completeness error
    ig_steps: np.ndarray | None = None  # integrated gradients: [target] the quadrature nodes each step took
    # A decoder-only model's prompt length P: its maps are over the whole sequence of n positions (``layers``
    # ``[.., n, n]``, ``target`` ``[n, n]``, ``completeness`` ``[n]``) and ``source`` ``[T, P]`` is the prompt's
    # share of each predicted continuation token (models/analysis/decoder_only.py); None for other models.
    prompt_len: int | None = None
    logit_terms: dict[str, np.ndarray] = field(default_factory=dict)  # ALTI-Logit's terms no token's (alti_logit.py)
    contrast: tuple[int | None, ...] | None = None  # each step's contrast token y′ where explained against one

    @property
    def incomplete(self) -> list[int]:
        """The steps whose completeness error is over ``COMPLETENESS_TOLERANCE``."""
        errors = self.completeness if self.completeness is not None else ()
        return [step for step, error in enumerate(errors) if not error <= COMPLETENESS_TOLERANCE]

    def completeness_line(self, tokens: Sequence[str] | None = None) -> str:
        """Integrated gradients' completeness in one line (naming the steps that missed it, by their output
        ``tokens`` where given; a decoder-only model's positions, a continuation row by the output token it
        predicts), or "" for the other methods."""
        if self.completeness is None or not len(self.completeness):
            return ""
        largest, nodes = float(np.max(self.completeness)), int(np.max(self.ig_steps))
        missed = self.incomplete
        where = "step" if self.prompt_len is None else "position"
        if not missed:
            return (f"completeness: within {COMPLETENESS_TOLERANCE:.0%} at every {where} "
                    f"(largest error {largest:.1%}, {nodes} steps)")
        offset = 0 if self.prompt_len is None else 1 - self.prompt_len  # row i predicts output token i + offset
        named = ", ".join(f"{step}" + (f" ‘{tokens[step + offset]}’" if tokens is not None
                                       and 0 <= step + offset < len(tokens) else "")
                          for step in missed[:8]) + (" …" if len(missed) > 8 else "")
        return (f"completeness missed at {where}{'s' if len(missed) > 1 else ''} {named}: error up to {largest:.1%} "
                f"(over {COMPLETENESS_TOLERANCE:.0%}) after {nodes} steps")

    @property
    def unit(self) -> str:
        return CONTRIBUTION_METHODS[self.method].unit

    @property
    def source_contribution(self) -> np.ndarray | None:
        """``[target]``: how much of each prediction comes from the source (ALTI+), or None."""
        if self.source is None or self.target is None or self.method != catalogue.ALTI:
            return None  # an encoder-only model's rollout has no target side to share with
        return self.source.sum(axis=1)


@dataclass(frozen=True)
class SourceCoverage:
    """Dale et al.'s (2023) hallucination signal: ``avg_source``, the mean over target tokens of their source
    contribution, and ``min_source_token``, the least total one source token gives (at ``least_covered``)."""

    avg_source: float
    min_source_token: float
    least_covered: int


def source_coverage(alti_maps: ContributionMaps) -> SourceCoverage:
    totals = alti_maps.source.sum(axis=0)  # [source]
    least = int(np.argmin(totals))
    return SourceCoverage(avg_source=float(alti_maps.source_contribution.mean()),
                          min_source_token=float(totals[least]), least_covered=least)


# ---------------------------------------------------------------------------------------------- the forward


@dataclass
class Captured:
    """One teacher-forced pass over a source and an output: ids ``[1, S]``/``[1, T]`` (the decoder's input:
    the start token, then the output shifted right), logits ``[1, T, V]``, and per ``(kind, layer)`` the
    tensors its attention sublayer noted (``models.nn.intermediates.note_block``), with ``heads_off``: the heads
    ``ablation`` switched off there, whose output the block never added."""

    model: Seq2Seq
    src_ids: Tensor
    tgt_in: Tensor
    output_ids: Tensor
    logits: Tensor
    blocks: dict[tuple[str, int], dict] = field(default_factory=dict)
    ablation: Ablation = NO_ABLATION
    # A decoder-only model's pass: ``src_ids`` is the prompt ``[1, P]``, ``tgt_in`` every position fed ``[1, n]``
    # (the prompt, then the output but its last token), ``logits`` the output's predictions ``[1, T, V]``.
    prompt_len: int | None = None
    residuals: dict[str, list[Tensor]] = field(default_factory=dict)  # per stack [1, L, E] a boundary (lens.py)


def decoder_input(model: Seq2Seq, output_ids: Sequence[int]) -> list[int]:
    return [model.config.bos_id] + list(output_ids)[:-1]


def capture_forward(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                    ablation: Ablation = NO_ABLATION) -> Captured:
    """The traced forward pass with every attention block's tensors kept (float32 weights), with the heads
    ``ablation`` names switched off as the run that produced ``output_ids`` had them."""
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)
    if encoder_only.is_encoder_only(model):  # the sentence alone: its positions are the rows and the columns
        with _evaluating(model):
            logits, blocks = encoder_only.capture_sentence(model, src, ablation=ablation)
        return Captured(model, src, src[:, :0], output_ids=torch.tensor(list(output_ids), dtype=torch.long,
                                                                        device=device),
                        logits=logits, blocks=blocks, ablation=ablation)
    if decoder_only.is_decoder_only(model):
        fed, _ = decoder_only.sequence_ids(src_ids, output_ids)
        sequence = torch.tensor([fed], dtype=torch.long, device=device)
        with _evaluating(model), noting_residuals() as residuals:
            logits, blocks = decoder_only.capture_sequence(model, sequence, ablation=ablation)
        return Captured(model, src, sequence, output_ids=torch.tensor(list(output_ids), device=device),
                        logits=logits[:, len(src_ids) - 1:], blocks=blocks, ablation=ablation,
                        prompt_len=len(src_ids), residuals=residuals)
    tgt_in = torch.tensor([decoder_input(model, output_ids)], dtype=torch.long, device=device)
    with _evaluating(model), torch.inference_mode(), noting_blocks() as noted, noting_residuals() as residuals:
        logits, _ = model(src, tgt_in, need_weights=True, ablation=ablation)
    names = _block_names(model)
    blocks = {names[id(block["sublayer"])]: block for block in noted if id(block["sublayer"]) in names}
    for (kind, layer), block in blocks.items():
        block["heads_off"] = ablation.heads_off(kind, layer, block["v"].shape[1])
    return Captured(model, src, tgt_in, output_ids=torch.tensor(list(output_ids), device=device), logits=logits,
                    blocks=blocks, ablation=ablation, residuals=residuals)


def _block_names(model: Seq2Seq) -> dict[int, tuple[str, int]]:
    names = {}
    for layer, module in enumerate(getattr(model, "encoder_layers", ())):
        names[id(module.self_attention)] = ("enc_self", layer)
    for layer, module in enumerate(getattr(model, "decoder_layers", ())):
        names[id(module.self_attention)] = ("dec_self", layer)
        names[id(module.cross_attention)] = ("cross", layer)
    return names


def traceable(model: Seq2Seq) -> bool:
    """Whether ``model``'s forward pass can be traced block by block (Transformer blocks throughout): what
    ``capture_forward`` keeps, what ALTI+, ALTI-Logit and value zeroing read (a decoder-only model's layers too)."""
    if decoder_only.is_decoder_only(model) or encoder_only.is_encoder_only(model):
        return True
    return bool(getattr(model, "encoder_layers", None)) and bool(getattr(model, "decoder_layers", None))


@contextlib.contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Dropout off meanwhile (the decomposition is of the model as it translates)."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def _captured(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
              captured: Captured | None, ablation: Ablation) -> Captured:
    return captured if captured is not None else capture_forward(model, src_ids, output_ids, ablation=ablation)


# ------------------------------------------------------------------------------------------- value norms


def value_norms(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                captured: Captured | None = None, ablation: Ablation = NO_ABLATION) -> ContributionMaps:
    """Per kind, layer and head ‖α_ij f(x_j)‖ ``[heads, query, key]`` (no pass beyond the traced one); a head
    ``ablation`` switches off contributes nothing."""
    CONTRIBUTION_METHODS[catalogue.VALUE_NORMS].check(model)
    if _decoder_attentions(model):
        return _decoder_value_norms(model, src_ids, output_ids, ablation=ablation)
    if not traceable(model):
        return _recurrent_value_norms(model, src_ids, output_ids, ablation=ablation)
    captured = _captured(model, src_ids, output_ids, captured=captured, ablation=ablation)
    layers: dict[str, list[np.ndarray]] = {}
    for (kind, _layer), block in sorted(captured.blocks.items(), key=_block_order):
        norms = transformed_values(block).norm(dim=-1)  # [H, K]
        layers.setdefault(kind, []).append(to_numpy(block["weights"][0].float() * norms[:, None, :]))
    return ContributionMaps(catalogue.VALUE_NORMS, per_head=True, layers=layers, prompt_len=captured.prompt_len)


def _recurrent_attention(model: Seq2Seq) -> nn.Module | None:
    """The module that attends over the annotations in a recurrent decoder, where it has one: a GRU decoder's
    attention (additive or scaled dot), or a Luong decoder itself (its context adds the annotations up as they are)."""
    from ..nn.rnn import GRUDecoder, LuongDecoder

    decoder = getattr(model, "decoder", None)
    if isinstance(decoder, LuongDecoder):
        return decoder
    return decoder.attention if isinstance(decoder, GRUDecoder) else None


def _decoder_attentions(model: Seq2Seq) -> dict[tuple[str, int], nn.Module]:
    """(kind, layer) → the attention of a Transformer decoder over a recurrent encoder (gru-transformer-decoder:
    its blocks have a residual but no norm, so only their values are read), or nothing for other models."""
    from ..nn.rnn import GRUTransformerDecoder

    decoder = getattr(model, "decoder", None)
    if not isinstance(decoder, GRUTransformerDecoder):
        return {}
    return {(kind, index): getattr(layer, name) for index, layer in enumerate(decoder.layers)
            for kind, name in (("dec_self", "self_attention"), ("cross", "encoder_attention"))}


def _has_values(model: Seq2Seq) -> bool:
    """Whether value norms apply: some attention's value vectors can be read."""
    return traceable(model) or _recurrent_attention(model) is not None or bool(_decoder_attentions(model))


def _decoder_value_norms(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                         ablation: Ablation) -> ContributionMaps:
    """Per decoder layer and head ‖α_ij f(x_j)‖ of a Transformer decoder over a recurrent encoder: each attention's
    value projection is read as the forced pass computes it (the decoder's self-attention and its attention over
    the annotations; the encoder has no attention)."""
    attentions = _decoder_attentions(model)
    values: dict[tuple[str, int], Tensor] = {}
    hooks = [attention.value.register_forward_hook(lambda _module, _in, output, key=key: values.update({key: output}))
             for key, attention in attentions.items()]
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)
    tgt_in = torch.tensor([decoder_input(model, output_ids)], dtype=torch.long, device=device)
    try:
        with _evaluating(model), torch.inference_mode():
            _, intermediates = model(src, tgt_in, need_weights=True, ablation=ablation)
    finally:
        for hook in hooks:
            hook.remove()
    layers: dict[str, list[np.ndarray]] = {}
    with torch.inference_mode():
        for (kind, layer), attention in sorted(attentions.items(), key=_block_order):
            moved = transformed(attention, attention.split_heads(values[kind, layer])[0],
                                 heads_off=ablation.heads_off(kind, layer, attention.heads))
            weights = intermediates.attention[kind][layer][0].float()  # [H, Q, K]
            layers.setdefault(kind, []).append(to_numpy(weights * moved.norm(dim=-1)[:, None, :]))
    return ContributionMaps(catalogue.VALUE_NORMS, per_head=True, layers=layers)


def _recurrent_value_norms(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                           ablation: Ablation) -> ContributionMaps:
    """A recurrent decoder's one cross-attention head: α_ij ‖v_j‖, the values being the annotations (additive,
    Luong) or their value projection (scaled dot; no output projection), which is what the context adds up
    (nothing when ``ablation`` switches the head off: the cell then reads a zero context)."""
    from ..nn.attention import MultiHeadAttention

    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)
    tgt_in = torch.tensor([decoder_input(model, output_ids)], dtype=torch.long, device=device)
    attention = _recurrent_attention(model)
    with _evaluating(model), torch.inference_mode():
        _, intermediates = model(src, tgt_in, need_weights=True, ablation=ablation)
        annotations, _ = model.encoder(src, model.source_mask(src))  # [1, S, N]
        values = annotations[:, None]  # [1, 1, S, N]
        if isinstance(attention, MultiHeadAttention):
            values = attention.split_heads(attention.value(annotations))
        norms = values[0].float().norm(dim=-1)  # [H, S]
        if ablation.heads_off("cross", 0, norms.shape[0]):
            norms = torch.zeros_like(norms)
        weights = intermediates.attention["cross"][0][0].float()  # [H, T, S]
    return ContributionMaps(catalogue.VALUE_NORMS, per_head=True,
                            layers={"cross": [to_numpy(weights * norms[:, None, :])]})


def _block_order(item) -> tuple[int, int]:
    (kind, layer), _ = item
    return catalogue.ALL_KINDS.index(kind), layer


# ------------------------------------------------------------------------------------------------- ALTI+


def alti(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
         captured: Captured | None = None, ablation: Ablation = NO_ABLATION) -> ContributionMaps:
    """ALTI+ (models/analysis/alti.py): every block's contributions and the rollout through the model
    (``source``, ``target``), with the heads ``ablation`` names switched off."""
    CONTRIBUTION_METHODS[catalogue.ALTI].check(model)
    captured = _captured(model, src_ids, output_ids, captured=captured, ablation=ablation)
    return ContributionMaps(catalogue.ALTI, per_head=False, **alti_maps(captured))


# ---------------------------------------------------------------------------------------------- value zeroing


@contextlib.contextmanager
def zeroing_values(linear: nn.Linear, positions: Tensor) -> Iterator[None]:
    """While inside, row ``b`` of every batch ``linear`` computes has its value at ``positions[b]`` zeroed
    (a position of −1 zeroes nothing)."""
    def hook(_module, _inputs, output: Tensor) -> Tensor:
        rows = torch.arange(output.shape[0], device=output.device)
        keep = torch.ones(output.shape[:2], dtype=output.dtype, device=output.device)
        chosen = positions >= 0
        keep[rows[chosen], positions[chosen]] = 0.0
        return output * keep[..., None]

    handle = linear.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def value_zeroing(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                  captured: Captured | None = None, ablation: Ablation = NO_ABLATION) -> ContributionMaps:
    """Per kind and layer ``[query, key]``: the cosine distance of the layer's output at each query when each
    key's value vector is zeroed in every head of that attention, rows normalised to sum to 1 (Mohebbi et al.
    2023); a row whose every change is at rounding level is 0, and ``rounding_rows`` says which. Each layer runs
    again from its captured input, the keys as a batch (chunked), with the heads of the captured pass's ablation
    switched off."""
    CONTRIBUTION_METHODS[catalogue.VALUE_ZEROING].check(model)
    captured = _captured(model, src_ids, output_ids, captured=captured, ablation=ablation)
    if captured.prompt_len is not None:
        with _evaluating(model), torch.inference_mode():
            maps = decoder_only.zeroing_layers(captured, _zeroing_map)
        return ContributionMaps(catalogue.VALUE_ZEROING, per_head=False,
                                layers={"dec_self": [shares for shares, _ in maps]},
                                rounding_rows={"dec_self": [rows for _, rows in maps]}, prompt_len=captured.prompt_len)
    if encoder_only.is_encoder_only(model):
        with _evaluating(model), torch.inference_mode():
            maps = encoder_only.zeroing_layers(captured, _zeroing_map)
        return ContributionMaps(catalogue.VALUE_ZEROING, per_head=False,
                                layers={"enc_self": [shares for shares, _ in maps]},
                                rounding_rows={"enc_self": [rows for _, rows in maps]})
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"enc_self": [], "dec_self": [], "cross": []}
    with _evaluating(model), torch.inference_mode():
        memory, src_mask, _ = model.encode(captured.src_ids, False, captured.ablation)
        for layer, module in enumerate(model.encoder_layers):
            block = captured.blocks[("enc_self", layer)]
            run = lambda x, m=module, b=block: m(x, b["mask"], need_weights=False, bias=b["bias"],  # noqa: E731
                                                 heads_off=b["heads_off"])[0]
            found["enc_self"].append(_zeroing_map(run, block["x"], module.self_attention.attention.value,
                                                  keys=captured.src_ids.shape[1]))
        for layer, module in enumerate(model.decoder_layers):
            block = captured.blocks[("dec_self", layer)]
            cross_off = captured.blocks[("cross", layer)]["heads_off"]

            def run(x, m=module, b=block, cross_off=cross_off):
                rows = x.shape[0]
                return m(x, memory.expand(rows, -1, -1), self_mask=b["mask"], cross_mask=src_mask, cache=None,
                         need_weights=False, self_bias=b["bias"], self_off=b["heads_off"], cross_off=cross_off)[0]

            found["dec_self"].append(_zeroing_map(run, block["x"], module.self_attention.attention.value,
                                                  keys=captured.tgt_in.shape[1]))
            found["cross"].append(_zeroing_map(run, block["x"], module.cross_attention.attention.value,
                                               keys=captured.src_ids.shape[1]))
    return ContributionMaps(catalogue.VALUE_ZEROING, per_head=False,
                            layers={kind: [shares for shares, _ in maps] for kind, maps in found.items()},
                            rounding_rows={kind: [rows for _, rows in maps] for kind, maps in found.items()})


def _zeroing_map(run: Callable[[Tensor], Tensor], x: Tensor, value: nn.Linear, *,
                 keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``[Q, keys]``: 1 − cos(y_i, y_i without key j's value), rows normalised, and ``[Q]``: the rows whose
    every change ‖Δy_i‖ is at rounding level (at most ``ROUNDING_UNITS`` ε ‖y_i‖), which are 0 instead of
    rounding noise normalised into shares."""
    original = run(x)[0]  # [Q, E]
    per_batch = max(1, ZEROING_FLOATS // max(1, x.shape[1] * x.shape[2] * 4))
    columns = []
    largest = torch.zeros(original.shape[0], device=x.device)  # [Q]: max_j ‖Δy_i‖
    for start in range(0, keys, per_batch):
        positions = torch.arange(start, min(start + per_batch, keys), device=x.device)
        with zeroing_values(value, positions):
            changed = run(x.expand(len(positions), -1, -1))  # [J, Q, E]
        columns.append(cosine_distance(changed, original[None]).T)  # [Q, J]
        largest = torch.maximum(largest, (changed.float() - original.float()).norm(dim=-1).amax(dim=0))
    scores = torch.cat(columns, dim=1)  # [Q, keys]
    rounding = largest <= ROUNDING_UNITS * torch.finfo(original.dtype).eps * original.float().norm(dim=-1)
    scores[rounding] = 0.0
    total = scores.sum(dim=1, keepdim=True)
    return to_numpy(scores / torch.where(total > 0, total, torch.ones_like(total))), to_numpy(rounding)


def cosine_distance(a: Tensor, b: Tensor) -> Tensor:
    """1 − cos(a, b) over the last axis, as ½‖â − b̂‖² (1 − cos itself loses the digits of a small change)."""
    unit = torch.nn.functional.normalize
    return 0.5 * (unit(a.double(), dim=-1) - unit(b.double(), dim=-1)).pow(2).sum(dim=-1).float()


# -------------------------------------------------------------- token embeddings (the gradient methods: gradients.py)


def _embeddings(model: Seq2Seq) -> tuple[nn.Embedding, nn.Embedding] | None:
    """The source and target token embedding tables, where the model has them (a decoder-only model's one table
    for both)."""
    if decoder_only.is_decoder_only(model):
        return model.tokens, model.tokens
    if encoder_only.is_encoder_only(model):
        return model.embedding.tokens, model.embedding.tokens
    pairs = ((getattr(model, "src_embedding", None), getattr(model, "tgt_embedding", None)),
             (getattr(model, "encoder", None), getattr(model, "decoder", None)))
    for source, target in pairs:
        source = getattr(source, "tokens", None) or getattr(source, "embedding", None)
        target = getattr(target, "tokens", None) or getattr(target, "embedding", None)
        if isinstance(source, nn.Embedding) and isinstance(target, nn.Embedding):
            return source, target
    return None


# ---------------------------------------------------------------------------------------------- over a corpus


@dataclass(frozen=True)
class PairCoverage:
    """One pair's hallucination signal: its number in the corpus (from 1), its texts (``output``: the scored
    target, the reference or the model's own), ``coverage`` and the least covered source token."""

    number: int
    source: str
    output: str
    coverage: SourceCoverage
    least_covered_token: str
    source_ids: tuple[int, ...] = ()  # what was scored: the source and the output token ids
    output_ids: tuple[int, ...] = ()

    def to_json(self) -> dict:
        return {"pair": self.number, "source": self.source, "output": self.output,
                "avg_source": round(self.coverage.avg_source, 6),
                "min_source_token": round(self.coverage.min_source_token, 6),
                "least_covered": self.least_covered_token}


def corpus_coverage(translator, pairs: Sequence[tuple[str, str]], *, decoded: bool = False) -> list[PairCoverage]:
    """Every pair's ALTI+ source coverage, forced on its reference (``decoded``: on the model's greedy output),
    lowest ``avg_source`` first."""
    from .importance import encode_references, scored_pair

    CONTRIBUTION_METHODS[catalogue.ALTI].check(translator.model)
    scored = []
    if decoded:  # greedy outputs, decoded in batches
        from ..inference.corpus import decode_corpus

        sources = [translator.source(source_text) for source_text, _ in pairs]
        for number, (source, results) in enumerate(zip(sources, decode_corpus(translator, sources)), start=1):
            scored.append((number, source.ids, results[0].token_ids, results[0].text))
    else:
        encoded, _ = encode_references(translator, pairs)
        scored = [(number, *scored_pair(translator.config, pair), pairs[number - 1][1])
                  for number, pair in enumerate(encoded, start=1)]
    found = []
    for number, source_ids, output_ids, output_text in scored:
        maps = alti(translator.model, source_ids, output_ids)
        coverage = (SourceCoverage(*encoder_only.mask_coverage(maps, source_ids, translator.config.mask_id))
                    if encoder_only.is_encoder_only(translator.model) else source_coverage(maps))
        token = translator.source_tokenizer.token(source_ids[coverage.least_covered])
        found.append(PairCoverage(number, pairs[number - 1][0], output_text, coverage=coverage,
                                  least_covered_token=token, source_ids=tuple(source_ids),
                                  output_ids=tuple(output_ids)))
    return sorted(found, key=lambda pair: pair.coverage.avg_source)


def _from_the_traced_pass(function: Callable[..., ContributionMaps]) -> Callable[..., ContributionMaps]:
    """A method read from the traced pass, as the registry calls it (integrated gradients' steps are not its)."""
    def compute(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                captured: Captured | None = None, ablation: Ablation = NO_ABLATION,
                ig_steps: int | None = None) -> ContributionMaps:
        return function(model, src_ids, output_ids, captured=captured, ablation=ablation)
    return compute


for _name, _function in ((catalogue.VALUE_NORMS, value_norms), (catalogue.ALTI, alti),
                         (catalogue.VALUE_ZEROING, value_zeroing)):
    computes(_name)(_from_the_traced_pass(_function))
