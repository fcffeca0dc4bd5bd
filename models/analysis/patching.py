"""Activation patching with a clean and a corrupted source, exact and by attribution patching
(docs/ARCHITECTURE.md#activation-patching).

The model is forced on the clean output (the ids given). The metric is, at one step t, logit(clean token) −
logit(corrupt token), where the clean token is the output's token t and the corrupt token is the one the corrupted
run predicts at t on the same prefix (its runner-up where that is the clean token); or the NLL of the whole clean
output (``NLL``). A patched run is the corrupted run with some activations replaced by the clean run's:

- ``encoder`` ``[layers + 1, S]``: one position of the encoder's residual stream (layer 0 the embeddings, layer l the
  output of layer l − 1, the last before the final norm); ``encoder_all`` ``[layers + 1]``: every position of it;
- ``decoder`` ``[layers + 1, n]``: one position of the decoder's (n positions fed: the start token and the output
  but its last; a decoder-only model's prompt and continuation but its last);
- ``heads[kind]`` ``[layers, heads]``: one head's output before the output projection combines the heads.

Exact patching runs every patched run, batched (``Patches``: the rows of one layer's probes in one pass, the layers
below them once). Attribution patching (AtP; Nanda 2023, "Attribution Patching: Activation Patching At Industrial
Scale"; Syed et al. 2023) estimates each from one clean forward and one corrupted forward and backward:
m(corrupt) + (clean_act − corrupt_act) · ∂m/∂act at the corrupted run. Both tables hold the patched metric; the
normalised score (m − m_corrupt) / (m_clean − m_corrupt) is 0 for the corrupted run and 1 for the clean one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..inference.decoding import finish
from ..inference.translator import SourceInput, Translator
from ..nn.base import Seq2Seq
from ..nn.decoder_only import DecoderOnlyLM
from ..nn.patches import DECODER, ENCODER, Notes, Patches, edits_applied, stacks, stage
from ..nn.transformer import TransformerSeq2Seq
from .catalogue import PATCH_LOGIT, PATCH_METRICS

PATCH_TOKENS = 1 << 14  # rows × positions (source and decoder) of one patched pass
TABLES = ("encoder", "decoder", "encoder_all", "heads")


class PatchingError(InputError):
    """Sources or a step that patching cannot use, or a model it does not apply to."""


def unavailable(model: Seq2Seq) -> str | None:
    """One line saying why ``model`` cannot be patched, or None."""
    if isinstance(model, (TransformerSeq2Seq, DecoderOnlyLM)):
        return None
    if not getattr(model, "decodes", True):
        return "activation patching needs an output to force: an encoder-only model has none"
    return ("activation patching needs a Transformer's residual streams and heads throughout: this model has "
            "recurrent (GRU) layers, whose states are no residual stream")


def check_sources(clean_ids: Sequence[int], corrupt_ids: Sequence[int]) -> None:
    if len(clean_ids) != len(corrupt_ids):
        raise PatchingError(f"the clean and corrupted sources must have the same number of tokens (patching replaces "
                            f"each position by the same position of the other run): the clean source has "
                            f"{len(clean_ids)}, the corrupted {len(corrupt_ids)}")
    if list(clean_ids) == list(corrupt_ids):
        raise PatchingError("the clean and corrupted sources are the same tokens: edit a word of the corrupted one")


def default_step(clean_output: Sequence[int], corrupt_output: Sequence[int]) -> int:
    """The first step where the two outputs differ, else the clean output's last."""
    for step, (a, b) in enumerate(zip(clean_output, corrupt_output)):
        if a != b:
            return step
    return len(clean_output) - 1


def check_step(step: int, output_ids: Sequence[int]) -> int:
    if not 0 <= step < len(output_ids):
        raise PatchingError(f"step {step} is beyond the output: it has steps 0 to {len(output_ids) - 1}")
    return step


@dataclass(frozen=True)
class PatchTables:
    """The patched metric of each probe (``encoder``/``encoder_all`` None for a decoder-only model)."""

    encoder: np.ndarray | None
    decoder: np.ndarray
    encoder_all: np.ndarray | None
    heads: dict[str, np.ndarray] = field(default_factory=dict)

    def mapped(self, function) -> "PatchTables":
        def apply(table):
            return None if table is None else function(table)
        return PatchTables(apply(self.encoder), function(self.decoder), encoder_all=apply(self.encoder_all),
                           heads={kind: function(table) for kind, table in self.heads.items()})

    def named(self) -> dict[str, np.ndarray]:
        """Every table by name: ``encoder``, ``decoder``, ``encoder_all``, ``heads_{kind}``."""
        tables = {"encoder": self.encoder, "decoder": self.decoder, "encoder_all": self.encoder_all}
        tables.update({f"heads_{kind}": table for kind, table in self.heads.items()})
        return {name: table for name, table in tables.items() if table is not None}


@dataclass(frozen=True)
class PatchingResult:
    metric: str  # PATCH_LOGIT or PATCH_NLL
    step: int | None  # the output step the logit difference is read at (None: NLL)
    clean_token: int | None
    corrupt_token: int | None
    clean: float  # the metric of the clean run
    corrupt: float  # of the corrupted run
    exact: PatchTables | None
    atp: PatchTables
    decoder_ids: list[int]  # the ids fed at the decoder's positions
    prompt_len: int | None = None  # a decoder-only model's prompt length (its first positions)

    def normalised(self, tables: PatchTables) -> PatchTables | None:
        """(m − m_corrupt) / (m_clean − m_corrupt), or None where the two runs' metrics are equal."""
        span = self.clean - self.corrupt
        if abs(span) < 1e-9:
            return None
        return tables.mapped(lambda table: (table - self.corrupt) / span)

    @property
    def spearman(self) -> dict[str, float | None]:
        """Spearman's ρ of AtP against exact patching per table, and over all of them (``all``)."""
        if self.exact is None:
            return {}
        exact, atp = self.exact.named(), self.atp.named()
        found = {name: spearman(exact[name], atp[name]) for name in exact}
        found["all"] = spearman(np.concatenate([exact[n].ravel() for n in exact]),
                                np.concatenate([atp[n].ravel() for n in exact]))
        return found


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (ties take their mean rank), or None for fewer than 2 values or a constant."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    if a.size < 2:
        return None
    ranks_a, ranks_b = _ranks(a), _ranks(b)
    if ranks_a.std() == 0 or ranks_b.std() == 0:
        return None
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


# ------------------------------------------------------------------------------------------------ the runs


@dataclass
class _Setup:
    """One forced pass's inputs, ``[1, S]`` and ``[1, n]`` as the model takes them: each run's source (a
    decoder-only model's is empty) and decoder input (its prompt and the output but its last token), the decoder
    position whose prediction is output step 0 (``first``), and the output ids."""

    model: Seq2Seq
    sources: dict[str, Tensor]  # "clean", "corrupt"
    fed: dict[str, Tensor]
    first: int
    output: Tensor
    metric: str
    step: int | None
    corrupt_token: int | None = None

    @property
    def scored(self) -> int:
        """How many decoder positions the metric reads: up to the step's (logit), or all (NLL)."""
        return self.fed["clean"].shape[1] if self.step is None else self.first + self.step + 1

    @property
    def widths(self) -> dict[str, int]:
        return {ENCODER: self.sources["clean"].shape[1], DECODER: self.fed["clean"].shape[1]}

    def logits(self, run: str, edits) -> Tensor:
        """The logits of the ``run``'s pass with ``edits`` (up to the scored positions)."""
        with edits_applied(self.model, edits):
            logits, _ = self.model(self.sources[run], self.fed[run][:, :self.scored], ablation=edits)
        return logits

    def measure(self, logits: Tensor) -> Tensor:
        """The metric of each row of ``logits``."""
        logits = logits if logits.dtype == torch.float64 else logits.float()
        if self.metric == PATCH_LOGIT:
            last = logits[:, -1]
            return last[:, self.output[self.step]] - last[:, self.corrupt_token]
        scored = logits[:, self.first:].log_softmax(-1)  # [rows, T, V]
        return -scored.gather(2, self.output[None, :, None].expand(scored.shape[0], -1, 1))[..., 0].sum(1)


def _setup(model: Seq2Seq, clean_ids: Sequence[int], corrupt_ids: Sequence[int], output_ids: Sequence[int], *,
           metric: str, step: int | None) -> _Setup:
    device = next(model.parameters()).device
    as_ids = lambda ids: torch.tensor([list(ids)], dtype=torch.long, device=device)  # noqa: E731
    output = torch.tensor(list(output_ids), dtype=torch.long, device=device)
    if isinstance(model, DecoderOnlyLM):  # the prompt starts the sequence fed: no source
        return _Setup(model, {"clean": as_ids([]), "corrupt": as_ids([])},
                      {"clean": as_ids(list(clean_ids) + list(output_ids)[:-1]),
                       "corrupt": as_ids(list(corrupt_ids) + list(output_ids)[:-1])},
                      first=len(clean_ids) - 1, output=output, metric=metric, step=step)
    fed = as_ids([model.config.bos_id] + list(output_ids)[:-1])
    return _Setup(model, {"clean": as_ids(clean_ids), "corrupt": as_ids(corrupt_ids)}, {"clean": fed, "corrupt": fed},
                  first=0, output=output, metric=metric, step=step)


def activation_patching(model: Seq2Seq, clean_ids: Sequence[int], corrupt_ids: Sequence[int],
                        output_ids: Sequence[int], *, metric: str = PATCH_LOGIT, step: int | None = None,
                        exact: bool = True) -> PatchingResult:
    """Patch the clean run into the corrupted one everywhere (``exact``) and estimate it by AtP. ``output_ids``: the
    clean output the model is forced on; ``step``: the logit difference's step (default 0; None with ``NLL``)."""
    setup = _checked(model, clean_ids, corrupt_ids, output_ids=output_ids, metric=metric, step=step)
    was_training = model.training
    model.eval()
    try:
        return _patching(setup, exact=exact)
    finally:
        model.train(was_training)


def _checked(model, clean_ids, corrupt_ids, output_ids, *, metric: str, step: int | None) -> _Setup:
    line = unavailable(model)
    if line:
        raise PatchingError(line)
    if metric not in PATCH_METRICS:
        raise PatchingError(f"the patching metric must be one of {', '.join(PATCH_METRICS)}; got {metric!r}")
    check_sources(clean_ids, corrupt_ids)
    if not output_ids:
        raise PatchingError("the clean output is empty: there is nothing to force")
    if metric == PATCH_LOGIT:
        step = check_step(0 if step is None else step, output_ids)
    return _setup(model, clean_ids, corrupt_ids, output_ids=output_ids, metric=metric,
                  step=step if metric == PATCH_LOGIT else None)


def _patching(setup: _Setup, *, exact: bool) -> PatchingResult:
    with torch.no_grad():
        clean_notes = Notes()
        clean_logits = setup.logits("clean", clean_notes)
    with torch.enable_grad():
        corrupt_notes = Notes(gradient=True)
        corrupt_logits = setup.logits("corrupt", corrupt_notes)
        clean_token = None if setup.step is None else int(setup.output[setup.step])
        if setup.metric == PATCH_LOGIT:
            setup.corrupt_token = _rival(corrupt_logits[0, -1], clean_token)
        corrupt_metric = setup.measure(corrupt_logits)[0]
        noted = {**{("residual",) + key: value for key, value in corrupt_notes.residual.items()},
                 **{("heads",) + key: value for key, value in corrupt_notes.heads.items()}}
        names = list(noted)
        grads = torch.autograd.grad(corrupt_metric, [noted[name] for name in names], allow_unused=True)
    corrupt_value = float(corrupt_metric.detach())
    atp = _atp(setup, clean_notes, corrupt_notes, gradients=dict(zip(names, grads)), corrupt_value=corrupt_value)
    exact_tables = None
    if exact:
        with torch.no_grad():
            exact_tables = _exact(setup, clean_notes, corrupt_value, corrupt=corrupt_notes)
    prompt = isinstance(setup.model, DecoderOnlyLM)
    return PatchingResult(setup.metric, setup.step, clean_token, corrupt_token=setup.corrupt_token,
                          clean=float(setup.measure(clean_logits)[0]), corrupt=corrupt_value, exact=exact_tables,
                          atp=atp, decoder_ids=setup.fed["clean"][0].tolist(),
                          prompt_len=setup.first + 1 if prompt else None)


def _rival(logits: Tensor, clean_token: int) -> int:
    """The corrupted run's token: its most likely, or its runner-up where that is the clean token."""
    top = logits.topk(2).indices.tolist()
    return top[1] if top[0] == clean_token else top[0]


def _shape(model: Seq2Seq) -> dict[str, tuple[int, int]]:
    return {kind: shape for kind, shape in model.attention_shape().items() if kind in ("enc_self", "dec_self", "cross")}


def _atp(setup: _Setup, clean: Notes, corrupt: Notes, gradients: dict, corrupt_value: float) -> PatchTables:
    """m_corrupt + (clean − corrupt) · ∂m/∂act for every probe; 0 change where the metric reads nothing of it."""
    def change(kind: str, key: tuple) -> Tensor | None:
        grad = gradients.get((kind,) + key)
        if grad is None:
            return None
        noted_clean = (clean.residual if kind == "residual" else clean.heads)[key]
        noted_corrupt = (corrupt.residual if kind == "residual" else corrupt.heads)[key]
        return (noted_clean - noted_corrupt.detach()) * grad

    residual = {}
    for side, layers in stacks(setup.model).items():
        table = np.zeros((len(layers) + 1, setup.widths[side]))
        for layer in range(len(layers) + 1):
            delta = change("residual", (side, layer))
            if delta is not None:
                row = delta.sum(-1)[0].detach().cpu().numpy()
                table[layer, :row.shape[0]] = row
        residual[side] = table + corrupt_value
    heads = {}
    for kind, (layers, count) in _shape(setup.model).items():
        table = np.zeros((layers, count))
        for layer in range(layers):
            delta = change("heads", (kind, layer))
            if delta is not None:
                table[layer] = delta.sum(dim=(2, 3))[0].detach().cpu().numpy()
        heads[kind] = table + corrupt_value
    encoder = residual.get(ENCODER)
    return PatchTables(encoder, residual[DECODER], heads=heads,
                       encoder_all=None if encoder is None else corrupt_value + (encoder - corrupt_value).sum(1))


@dataclass(frozen=True)
class _Probe:
    """One patched run: a residual position (``position`` None: every position) or a head."""

    table: str  # "encoder", "decoder", "encoder_all" or a head kind
    layer: int
    index: int | None

    def stage(self, layers: dict[str, int]) -> tuple[bool, int] | None:
        if self.table in ("encoder", "encoder_all"):
            return stage(DECODER, -1) if self.layer == layers[ENCODER] else stage(ENCODER, self.layer)
        if self.table == "decoder":
            return None if self.layer == layers[DECODER] else stage(DECODER, self.layer)
        return stage(ENCODER if self.table == "enc_self" else DECODER, self.layer)


def _probes(setup: _Setup) -> list[_Probe]:
    probes = []
    for side, layers in stacks(setup.model).items():
        width = setup.scored if side == DECODER else setup.widths[ENCODER]
        for layer in range(len(layers) + 1):
            probes += [_Probe(side, layer, position) for position in range(width)]
            if side == ENCODER:
                probes.append(_Probe("encoder_all", layer, None))
    for kind, (layers, count) in _shape(setup.model).items():
        probes += [_Probe(kind, layer, head) for layer in range(layers) for head in range(count)]
    return probes


def _exact(setup: _Setup, clean: Notes, corrupt_value: float, *, corrupt: Notes | None = None) -> PatchTables:
    """Every probe's patched metric; a probe whose clean activation equals the corrupted run's (the tokens the two
    sources share, at the embeddings; a decoder-only model's positions before the edit; the decoder's first
    self-attention) changes nothing and is not run."""
    layers = {side: len(stack) for side, stack in stacks(setup.model).items()}
    groups: dict = {}
    for probe in _probes(setup):
        if corrupt is None or not _unchanged(probe, clean, corrupt):
            groups.setdefault(probe.stage(layers), []).append(probe)
    rows = max(1, PATCH_TOKENS // (setup.widths[ENCODER] + setup.scored))
    found = {}
    for start, probes in groups.items():
        for first in range(0, len(probes), rows):
            chunk = probes[first:first + rows]
            patches = _patches(setup, chunk, start=start, clean=clean)
            values = setup.measure(setup.logits("corrupt", patches)).cpu().numpy()
            found.update(zip(chunk, values.tolist()))
    return _tables(setup, found, corrupt_value)


def _unchanged(probe: _Probe, clean: Notes, corrupt: Notes) -> bool:
    """Whether the clean run's activation at ``probe`` is the corrupted run's, to the bit."""
    if probe.table in ("encoder", "decoder", "encoder_all"):
        side = DECODER if probe.table == DECODER else ENCODER
        where = slice(None) if probe.index is None else probe.index
        a, b = clean.residual[(side, probe.layer)][0, where], corrupt.residual[(side, probe.layer)][0, where]
    else:
        a, b = clean.heads[(probe.table, probe.layer)][0, probe.index], corrupt.heads[(probe.table, probe.layer)][
            0, probe.index]
    return torch.equal(a, b.detach())


def _patches(setup: _Setup, probes: list[_Probe], start, clean: Notes) -> Patches:
    copies = len(probes)
    device = setup.output.device
    residual, heads = {}, {}
    for row, probe in enumerate(probes):
        if probe.table in (ENCODER, DECODER, "encoder_all"):
            side = DECODER if probe.table == DECODER else ENCODER
            values = clean.residual[(side, probe.layer)]
            mask, _ = residual.setdefault((side, probe.layer), (torch.zeros(copies, values.shape[1], dtype=torch.bool,
                                                                            device=device), values))
            mask[row, slice(None) if probe.index is None else probe.index] = True
        else:
            values = clean.heads[(probe.table, probe.layer)]
            mask, _ = heads.setdefault((probe.table, probe.layer),
                                       (torch.zeros(copies, values.shape[1], dtype=torch.bool, device=device), values))
            mask[row, probe.index] = True
    return Patches(copies, start, residual=residual, heads=heads)


def _tables(setup: _Setup, found: dict, corrupt_value: float) -> PatchTables:
    residual = {}
    for side, stack in stacks(setup.model).items():
        table = np.full((len(stack) + 1, setup.widths[side]), corrupt_value)  # not run: no change
        for probe, value in found.items():
            if probe.table == side:
                table[probe.layer, probe.index] = value
        residual[side] = table
    heads = {kind: np.full(shape, corrupt_value) for kind, shape in _shape(setup.model).items()}
    encoder_all = np.full(len(stacks(setup.model)[ENCODER]) + 1, corrupt_value) if ENCODER in residual else None
    for probe, value in found.items():
        if probe.table in heads:
            heads[probe.table][probe.layer, probe.index] = value
        elif probe.table == "encoder_all":
            encoder_all[probe.layer] = value
    return PatchTables(residual.get(ENCODER), residual[DECODER], encoder_all=encoder_all, heads=heads)


def patch_one(model: Seq2Seq, clean_ids: Sequence[int], corrupt_ids: Sequence[int], output_ids: Sequence[int], *,
              table: str, layer: int, index: int | None, metric: str = PATCH_LOGIT, step: int | None = 0,
              corrupt_token: int | None = None) -> float:
    """The metric of one patched run alone (a batch of one): what each cell of the exact tables holds. ``table``:
    "encoder", "decoder", "encoder_all" or a head kind; ``index`` the position or head."""
    setup = _checked(model, clean_ids, corrupt_ids, output_ids=output_ids, metric=metric, step=step)
    setup.corrupt_token = corrupt_token
    model.eval()
    with torch.no_grad():
        clean = Notes()
        setup.logits("clean", clean)
        probe = _Probe(table, layer, index)
        layers = {side: len(stack) for side, stack in stacks(model).items()}
        patches = _patches(setup, [probe], start=probe.stage(layers), clean=clean)
        return float(setup.measure(setup.logits("corrupt", patches))[0])


@dataclass(frozen=True)
class PatchRun:
    """A patching of two sources as the CLI and the window run it: the result, the clean output it was forced on and
    the corrupted source's greedy output."""

    result: PatchingResult
    output_ids: list[int]
    corrupt_output_ids: list[int]


def patch_sources(translator: Translator, clean: SourceInput, corrupt: SourceInput, *,
                  target_ids: Sequence[int] | None = None, step: int | None = None,
                  metric: str = PATCH_LOGIT) -> PatchRun:
    """Both sources decoded greedily, the clean output (``target_ids``, else the clean greedy output) and the step
    (``step``, else ``default_step``), then ``activation_patching``."""
    line = unavailable(translator.model)
    if line:
        raise PatchingError(line)
    clean_ids, corrupt_ids = clean.ids, corrupt.ids
    check_sources(clean_ids, corrupt_ids)

    def greedy(source: SourceInput) -> list[int]:
        return finish(translator.decode(source, need_weights=False))[0].token_ids

    corrupt_output = greedy(corrupt)
    output = list(target_ids) if target_ids is not None else greedy(clean)
    if metric == PATCH_LOGIT:
        step = check_step(step, output) if step is not None else default_step(output, corrupt_output)
    result = activation_patching(translator.model, clean_ids, corrupt_ids, output_ids=output, metric=metric,
                                 step=step if metric == PATCH_LOGIT else None)
    return PatchRun(result, output, corrupt_output)
