"""Contributions beyond attention weights in the window: the selector bar's Show choice (what the model
offers), the worker's contribution jobs (newest wins; the traced pass of a result is kept there, so switching
among the forward methods re-runs nothing), the maps of every result and hypothesis kept here while its run is
the newest, the hallucination signal (ALTI+'s source coverage) of every hypothesis of a Transformer's run, and
the token the contrastive methods contrast with (attnviz/state/contrast_view.py: a click on the decoding panel's
top-k chart or on a sibling in the beam tree).

What the views show of the maps is computed by attnviz/state/contributions.py; the viewing feature reads
:meth:`Contributions.maps_for` (its ``ShownMaps``) to know what to draw, and redraws when ``shown_changed`` or
``coverage_changed`` says so: this feature reaches no other feature. The features that accept a model and a run
say when the session holds a new one (:meth:`model_changed` from opening, :meth:`run_shown` from viewing), so its
maps always follow the session's model and run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from models.analysis.catalogue import ALTI
from models.nn.ablation import NO_ABLATION

from ...state import contrast_view, viewmodel
from ...state.contributions import (
    ORIGINAL, WEIGHTS, ContributionAnswer, ContributionJob, ShowChoice, choice_named, coverage_text, job_kind,
    restored_choice,
)
from ...state.session import ModelInfo, Session
from ..layout import Views

if TYPE_CHECKING:
    from ..worker import ModelWorker

COVERAGE_METHOD = ALTI


class Contributions(QObject):
    requested = Signal(object)  # ContributionJob → worker
    shown_changed = Signal()  # another method is shown, or the shown maps came: the views draw them again
    coverage_changed = Signal()  # a hypothesis' source coverage came: the output line and the beam say it
    step_chosen = Signal(int)  # a contrast picked at another step (a beam sibling's): viewing shows that step

    def __init__(self, session: Session, views: Views, worker: ModelWorker, parent: QObject | None = None):
        super().__init__(parent)
        self.session, self.views = session, views
        self.method = WEIGHTS
        self.choices: tuple[ShowChoice, ...] = ()
        # (request id, hypothesis or ORIGINAL, method, model B's) → maps or a line
        self.answers: dict[tuple, object] = {}
        self.asked: set[tuple] = set()  # keys asked for and not answered yet
        self.coverage: dict[int, str] = {}  # hypothesis of the newest run (or ORIGINAL) → its source contribution
        self.coverage_next = None  # makes the original's job, once the run's hypotheses have theirs
        self.contrast: contrast_view.ContrastWith | None = None  # y′ of the contrastive methods, or None
        self.requested.connect(worker.contributions)
        worker.contributions_ready.connect(self._on_answer)
        views.selector.show_changed.connect(self.choose)
        views.decoding.top_k_clicked.connect(self.contrast_with_top_k)
        views.decoding.beam_node_clicked.connect(self.contrast_with_beam_node)

    @property
    def choice(self) -> ShowChoice | None:
        """The method shown, or None for the attention weights."""
        return None if self.method == WEIGHTS else choice_named(self.choices, self.method)

    # --- the model and the choice ---------------------------------------------------------------------
    def model_changed(self, job_id: int, info: ModelInfo) -> None:
        """A model opened, or its weights changed (the opening feature says so, once the session holds it): its
        Show choices; the maps of the model before go."""
        if not self.session.is_current_model_job(job_id) and self.session.model is not info:
            return
        self.choices = info.show_choices
        current = choice_named(self.choices, self.method)
        if current is None or current.reason:
            self.method = WEIGHTS  # the new model cannot give it: its maps are the weights again
        self.views.selector.set_show_choices(self.choices, self.method)
        self.answers, self.asked, self.coverage, self.coverage_next = {}, set(), {}, None

    def restore(self, name: str, info: ModelInfo) -> str:
        """A reopened session's Show choice on its newly opened model ``info``; the line saying why the attention
        weights are shown instead ("" when shown as saved)."""
        self.choices = info.show_choices
        self.method, problem = restored_choice(self.choices, name)
        self.views.selector.set_show_choices(self.choices, self.method)
        return problem

    def choose(self, name: str) -> None:
        """Show ``name``'s maps (``weights``: the attention weights); a method the model cannot give says why
        in place of the heatmap, and the run stays."""
        self.method = name or WEIGHTS
        if self.views.selector.show_name() != self.method:
            self.views.selector.set_show_name(self.method)
            return  # the box's signal comes back here
        self.shown_changed.emit()

    # --- the contrast ------------------------------------------------------------------------------------
    def contrast_with_top_k(self, label: str) -> None:
        """A click on the step's top-k entry ``label``: contrast with it (the chosen token: no contrast)."""
        session = self.session
        if session.result is None or session.fills or session.result is session.original:
            return
        hypothesis = session.selection.hypothesis
        self._set_contrast(contrast_view.from_top_k(session.request.id, hypothesis, session.result,
                                                    step=session.selection.step, label=label))

    def contrast_with_beam_node(self, node: int) -> None:
        """A click on a node of the beam tree: contrast with it where it is a sibling of the shown hypothesis', and
        show its step."""
        session = self.session
        if session.result is None or not session.steps or session.result is session.original:
            return
        beam = viewmodel.beam_state(session.results, session.steps)
        hypothesis = min(session.selection.hypothesis, len(session.results) - 1)
        found = contrast_view.from_beam_node(session.request.id, hypothesis, beam, node=node, result=session.result)
        if found is not None or self.contrast is not None:
            self._set_contrast(found)
        if found is not None and found.step != session.selection.step:
            self.step_chosen.emit(found.step)  # the scrubber moves to the sibling's step

    def _set_contrast(self, contrast: contrast_view.ContrastWith | None) -> None:
        self.contrast = contrast
        self.views.status_bar.showMessage(contrast.line() if contrast is not None else "Contrast cleared", 8000)
        choice = self.choice
        if choice is not None and choice.contrastive:
            self.shown_changed.emit()

    def restore_contrast(self, saved: contrast_view.ContrastWith | None) -> None:
        """A reopened session's contrast, on its first run (just arrived; its views follow)."""
        session = self.session
        if saved is None or not session.results or saved.hypothesis >= len(session.results):
            return
        self.contrast = contrast_view.restored(saved, session.request.id, session.results[saved.hypothesis])

    def saved_contrast(self) -> contrast_view.ContrastWith | None:
        """The contrast a session file keeps: the one picked on the run shown."""
        contrast = self.contrast
        return contrast if contrast is not None and contrast.request_id == self.session.request.id else None

    def contrast_label(self) -> str:
        """The label of the token the shown maps contrast with ("" when they do not)."""
        return self.contrast.label if self._shown_contrast(False) is not None else ""

    def _shown_contrast(self, partner: bool) -> tuple[int | None, ...] | None:
        """The contrast the shown maps are computed with: the chosen y′ where the method is contrastive and the
        result shown is the one it was picked on."""
        choice, contrast, session = self.choice, self.contrast, self.session
        if partner or contrast is None or choice is None or not choice.contrastive or session.result is None:
            return None
        if not contrast.applies(session.request.id, session.selection.hypothesis):
            return None
        return contrast.per_step(len(session.result.token_ids))

    # --- the maps ---------------------------------------------------------------------------------------
    def maps_for(self, *, partner: bool = False) -> object | str | None:
        """The shown result's maps of the chosen method (model B's with ``partner``), the line saying why there
        are none (yet), or None while the attention weights are shown."""
        choice = self.choice
        if self.method == WEIGHTS:
            return None
        if choice is None or choice.reason:
            return choice.reason if choice is not None else f"this model offers no {self.method}"
        key = self._shown_key(partner)
        if key is None:
            return self.session.partner_missing
        if key not in self.answers:
            self._ask(key)
            return f"Computing {choice.label}…"
        return self.answers[key]

    def computing(self) -> bool:
        """The shown maps were asked for and have not come yet."""
        return self.method != WEIGHTS and bool(self.session.results) and self._shown_key(False) in self.asked

    def _shown_key(self, partner: bool) -> tuple | None:
        session = self.session
        request, hypothesis = session.request, session.selection.hypothesis
        if partner:
            return (request.id, 0, self.method, True, None) if session.partner_result is not None else None
        if session.original is not None and session.result is session.original:  # the run with every head on
            return request.id, ORIGINAL, self.method, False, None
        return request.id, min(hypothesis, len(session.results) - 1), self.method, False, self._shown_contrast(False)

    def _ask(self, key: tuple) -> None:
        if key in self.asked:
            return
        self.asked.add(key)
        _, hypothesis, method, partner, contrast = key
        session = self.session
        result = (session.partner_result if partner else session.original if hypothesis == ORIGINAL
                  else session.results[hypothesis])
        self.requested.emit(self._job(method, hypotheses=(hypothesis,), outputs=(tuple(result.token_ids),),
                                      partner=partner, contrast=contrast))

    def _job(self, method: str, *, hypotheses: tuple[int, ...], outputs: tuple, coverage: bool = False,
             partner: bool = False, contrast: tuple | None = None) -> ContributionJob:
        request = self.session.request
        run = request.settings
        # the maps of the model as it ran: model B and the run with every head on ran with none off
        ablation = NO_ABLATION if partner or ORIGINAL in hypotheses else request.ablation
        # posted as a job of the open models: once the worker holds another one, it is stale
        job_id = self.session.new_job(job_kind(coverage=coverage, partner=partner), of_models=True)
        return ContributionJob(job_id, request.id, method, text=run.text, hypotheses=hypotheses,
                               outputs=outputs, src_lang=run.src_lang, tgt_lang=run.tgt_lang, chat=run.chat,
                               coverage=coverage, partner=partner, ablation=ablation, contrast=contrast)

    def run_shown(self, request_id: int) -> None:
        """A new run is shown (the viewing feature says so): the older runs' maps go; a Transformer's hypotheses get
        their source coverage (ALTI+)."""
        if not self.session.is_current(request_id) or not self.session.results:
            return
        if self.contrast is not None and self.contrast.request_id != request_id:
            self.contrast = None  # picked on an older run
        self.answers = {key: found for key, found in self.answers.items() if key[0] == request_id}
        self.asked = {key for key in self.asked if key[0] == request_id}
        self.coverage, self.coverage_next = {}, None
        coverage = choice_named(self.choices, COVERAGE_METHOD)
        if coverage is None or coverage.reason or self.session.fills:  # a fill has no source to cover
            return
        results, original = self.session.results, self.session.original
        if original is not None:  # a job of its own (every head on); after the run's, which a second would stop
            outputs = (tuple(original.token_ids),)
            self.coverage_next = lambda: self._job(COVERAGE_METHOD, hypotheses=(ORIGINAL,), outputs=outputs,
                                                   coverage=True)
        self.requested.emit(self._job(COVERAGE_METHOD, hypotheses=tuple(range(len(results))),
                                      outputs=tuple(tuple(result.token_ids) for result in results), coverage=True))

    def _coverage_answered(self, answer: ContributionAnswer) -> None:
        """A hypothesis' source coverage came (or its line): said on the output line; after the run's last
        hypothesis, the original's job goes."""
        if answer.coverage is not None:
            source_tokens = self.session.results[0].trace.src_tokens  # every hypothesis reads the same source
            self.coverage[answer.hypothesis] = coverage_text(answer.coverage, source_tokens)
            self.coverage_changed.emit()
        queued = self.coverage_next
        if queued is not None and answer.hypothesis == answer.job.hypotheses[-1] and not answer.stopped:
            self.coverage_next = None
            self.requested.emit(queued())

    def _on_answer(self, answer: ContributionAnswer) -> None:
        if not self.session.is_current(answer.job.request_id):
            return
        key = answer.key
        self.asked.discard(key)
        if answer.job.coverage:
            self._coverage_answered(answer)
        if answer.stopped:
            return  # overtaken: asked again when it is shown again
        self.answers[key] = answer.value if answer.value is not None else answer.error
        if key == self._shown_key(key[3]) and key[2] == self.method:
            self.shown_changed.emit()
