"""The model's worker thread: every torch call happens here; only plain data leaves it.

The GUI asks by calling the ``load``/``run`` slots through queued signals and learns the outcome from
the signals below. Before it asks, the GUI thread posts the job's id on the worker's ``jobs`` board
(attnviz/state/jobs.py, the session's own): a job that is no longer the newest of its kind, or asks for a model
this thread no longer holds, is skipped, a running decode stops at its next step, and a long job (corpus
statistics, head importance) stops between two units and answers why (:class:`~attnviz.state.jobs.Answer`).

Nothing on this thread processes events from inside a job: a long job runs one unit (a batch, a head) per
queued call and queues its next unit behind what was asked meanwhile, so a run, a model load or a device
move is handled between two units, never inside one.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from models.storage.checkpoint import (
    WEIGHT_DTYPES, load_checkpoint, save_checkpoint, weights_name,
)
from models.errors import AttnvizError, CheckpointError, NumericalWarning, is_out_of_memory
from models.importers import MissingSettingsError, TrustRequiredError, convert, inspect
from models.storage.metadata import is_native
from models.storage.snapshots import is_series, load_series
from models.inference.modes import Mode
from models.inference.translator import SourceInput, Translator, resolve_device

from ..state.contributions import ContributionAnswer, ContributionJob
from ..state.imports import ImportAnswer, ImportQuestion
from ..state.jobs import Answer, JobBoard, LongJob, Stopped, UnitSteps
from ..state.lens_view import LensAnswer, LensJob
from ..state.neuron_view import NeuronAnswer, NeuronJob
from ..state.session import NO_REQUEST, ModelInfo, Request
from .work import (
    CoverageAnswers, corpus_pairs, coverage_steps, describe, fill_run, importance_steps, kept_pass, lens_readings,
    neuron_vectors, prompt_source, prune_steps, reporting_errors, run_labels, trace_dtype,
)

STEP_BATCH_SECONDS = 0.05  # decoding steps reach the window in batches at most this often, not one signal each


class ModelWorker(QObject):
    """Every signal carries the id of the job it answers (see attnviz/state/session.py): the GUI drops stale ones."""

    loaded = Signal(int, object)  # job id, ModelInfo of a newly opened model
    load_failed = Signal(int, str)
    load_progress = Signal(int, int, int)  # job id, weight tensors read, tensors in all
    import_needed = Signal(int, object)  # job id, ImportQuestion: a foreign file needs settings, vocabularies or trust
    device_changed = Signal(int, object)  # job id (0 after an out-of-memory move), ModelInfo on the new device
    weights_changed = Signal(int, object)  # job id, ModelInfo of the same model re-opened in another precision
    labels = Signal(int, object)  # request id, RunLabels: how the run's trace will label its tokens, before its steps
    steps = Signal(int, object)  # request id, list[DecodeStep]: the steps since the last (see STEP_BATCH_SECONDS)
    finished = Signal(int, object)  # request id, list[DecodeResult]
    original = Signal(int, object)  # request id, the best DecodeResult (and trace) with every head on, for runs
    # that switch heads off
    failed = Signal(int, str)
    notice = Signal(int, str)  # request id (0: no run), message
    head_stats_ready = Signal(object)  # Answer: HeadStats (models/trace/head_summary.py), or why not
    importance_progress = Signal(int, int, int)  # job id, heads scored, heads in all
    importance_ready = Signal(object)  # Answer: HeadImportance (models/analysis/importance.py), or why not
    prune_progress = Signal(int, int, int)  # job id, points of the pruning curves scored, points in all
    prune_ready = Signal(object)  # Answer: PruneCurves (models/analysis/importance.py), or why not
    patching_ready = Signal(object)  # PatchAnswer: a patching's tables (attnviz/state/patch_view.py), or why not
    partner_loaded = Signal(int, object)  # job id, ModelInfo of the model compared with (model B)
    partner_failed = Signal(int, str)
    partner_finished = Signal(int, object)  # request id, model B's best DecodeResult or the line saying why not
    contributions_ready = Signal(object)  # ContributionAnswer: one hypothesis' maps, or the line saying why not
    neuron_ready = Signal(object)  # NeuronAnswer: one result's query and key vectors, or the line saying why not
    lens_ready = Signal(object)  # LensAnswer: one result's logit lens and DecoderLens, or the line saying why not
    _next_unit = Signal(str, int)  # a long job's kind and id: its next unit, queued behind what was asked meanwhile

    def __init__(self, jobs: JobBoard | None = None):
        super().__init__()
        self.translator: Translator | None = None
        self.series: dict[int, Path] = {}  # an open snapshot series: step → its checkpoint
        # the snapshots loaded so far (kept: switching back is instant)
        self.series_translators: dict[int, Translator] = {}
        self.partner: Translator | None = None  # model B while comparing: every run runs on it too
        self.weights = "float32"  # the precision every model opens in (a WEIGHT_DTYPES name), set by the window
        self.jobs = jobs or JobBoard()  # the session's: posted to by the GUI thread before it asks; read here
        self.long_jobs: dict[str, LongJob] = {}  # kind → the long job of that kind under way
        # (model, request id, hypothesis, ablation) → its traced pass (Captured)
        self.captured: dict[tuple, object] = {}
        self._next_unit.connect(self._step_long_job, Qt.ConnectionType.QueuedConnection)

    def _stale_model_job(self, job_id: int) -> bool:
        return not self.jobs.is_current("model", job_id)

    @Slot(int, str, str)
    def load(self, job_id: int, path: str, device: str) -> None:
        """Open an attnviz checkpoint, or import a foreign one (asking for what it lacks)."""
        self._stop_overtaken_jobs()
        if self._stale_model_job(job_id):
            return
        with reporting_errors(lambda line: self.load_failed.emit(job_id, line), unexpected=path):
            with warnings.catch_warnings(record=True) as caught:  # NaN weights: said in the window
                warnings.simplefilter("always", NumericalWarning)
                if is_series(path):  # a snapshot folder, recognised before the importers
                    self._open_series(job_id, path, device)
                    return
                checkpoint = (self._read(path, device, progress=self._reporting_load(job_id)) if is_native(path)
                              else self._import_without_asking(job_id, path))
            if checkpoint is None or self._stale_model_job(job_id):
                return
            self._open(job_id, checkpoint, path=path, device=device)
            for warning in caught:
                if issubclass(warning.category, NumericalWarning):
                    self.notice.emit(NO_REQUEST, str(warning.message))

    def _read(self, path: str | Path, device: str | None = None, progress=None):
        """An attnviz checkpoint's weights read in the chosen precision, each tensor straight onto ``device``
        (default: the CPU; a model moved later goes there whole)."""
        return load_checkpoint(path, resolve_device(device) if device else "cpu", dtype=WEIGHT_DTYPES[self.weights],
                               progress=progress)

    def _converted(self, path: str, answer_format: str, **answers):
        """A foreign checkpoint converted in memory (as float32), then kept in the chosen precision."""
        checkpoint = convert(path, answer_format, **answers)
        checkpoint.model.to(WEIGHT_DTYPES[self.weights])
        return checkpoint

    def _reporting_load(self, job_id: int):
        """A ``load_checkpoint`` progress callback that tells the window (a large model takes seconds)."""
        def report(done: int, total: int) -> None:
            self.load_progress.emit(job_id, done, total)
        return report

    @Slot(int, object)
    def import_model(self, job_id: int, answer: ImportAnswer) -> None:
        """Convert a foreign checkpoint with the user's answers; a failure asks again, saying why."""
        self._stop_overtaken_jobs()
        if self._stale_model_job(job_id):
            return
        with reporting_errors(lambda line: self.load_failed.emit(job_id, line), unexpected=answer.path):
            try:
                checkpoint = self._converted(answer.path, answer.format, settings=answer.settings,
                                             src_vocab=answer.src_vocab, tgt_vocab=answer.tgt_vocab,
                                             trust=answer.trust)
                if not self._stale_model_job(job_id):
                    self._open(job_id, checkpoint, path=answer.path, device=answer.device)
            except AttnvizError as failure:  # the user can answer differently: asked again, saying why
                inspection = failure.inspection if isinstance(failure, MissingSettingsError) else answer.inspection
                self.import_needed.emit(job_id, ImportQuestion(answer.path, inspection, problem=str(failure),
                                                               previous=answer))

    def _import_without_asking(self, job_id: int, path: str):
        """The converted checkpoint, or None after asking the GUI for settings, vocabularies or trust."""
        try:
            inspection = inspect(path)
        except TrustRequiredError as failure:
            self.import_needed.emit(job_id, ImportQuestion(path, None, str(failure)))
            return None
        if inspection.missing or inspection.vocabularies:
            self.import_needed.emit(job_id, ImportQuestion(path, inspection, ""))
            return None
        return self._converted(path, inspection.format)

    def _open(self, job_id: int, checkpoint, path: str, device: str) -> None:
        translator = Translator(checkpoint, device or None)
        self.translator, self.series, self.series_translators = translator, {}, {}
        self.captured.clear()
        self.jobs.hold("model", job_id)
        self.loaded.emit(job_id, describe(translator, Path(path)))

    def _open_series(self, job_id: int, path: str, device: str) -> None:
        """A snapshot series (models/storage/snapshots.py): every file checked from its metadata, the last one loaded;
        the others load when a run first asks for them."""
        series = load_series(path)
        last = series.snapshots[-1]
        checkpoint = self._read(last.path)
        if self._stale_model_job(job_id):
            return
        translator = Translator(checkpoint, device or None)
        self.translator = translator
        self.series = {snapshot.step: snapshot.path for snapshot in series.snapshots}
        self.series_translators = {last.step: translator}
        self.captured.clear()
        self.jobs.hold("model", job_id)
        self.loaded.emit(job_id, dataclasses.replace(describe(translator, Path(path)), snapshots=tuple(series.steps)))

    def _description(self) -> ModelInfo:
        """The open model's description; a series keeps its folder and steps."""
        if not self.series:
            return describe(self.translator, self.translator.checkpoint.path)
        folder = next(iter(self.series.values())).parent
        return dataclasses.replace(describe(self.translator, folder), snapshots=tuple(sorted(self.series)))

    def _use_snapshot(self, step: int) -> None:
        """Make the series' snapshot at ``step`` the model that runs (on the current device)."""
        translator = self.series_translators.get(step)
        if translator is None:
            if step not in self.series:
                raise CheckpointError(self.translator.checkpoint.path, f"the series has no snapshot of step {step}")
            translator = Translator(self._read(self.series[step]), self.translator.device)
            self.series_translators[step] = translator
        elif translator.device != self.translator.device:
            translator.to(self.translator.device)
        self.translator = translator
    @Slot(int, str, str)
    def load_partner(self, job_id: int, path: str, device: str) -> None:
        """Open the model to compare with: attnviz checkpoints, and foreign ones that need no answers."""
        if not self.jobs.is_current("partner", job_id):
            return
        with reporting_errors(lambda line: self.partner_failed.emit(job_id, line), unexpected=path):
            checkpoint = self._read(path) if is_native(path) else None
            if checkpoint is None:
                inspection = inspect(path)
                if inspection.missing or inspection.vocabularies:
                    raise CheckpointError(f"{path}: needs answers before it can open; open it, save it as an "
                                          "attnviz checkpoint, and compare with that")
                checkpoint = self._converted(path, inspection.format)
            if not self.jobs.is_current("partner", job_id):
                return
            partner = Translator(checkpoint, device or None)
            self._forget_partner()
            self.partner = partner
            self.jobs.hold("partner", job_id)
            self.partner_loaded.emit(job_id, describe(self.partner, Path(path)))

    @Slot(int)
    def drop_partner(self, job_id: int) -> None:
        """Stop comparing: model B is let go (unless a newer partner is on its way)."""
        if self.jobs.is_current("partner", job_id):
            self._forget_partner()
            self.jobs.hold("partner", 0)

    def _forget_partner(self) -> None:
        """Model B and its traced passes are let go (a pass holds its model)."""
        if self.partner is not None:
            model = id(self.partner.model)
            self.captured = {key: kept for key, kept in self.captured.items() if key[0] != model}
        self.partner = None

    def _decode_partner(self, request: Request) -> None:
        """The same input, mode, target and limits on model B (its own languages, no heads switched off)."""
        from models.inference.decoding import finish

        partner = self.partner
        if partner is None or not self.jobs.is_current("run", request.id):
            return
        run = request.settings
        with reporting_errors(lambda line: self.partner_finished.emit(request.id, line)):  # model A's run stands
            source = prompt_source(partner, run)
            target_ids = partner.target(run.target, unknown="replace") if run.mode == Mode.FORCED else None
            dtype, _ = trace_dtype(partner, request, source=source, target_ids=target_ids)
            result = finish(partner.decode(source, mode=run.mode, beam=run.beam, target_ids=target_ids,
                                           max_len=run.max_len, dtype=dtype))[0]
            self.partner_finished.emit(request.id, result)

    @Slot(str)
    def save(self, path: str) -> None:
        """Write the open model as an attnviz checkpoint (an imported model keeps its answers in it)."""
        if self.translator is None:
            return
        checkpoint = self.translator.checkpoint
        with reporting_errors(lambda line: self.notice.emit(NO_REQUEST, f"Could not save {path}: {line}")):
            save_checkpoint(path, checkpoint.model, source_tokenizer=checkpoint.source_tokenizer,
                            target_tokenizer=checkpoint.target_tokenizer, provenance=checkpoint.provenance)
            self.notice.emit(NO_REQUEST, f"Saved {path}")

    @Slot(int, str)
    def set_device(self, job_id: int, device: str) -> None:
        self._stop_overtaken_jobs()  # a corpus job scores the device it started on: it answers why it stopped
        if self.translator is None or self._stale_model_job(job_id):
            return
        with reporting_errors(lambda line: self.notice.emit(NO_REQUEST, f"Could not move the model to {device}: "
                                                                        f"{line}")):
            self._move_models(device or "auto")
            self.jobs.hold("model", job_id)
            self.device_changed.emit(job_id, self._description())

    @Slot(int, str)
    def set_weights(self, job_id: int, weights: str) -> None:
        """Every model opened from now on keeps its weights as ``weights``; the open one (and model B) is read
        again from its file in that precision, on its device, unless the job is stale (``NO_REQUEST``: only
        the setting). A model converted in memory keeps its precision until it is opened again."""
        self.weights = weights
        self._stop_overtaken_jobs()  # a corpus job's scores come from one precision: it answers why it stopped
        if job_id == NO_REQUEST or self.translator is None or self._stale_model_job(job_id):
            return
        if weights_name(self.translator.model) == weights:
            return
        if not (self.series or is_native(str(self.translator.checkpoint.path))):
            self.notice.emit(NO_REQUEST, f"Weights: {weights} applies from the next open: this model was converted "
                                         "in memory (save it as an attnviz checkpoint to switch at once).")
            return
        def say(line: str) -> None:
            self.notice.emit(NO_REQUEST, f"Could not re-open the model as {weights}: {line}; it still runs as "
                                         f"{weights_name(self.translator.model)}")

        with reporting_errors(say):
            self._reopen_in_precision()
            self.jobs.hold("model", job_id)
            self.weights_changed.emit(job_id, self._description())

    def _reopen_in_precision(self) -> None:
        """The open model (the series' current snapshot) and a native model B, read again as ``self.weights``;
        the other snapshots load again when a run asks for them."""
        translator = self.translator
        fresh = Translator(self._read(translator.checkpoint.path), translator.device)
        self.captured.clear()  # a pass holds the model it ran
        if self.series:
            step = next(step for step, kept in self.series_translators.items() if kept is translator)
            self.series_translators = {step: fresh}
        self.translator = fresh
        partner = self.partner
        if partner is not None and is_native(str(partner.checkpoint.path)):
            self.partner = Translator(self._read(partner.checkpoint.path), partner.device)

    @Slot(object)
    def run(self, request: Request) -> None:
        self.captured = {key: kept for key, kept in self.captured.items() if key[1] >= request.id}
        if self.translator is None or not self.jobs.is_current("run", request.id):
            return
        with reporting_errors(lambda line: self.failed.emit(request.id, line)):
            try:
                self._decode(request)
            except RuntimeError as failure:
                if not is_out_of_memory(failure) or self.translator.device.type == "cpu":
                    raise
                self._fall_back_to_the_cpu(request)
                self._decode(request)

    @Slot(object)
    def patching(self, job) -> None:
        """The Patching pane's tables of two sources (attnviz/state/patch_view.py: a ``PatchJob``)."""
        from ..state.patch_view import PatchAnswer
        from .work import patch_report

        self._pane_job("patching", job, PatchAnswer, compute=lambda: patch_report(self.translator, job))

    @Slot(object)
    def contributions(self, job: ContributionJob) -> None:
        """A contributions method for each of the job's hypotheses, one answer each; stops (saying why) between
        two hypotheses once a newer job of its kind, run or model exists; a coverage job is a long job, stopped
        between two of its units (work.py ``coverage_steps``)."""
        if job.coverage:
            answers = CoverageAnswers(job, self.contributions_ready.emit)
            return self._start_long_job("coverage", job.id, answer=answers.answer, report=answers.report,
                                        steps=lambda: coverage_steps(self.translator, job, self._captured_pass))
        for hypothesis, output_ids in zip(job.hypotheses, job.outputs):
            translator = self.partner if job.partner else self.translator
            stopped = self.jobs.overtaken(job.kind, job.id)
            if stopped is not None or translator is None:
                self.contributions_ready.emit(ContributionAnswer(
                    job, hypothesis=hypothesis, stopped=stopped or Stopped("no model is open")))
                return
            answers = []
            with reporting_errors(lambda line, h=hypothesis: answers.append(ContributionAnswer(job, error=line,
                                                                                                hypothesis=h)),
                                  unexpected=f"computing {job.method}"):
                answers.append(self._contribution(translator, job, hypothesis=hypothesis, output_ids=output_ids))
            self.contributions_ready.emit(answers[-1])

    def _contribution(self, translator: Translator, job: ContributionJob, *, hypothesis: int,
                      output_ids: tuple[int, ...]) -> ContributionAnswer:
        from models.analysis.contributions import CONTRIBUTION_METHODS, source_coverage, traceable
        from models.analysis.methods import contributions

        if not job.partner:
            translator.set_languages(job.src_lang or None, job.tgt_lang or None)
        src_ids = prompt_source(translator, job).ids
        captured = None
        if CONTRIBUTION_METHODS[job.method].from_forward and traceable(translator.model):
            captured = self._captured_pass(translator, (job.request_id, hypothesis, job.ablation), src_ids=src_ids,
                                           output_ids=output_ids)
        maps = contributions(job.method, translator.model, src_ids, output_ids=output_ids, captured=captured,
                             ablation=job.ablation, contrast=job.contrast)
        return ContributionAnswer(job, maps, hypothesis=hypothesis,
                                  coverage=source_coverage(maps) if job.coverage else None)

    def _captured_pass(self, translator: Translator, result: tuple, *, src_ids, output_ids):
        return kept_pass(self.captured, translator, result, src_ids=src_ids, output_ids=output_ids)

    @Slot(object)
    def neuron(self, job: NeuronJob) -> None:
        """The Neuron pane's vectors of one result (attnviz/state/neuron_view.py)."""
        self._pane_job("neuron", job, NeuronAnswer, compute=lambda: neuron_vectors(self.translator, job))

    @Slot(object)
    def lens(self, job: LensJob) -> None:
        """The Lens pane's readings of one result (attnviz/state/lens_view.py), from its kept traced pass."""
        self._pane_job("lens", job, LensAnswer,
                       compute=lambda: lens_readings(self.translator, job, self._captured_pass))

    def _pane_job(self, kind: str, job, answer: type[Answer], *, compute: Callable[[], object]) -> None:
        """A pane's job of one result, answered on ``{kind}_ready`` unless a newer job of its kind overtook it: what
        ``compute()`` gives, or the line saying why not."""
        ready = getattr(self, f"{kind}_ready")
        stopped = self.jobs.overtaken(kind, job.id)
        if stopped is not None or self.translator is None:
            ready.emit(answer(job, stopped=stopped or Stopped("no model is open")))
            return
        answers = []
        with reporting_errors(lambda line: answers.append(answer(job, error=line)), unexpected=f"{kind} view"):
            answers.append(answer(job, compute()))
        ready.emit(answers[-1])

    @Slot(int, object)
    def head_stats(self, job_id: int, corpus: str | list[tuple[str, str]]) -> None:
        """Statistics of every head over a corpus (a PAIRS.tsv path, or the pairs themselves: a demo's own), one
        batch per unit; stops once a newer statistics or model job exists."""
        from models.analysis.head_stats import corpus_head_stats_steps

        self._start_long_job("stats", job_id, answer=self.head_stats_ready.emit,
                             steps=lambda: corpus_head_stats_steps(self.translator, corpus_pairs(corpus)))

    @Slot(int, object, int, str)
    def head_importance(self, job_id: int, corpus: str | list[tuple[str, str]], limit: int, method: str) -> None:
        """Each head's importance over the first ``limit`` pairs of a corpus (a PAIRS.tsv path, or the pairs
        themselves) by ``method`` (:func:`importance_steps`); stops between two units once a newer importance
        or model job exists (a device move is a model job), or the window closes. The job keeps the
        translator it started with."""
        self._start_long_job(
            "importance", job_id, answer=self.importance_ready.emit,
            report=lambda job, done, total, _head: self.importance_progress.emit(job, done, total),
            steps=lambda: importance_steps(self.translator, corpus_pairs(corpus)[:limit], method))

    @Slot(int, object, object, int)
    def prune_curve(self, job_id: int, corpus: str | list[tuple[str, str]], importance, seed: int) -> None:
        """The pruning curves of ``importance`` on the pairs of ``corpus`` it scored (its first ``examples``;
        :func:`prune_steps`); stops between two units once a newer curve, importance or model job exists, or
        the window closes."""
        self._start_long_job(
            "prune", job_id, answer=self.prune_ready.emit,
            report=lambda job, done, total, _order: self.prune_progress.emit(job, done, total),
            steps=lambda: prune_steps(self.translator, corpus_pairs(corpus)[:importance.examples], importance,
                                      seed=seed))

    def _start_long_job(self, kind: str, job_id: int, *, steps, answer, report=None) -> None:
        """Queue the first unit of the generator ``steps()`` makes (see :class:`UnitSteps`), unless the job is
        already overtaken (it answers why) or no model is open. The generator holds the translator it started
        with, and runs only when the worker thread steps it."""
        self._stop_overtaken_jobs()
        stopped = self.jobs.overtaken(kind, job_id)
        if stopped is not None or self.translator is None:
            answer(Answer(job_id, stopped=stopped or Stopped("no model is open")))
            return
        self.long_jobs[kind] = LongJob(kind, job_id, UnitSteps(steps), answer=answer, report=report)
        self._next_unit.emit(kind, job_id)

    @Slot(str, int)
    def _step_long_job(self, kind: str, job_id: int) -> None:
        """One unit of a long job, then the next one queued: what was asked meanwhile comes first."""
        job = self.long_jobs.get(kind)
        if job is None or job.id != job_id:
            return
        stopped = self.jobs.overtaken(kind, job_id)
        if stopped is not None:
            self._end_long_job(job, Answer(job_id, stopped=stopped))
            return
        unit = None
        with reporting_errors(lambda line: self._end_long_job(job, Answer(job_id, error=line))):  # out of memory too
            unit = job.units.step()
        if unit is None:
            return
        if unit.done:
            self._end_long_job(job, Answer(job_id, unit.value))
            return
        if job.report is not None:
            job.report(job_id, *unit.value)
        self._next_unit.emit(kind, job_id)

    def _end_long_job(self, job: LongJob, answer: Answer) -> None:
        job.units.stop()
        if self.long_jobs.get(job.kind) is job:
            del self.long_jobs[job.kind]
        job.answer(answer)

    def _stop_overtaken_jobs(self) -> None:
        """Before a model job changes the model: the long jobs it overtakes answer why they stopped."""
        for job in list(self.long_jobs.values()):
            stopped = self.jobs.overtaken(job.kind, job.id)
            if stopped is not None:
                self._end_long_job(job, Answer(job.id, stopped=stopped))

    def end_long_jobs(self) -> None:
        """The window is closing and this thread has ended: close the jobs' generators, answering no one."""
        for job in self.long_jobs.values():
            job.units.stop()
        self.long_jobs.clear()

    def _move_models(self, device: str) -> None:
        """The open model and, while comparing, model B: both always run on the same device."""
        self.translator.to(device)
        if self.partner is not None:
            self.partner.to(self.translator.device)

    def _fall_back_to_the_cpu(self, request: Request) -> None:
        for job in list(self.long_jobs.values()):  # they started on the GPU: scores stay on one device
            self._end_long_job(job, Answer(job.id, stopped=Stopped("the GPU ran out of memory; the model now runs on "
                                                                   "the CPU")))
        self._move_models("cpu")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.notice.emit(request.id, "The GPU ran out of memory; the model now runs on the CPU.")
        self.device_changed.emit(NO_REQUEST, self._description())

    def _fill(self, request: Request, translator: Translator, source: SourceInput) -> None:
        """An encoder-only model's run: its answers (work.py fill_run) go out as a decoding run's."""
        answers = fill_run(translator, source, request.ablation, partner=self.partner, text=request.settings.text)
        for signal, value in answers:
            getattr(self, signal).emit(request.id, value)

    def _decode(self, request: Request) -> None:
        if self.series and request.snapshot is not None:
            self._use_snapshot(request.snapshot)
        translator, run = self.translator, request.settings
        translator.set_languages(run.src_lang or None, run.tgt_lang or None)
        source = prompt_source(translator, run)
        if source.unknown:
            notice = source.unknown_notice()
            self.notice.emit(request.id, f"{notice[0].upper()}{notice[1:]}, shown as ⟨…⟩.")
        if source.truncated:
            self.notice.emit(request.id, f"The text {source.truncation_notice(translator.config.max_len)}.")
        if not translator.model.decodes:  # an encoder-only model fills its masks
            return self._fill(request, translator, source)
        target_ids = translator.target(run.target, unknown="replace") if run.mode == Mode.FORCED else None
        dtype, size = trace_dtype(translator, request, source=source, target_ids=target_ids)
        if dtype == np.float16:
            self.notice.emit(request.id, f"This run's attention is kept at half precision to save memory (up to "
                                         f"{size / 2**20:,.0f} MB at full precision): weights are read to about "
                                         "three digits, shown with ≈. `attnviz export` computes them at full "
                                         "precision.")
        if request.ablation:  # the same input with every head on, shown beside the ablated output
            from models.inference.decoding import finish

            request.ablation.validate(translator.model.attention_shape())  # before decoding twice
            original = finish(translator.decode(source, mode=run.mode, beam=run.beam, target_ids=target_ids,
                                                max_len=run.max_len, dtype=dtype))[0]
            self.original.emit(request.id, original)
        steps = translator.decode(source, mode=run.mode, beam=run.beam, target_ids=target_ids,
                                  max_len=run.max_len, ablation=request.ablation, dtype=dtype)
        self.labels.emit(request.id, run_labels(translator, source))
        pending, sent = [], time.monotonic()
        while True:
            if not self.jobs.is_current("run", request.id):
                steps.close()
                return
            with warnings.catch_warnings(record=True) as caught:  # NaN from the model: said in the window
                warnings.simplefilter("always", NumericalWarning)
                try:
                    step = next(steps)
                except StopIteration as stop:
                    step, results = None, stop.value
            for warning in caught:
                if issubclass(warning.category, NumericalWarning):
                    self.notice.emit(request.id, str(warning.message)[:1].upper() + str(warning.message)[1:] + ".")
            if step is None:
                if pending:
                    self.steps.emit(request.id, pending)
                self._decode_partner(request)  # before ``finished``: the window draws both at once
                self.finished.emit(request.id, results)
                return
            pending.append(step)
            if time.monotonic() - sent >= STEP_BATCH_SECONDS:
                self.steps.emit(request.id, pending)
                pending, sent = [], time.monotonic()


class WorkerThread:
    """Owns the QThread and the worker living in it; ``close`` aborts, quits and waits."""

    live: "weakref.WeakSet[WorkerThread]" = weakref.WeakSet()  # lets tests prove no thread outlives its window

    def __init__(self, jobs: JobBoard | None = None):
        self.thread = QThread()
        self.thread.setObjectName("attnviz-model")
        self.worker = ModelWorker(jobs)
        self.worker.moveToThread(self.thread)
        self.thread.start()
        WorkerThread.live.add(self)

    def close(self) -> None:
        self.worker.jobs.close()  # a running decode stops at its next step, a long job before its next unit
        self.thread.quit()
        self.thread.wait()
        self.worker.end_long_jobs()
