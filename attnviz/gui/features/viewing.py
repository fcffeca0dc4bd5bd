"""Running a sentence and showing it: the input bar's runs on the worker, what each view shows of the newest run
(computed by attnviz/state/viewmodel.py), the selection (kind, layer, head, step, hypothesis) and a snapshot
series' training step.

Viewing reaches no other feature but the shown contributions method, read through ``ShownMaps``; the features that
act on a run (opening, ablation, …) reach it, and ``run_arrived`` tells them a run's results were accepted."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal, SignalInstance

from models.inference.modes import Mode

from ...state import compare_view, contributions, fill_view, grid_summary, prompt_view, viewmodel
from ...state.contributions import ShowChoice
from ...state.progress import decoding_progress
from ...state.session import Session
from ..layout import Views

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from ..worker import ModelWorker

NOTHING_RUN = "The attention appears here once a sentence has run."
# A streamed heatmap is redrawn at most this often: each redraw holds the GIL the decoding thread needs, and
# redrawn at every steps batch (20 a second) it made a tc-big run finish 1.5-2.5 s later.
STREAMED_REDRAW_SECONDS = 0.5
STREAMED_REDRAW_SHARE = 4  # and no sooner than this many times as long as the last redraw took (a long prompt's map
# takes seconds to draw: the GUI thread's share of the run stays about a quarter)
NO_ATTENTION = "This model has no attention (a GRU decoder without attention): only its outputs are shown."


class ShownMaps(Protocol):
    """What the views draw in place of the attention weights (attnviz/gui/features/contributions.py): the method
    shown, its maps, and the source coverage of each hypothesis; its two signals say when to draw again."""

    shown_changed: SignalInstance  # the method shown changed, or its maps came
    coverage_changed: SignalInstance  # a hypothesis' source coverage came
    step_chosen: SignalInstance  # a contrast picked at another step (a beam sibling's): that step is shown

    @property
    def choice(self) -> ShowChoice | None: ...  # None: the attention weights

    @property
    def coverage(self) -> dict[int, str]: ...

    def maps_for(self, *, partner: bool = False) -> object | str | None: ...

    def contrast_label(self) -> str: ...  # the token the shown maps contrast with, "" when none

    @property
    def contrast(self): ...  # the contrast chosen (attnviz/state/contrast_view.py ``ContrastWith``), or None

    def computing(self) -> bool: ...

    def run_shown(self, request_id: int) -> None: ...  # the newest run is on screen: its maps and coverage follow


class NeuronPane(Protocol):
    """The Neuron pane's feature (attnviz/gui/features/neuron.py): drawn again after every redraw of the run."""

    def refresh(self) -> None: ...

    def clear(self, message: str) -> None: ...


class LensPane(NeuronPane, Protocol):
    """The Lens pane's feature (attnviz/gui/features/lens.py): drawn again after every redraw; a click on a step's
    column asks for that step (``step_chosen``)."""

    step_chosen: SignalInstance


class Viewing(QObject):
    run_requested = Signal(object)  # Request → worker
    # A run's results were accepted, before the views show it: a reopened session's selection is set, the ablation
    # bar counts a whole layer's heads (connected slots run at once, in the order they were connected).
    run_arrived = Signal()

    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, contributions: ShownMaps,
                 neuron: NeuronPane, lens: LensPane, parent: QObject | None = None):
        super().__init__(parent)
        self.session, self.views, self.contributions, self.neuron = session, views, contributions, neuron
        self.panes = (neuron, lens)  # the panes of the shown result, drawn again after every redraw
        lens.step_chosen.connect(lambda step: self.select(step=step))
        self.shows_run = False  # the views show a finished run (not a message, nor a run still streaming in)
        self.streamed_at: float | None = None  # when the streaming run's heatmap may be drawn again
        self.run_requested.connect(worker.run)
        worker.labels.connect(self._on_labels)
        worker.steps.connect(self._on_steps)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.notice.connect(self._on_notice)
        views.input_bar.run_requested.connect(self.run)
        contributions.shown_changed.connect(lambda: self.refresh(rebuild=True))
        contributions.coverage_changed.connect(self.show_coverage)
        contributions.step_chosen.connect(lambda step: self.select(step=step))
        selector = views.selector
        selector.changed.connect(self._on_selector_changed)
        selector.colormap_changed.connect(self.set_colormap)
        selector.masks_toggled.connect(views.focus.set_masks_visible)
        selector.masks_toggled.connect(views.compare_view.set_masks_visible)
        selector.options_changed.connect(self._on_options_changed)
        views.head_grid.clicked.connect(lambda _, head: self.select(head=head))
        views.model_view.clicked.connect(lambda layer, head: self.select(layer=layer, head=head))
        views.model_view.summary_toggled.connect(self._on_summary_toggled)
        views.snapshot_bar.index_chosen.connect(self.choose_snapshot)
        views.decoding.step_changed.connect(lambda step: self.select(step=step))
        views.decoding.hypothesis_chosen.connect(self.choose_hypothesis)
        for view in (views.focus, views.compare_view):
            view.hovered.connect(lambda text: views.status_bar.showMessage(text))
        views.focus.mask_requested.connect(self.mask_token)

    # --- running --------------------------------------------------------------------------------------
    def run(self) -> None:
        bar = self.views.input_bar
        settings = bar.run_settings()
        if self.session.model is None:
            return
        if not settings.text.strip():
            bar.show_message("Type a sentence to see its attention.")
            return
        if settings.mode == Mode.FORCED and not settings.target.strip():
            bar.ask_for_target()
            return
        request = self.session.new_request(settings)  # posted: the running decode stops at its next step
        if not self.shows_run:  # the streamed rows of the run this one replaces are not left looking like its
            self.views.focus.clear(NOTHING_RUN)
        self.streamed_at = None
        bar.set_busy(True)
        self.run_requested.emit(request)

    def run_text(self, text: str) -> None:
        self.views.input_bar.set_text(text)
        self.run()

    def mask_token(self, position: int) -> None:
        """Run the sentence again with its token at ``position`` masked (an encoder-only model's "Mask this
        token")."""
        session = self.session
        if session.trace is None or session.model is None or not session.model.mask_token:
            return
        labels = session.trace.src_tokens
        text = fill_view.masked_text(session.request.settings.text, labels, position, mask=session.model.mask_token)
        if text is None:
            self.views.status_bar.showMessage(f"‘{labels[position]}’ is not spelt in the sentence: nothing to mask",
                                              8000)
            return
        self.run_text(text)

    def _on_labels(self, request_id: int, labels) -> None:
        self.session.accept_labels(request_id, labels)

    def _on_steps(self, request_id: int, steps: list) -> None:
        if self.session.accept_steps(request_id, steps):
            self.views.status_bar.showMessage(decoding_progress(steps[-1]))
            self._show_streamed()

    def _show_streamed(self) -> None:
        """While no run is on screen (a model just opened), the focus heatmap grows with the steps instead of
        waiting for the whole run. A run replacing one on screen, a comparison, a contributions method or
        heads switched off wait for the finished run: the views stay one run's."""
        session = self.session
        if self.shows_run or session.comparing or session.request.ablation or self.contributions.choice:
            return
        now = time.monotonic()
        if self.streamed_at is not None and now < self.streamed_at:
            return
        state = viewmodel.streamed_heatmap(session.run_labels, session.steps, session.selection,
                                           options=session.options)
        if state is not None:
            self.views.focus.show_heatmap(state)
            took = time.monotonic() - now
            self.streamed_at = now + max(STREAMED_REDRAW_SECONDS, STREAMED_REDRAW_SHARE * took)

    def _on_finished(self, request_id: int, results) -> None:
        if not self.session.accept_results(request_id, results):
            return
        self.views.input_bar.set_busy(False)
        self.views.status_bar.clearMessage()
        self.run_arrived.emit()
        self.show_output()
        self.show_run()
        self.contributions.run_shown(request_id)

    def _on_failed(self, request_id: int, message: str) -> None:
        if self.session.is_current(request_id):
            if not self.shows_run:  # the rows of a run that failed part way are not left looking like one
                self.views.focus.clear(NOTHING_RUN)
            self.views.input_bar.set_busy(False)
            self.views.show_error(message)

    def _on_notice(self, request_id: int, message: str) -> None:
        if not self.session.accept_notice(request_id, message):
            return
        self.views.status_bar.showMessage(message, 8000)
        self.show_output()

    def show_run(self) -> None:
        """Every view of the newest run (the beam's tree too)."""
        if not self.session.results:
            return
        self._show_beam()
        self.refresh(rebuild=True)

    def _show_beam(self) -> None:
        beam = self.session.request.settings.mode == Mode.BEAM
        coverage = self.contributions.coverage
        self.views.decoding.show_beam(viewmodel.beam_state(self.session.results, self.session.steps,
                                                            coverage=coverage) if beam else None,
                                       self.session.selection.hypothesis)

    def show_coverage(self) -> None:
        """The hallucination signal arrived for a hypothesis: the output line and the beam's list say it."""
        self.show_output()
        if self.session.results:
            self._show_beam()

    def show_output(self) -> None:
        session, bar = self.session, self.views.input_bar
        result = session.run_result
        if result is not None:
            run = session.request.settings
            limit = run.max_len if run.mode != Mode.FORCED else None
            eos_id = session.model.config.get("eos_id") if session.model else None
            partner = None
            if session.comparing:
                partner = viewmodel.partner_line(session.partner_result or session.partner_error or None,
                                                 session.partner.path.stem)
            coverage = self.contributions.coverage
            line = viewmodel.result_line(
                result, session.notices, limit=limit, eos_id=eos_id, original=session.original, partner=partner,
                coverage=coverage.get(min(session.selection.hypothesis, len(session.results) - 1), ""),
                original_coverage=coverage.get(contributions.ORIGINAL, ""), showing_original=session.show_original)
            bar.show_result(dataclasses.replace(line, details=fill_view.fill_details(result)) if session.fills
                            else line)
        elif session.notices:
            bar.show_message(session.notices[-1])

    # --- the selection --------------------------------------------------------------------------------
    def choose_hypothesis(self, index: int) -> None:
        self.session.selection.hypothesis = index
        self.session.clamp()
        self.show_output()
        self.refresh(rebuild=True)

    def _on_selector_changed(self) -> None:
        chosen = self.views.selector.selection()
        if chosen["kind"] is not None:
            self.select(**chosen)

    def select(self, **changes) -> None:
        """Change the selection and update only the views it affects."""
        before = self.session.selection
        after = self.session.replace_selection(**changes)
        self.refresh(rebuild=after.kind != before.kind, layer_changed=after.layer != before.layer)

    def step_selection(self, field: str, delta: int) -> None:
        change = self.session.stepped_selection(field, delta)
        if change is not None:
            self.select(**change)

    def first_step(self) -> None:
        self.select(step=0)

    def last_step(self) -> None:
        if self.session.trace is not None:
            self.select(step=prompt_view.step_count(self.session.trace) - 1)

    # --- a snapshot series (models/storage/snapshots.py) ----------------------------------------------
    def choose_snapshot(self, index: int) -> None:
        """Run the same sentence and settings on the series' ``index``-th snapshot (the newest request wins)."""
        if self.session.choose_snapshot(index):
            self.show_snapshot_bar()
            self.run()

    def step_snapshot(self, delta: int) -> None:
        if self.session.model is not None and self.session.model.snapshots:
            self.choose_snapshot(self.session.snapshot_index() + delta)

    def show_snapshot_bar(self) -> None:
        steps = self.session.model.snapshots if self.session.model is not None else ()
        self.views.snapshot_bar.show_state(viewmodel.snapshot_bar(steps, self.session.snapshot_step))

    # --- what the views show --------------------------------------------------------------------------
    def _on_options_changed(self) -> None:
        self.session.options = self.views.selector.view_options()
        current = self.current_heatmap()
        if current is not None:
            self.views.focus.show_heatmap(current)
        if self.session.comparing and current is not None:
            self.views.compare_view.show_compare(self.current_comparison())

    def current_heatmap(self) -> viewmodel.HeatmapState | None:
        """The focus heatmap of the shown method, or None (nothing run, or the method has no map: see
        :meth:`focus_message`)."""
        shown = self.focus_state()
        return shown if isinstance(shown, viewmodel.HeatmapState) else None

    def focus_state(self) -> viewmodel.HeatmapState | str | None:
        """The focus heatmap, or the line shown in its place (a method still computing, or one the model
        cannot give), or None before a run."""
        trace, result = self.session.trace, self.session.result
        if trace is None:
            return None
        feature = self.contributions
        maps = feature.maps_for()
        if maps is None:
            return viewmodel.heatmap(trace, self.session.selection, self.session.options, outputs=result.tokens,
                                     windows=self._model_shape()["windows"])
        if isinstance(maps, str):
            return maps
        weights = self.session.model.weights if self.session.model is not None else "float32"
        return contributions.contribution_heatmap(trace, maps, self.session.selection, choice=feature.choice,
                                                  options=self.session.options, outputs=result.tokens, weights=weights,
                                                  contrast=feature.contrast_label())

    def current_comparison(self) -> compare_view.CompareState | None:
        """Model A and B at the current selection, or what B lacks (its run failed, or is under way)."""
        session = self.session
        trace, partner = session.trace, session.partner_result
        if trace is None or not session.comparing:
            return None
        if partner is None:
            waiting = compare_view.ComparePane(None, session.partner_missing)
            return compare_view.CompareState(a=compare_view.compare_pane(trace, session.selection, name="A",
                                                                   options=session.options),
                                          b=waiting, diff=compare_view.ComparePane(None, ""))
        if self.contributions.choice is not None:
            return self._contribution_comparison(trace, partner.trace)
        return compare_view.compare_state(trace, partner.trace, selection=session.selection, options=session.options)

    def _contribution_comparison(self, trace, partner_trace) -> compare_view.CompareState:
        """A, B and B − A of the shown method: each model's own maps of it."""
        feature, session = self.contributions, self.session
        panes, pairs = [], []
        sides = (("A", trace, feature.maps_for()), ("B", partner_trace, feature.maps_for(partner=True)))
        for name, shown, maps in sides:
            if isinstance(maps, str):
                panes.append(compare_view.ComparePane(None, f"model {name}: {maps}"))
                continue
            state = contributions.contribution_heatmap(shown, maps, session.selection, choice=feature.choice,
                                                       options=session.options, name=name)
            pane = compare_view.ComparePane
            panes.append(pane(None, state) if isinstance(state, str) else pane(state))
            pairs.append((shown, maps))
        diff = compare_view.ComparePane(None, "B − A: waiting for both models' maps")
        if len(pairs) == 2:
            diff = contributions.contribution_difference(pairs[0], pairs[1], session.selection, choice=feature.choice,
                                                         options=session.options)
        return compare_view.CompareState(a=panes[0], b=panes[1], diff=diff)

    def refresh(self, rebuild: bool = False, layer_changed: bool = True) -> None:
        views, trace, selection = self.views, self.session.trace, self.session.selection
        if trace is None:
            return
        if not trace.kinds:
            self.clear_views(NO_ATTENTION)
        else:
            views.selector.show_state(contributions.selector_state(trace, selection, self.contributions.choice))
            if self.session.comparing:
                views.compare_view.show_compare(self.current_comparison())
            else:
                self._show_focus()
            self._show_grids(rebuild=rebuild, layer_changed=layer_changed)
        views.decoding.show_state(self._step_state())
        views.focus.set_maskable(bool(self.session.model and self.session.model.mask_token))
        for pane in self.panes:
            pane.refresh()
        self.shows_run = True

    def _show_focus(self) -> None:
        shown = self.focus_state()
        if isinstance(shown, str):
            self.views.focus.clear(shown)  # the run stays: the other methods and views still show it
        elif shown is not None:
            self.views.focus.show_heatmap(shown)

    def _step_state(self) -> viewmodel.StepState:
        trace, selection, feature = self.session.trace, self.session.selection, self.contributions
        session = self.session
        state = (fill_view.fill_step_state(session.result, trace, selection, maskable=bool(session.model.mask_token))
                 if session.fills else viewmodel.step_state(session.result, trace, selection))
        maps = feature.maps_for() if trace.kinds else None
        if maps is None:
            return state
        foil = feature.contrast_label()
        if foil and state.top_k is not None and feature.contrast.step == selection.step:  # the token y′ named
            state = dataclasses.replace(state, top_k=dataclasses.replace(
                state.top_k, title=f"{state.top_k.title} · vs ‘{foil}’"))
        if isinstance(maps, str):
            return dataclasses.replace(state, source_bars=contributions.bars_saying(maps))
        return dataclasses.replace(state, source_bars=contributions.contribution_bars(trace, maps, selection,
                                                                                      choice=feature.choice))

    def _show_grids(self, *, rebuild: bool, layer_changed: bool) -> None:
        trace, selection = self.session.trace, self.session.selection
        # Revealing rows step by step, a step changes what the thumbnails may show too.
        reveal_step = selection.step if self.session.options.reveal_rows else None
        if self.contributions.choice is not None:
            self._show_contribution_grids(reveal_step)
            return
        images = rebuild or layer_changed or reveal_step is not None
        groups = self._model_shape()["kv_groups"]
        self.views.head_grid.show_grid(viewmodel.head_grid(trace, selection, images=images, reveal_step=reveal_step,
                                                           kv_groups=groups), images=images)
        everything = rebuild or reveal_step is not None
        if self.views.model_view.summary.isChecked() and everything:  # one cell per head (state/grid_summary.py)
            state = grid_summary.summary_grid(trace, selection, kv_groups=groups, reveal_step=reveal_step)
        else:
            state = viewmodel.model_grid(trace, selection, images=everything, reveal_step=reveal_step,
                                         kv_groups=groups)
        self.views.model_view.show_grid(state, images=everything)

    def _on_summary_toggled(self) -> None:
        if self.session.trace is not None:
            self._show_grids(rebuild=True, layer_changed=False)

    def _model_shape(self) -> dict[str, tuple[int, ...]]:
        """The open model's key/value groups and sliding windows (a decoder-only model's; empty otherwise)."""
        model = self.session.model
        return {"kv_groups": model.kv_groups if model is not None else (),
                "windows": model.windows if model is not None else ()}

    def _show_contribution_grids(self, reveal_step: int | None) -> None:
        """The shown method's thumbnails (every head, or each block's one map), or none while they compute."""
        trace, selection, feature = self.session.trace, self.session.selection, self.contributions
        maps = feature.maps_for()
        if feature.computing():
            return  # the thumbnails stay as they are until the maps come (one build, not two)
        for grid, whole_kind in ((self.views.head_grid, False), (self.views.model_view, True)):
            state = None if isinstance(maps, str) else contributions.contribution_grid(
                trace, maps, selection, choice=feature.choice, whole_kind=whole_kind, reveal_step=reveal_step)
            if state is None:
                grid.build(0, 0, row_names=[], col_names=[])
            else:
                grid.show_grid(state, images=True)

    def clear_views(self, message: str) -> None:
        self.shows_run = False
        views = self.views
        views.focus.clear(message)
        views.compare_view.clear(message)
        for pane in self.panes:
            pane.clear(message)
        for grid in (views.head_grid, views.model_view):
            grid.build(0, 0, row_names=[], col_names=[])
        views.selector.setEnabled(False)

    def set_colormap(self, name: str) -> None:
        for view in (self.views.focus, self.views.head_grid, self.views.model_view, self.views.compare_view):
            view.set_colormap(name)
