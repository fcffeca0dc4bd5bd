"""What the app has open and what it shows, with no widgets, no Qt and no torch: the model's description,
the newest request and its results, notices, the view selection, and the rules that drop stale answers.

Every job sent to the worker carries an id from the session's one job board (attnviz/state/jobs.py, which the
worker holds too): runs (``Request``), model jobs (open, import, device move), model B's, the panels'. The newest
run wins and so does the newest model job; an answer that carries an older id is dropped here, so it can never
land on a newer run or model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.inference.modes import Mode
from models.nn.ablation import NO_ABLATION, Ablation
from models.nn.precisions import EXACT
from models.trace.records import AttentionTrace, DecodeResult, DecodeStep

from .jobs import JobBoard
from .prompt_view import step_count

NO_REQUEST = 0  # the id of notices that belong to no run (a saved file, a device move)
PARTNER_RUNNING = "model B is running…"
FILLS = "An encoder-only model fills each mask in the sentence: it does not decode (no greedy, beam or forced mode)"
PARTNER_NOT_RUN = "model B has not run this sentence: press Enter to run both"


@dataclass(frozen=True)
class ModelInfo:
    """A description of an opened checkpoint, made on the worker thread (plain data only)."""

    path: Path
    arch: str
    parameters: int
    kinds: tuple[str, ...]
    config: dict[str, Any]
    provenance: dict[str, Any]
    source_tokenizer: str
    target_tokenizer: str
    device: str
    max_len: int
    languages: tuple[str, ...] = ()  # a multilingual model's language codes
    src_lang: str = ""  # the languages it was converted with ("" when none was chosen)
    tgt_lang: str = ""
    snapshots: tuple[int, ...] = ()  # a snapshot series (models/storage/snapshots.py): the training step of each
    weights: str = EXACT  # the precision its weights are kept in (one of models.nn.precisions.PRECISIONS)
    show_choices: tuple = ()  # the contributions methods it offers (attnviz/state/contributions.py ShowChoice)
    mask_token: str = ""  # an encoder-only model's mask token as typed in a sentence ("" where it has none)
    chat: bool = False  # a chat-tuned language model: it has a chat template to lay a prompt out with
    kv_groups: tuple[int, ...] = ()  # a decoder-only model's: the key/value head each query head reads
    windows: tuple[int, ...] = ()  # a decoder-only model's: each layer's sliding window (0: none)

    @property
    def prompted(self) -> bool:
        """A decoder-only language model: one prompt it continues, no source and target."""
        return self.arch == "decoder-only"


@dataclass(frozen=True)
class RunSettings:
    """What the input bar holds for one model, and what a run decodes: each model keeps its own (a Spanish
    target means nothing to a Pig Latin model, and one model's length limit is not another's)."""

    text: str = ""
    mode: str = Mode.GREEDY.value  # a models.inference.modes.Mode name
    beam: int = 4
    target: str = ""  # what forced decoding forces
    max_len: int = 100
    src_lang: str = ""  # a multilingual model's languages ("": as the model was converted)
    tgt_lang: str = ""
    chat: bool = False  # the prompt laid out by the model's chat template (the user's turn, then the assistant's)


@dataclass(frozen=True)
class Request:
    """One run the user asked for; ``id`` grows with every request, the newest wins."""

    id: int
    settings: RunSettings
    ablation: Ablation = NO_ABLATION  # heads switched off (models/nn/ablation.py)
    snapshot: int | None = None  # a series: the training step whose snapshot runs


@dataclass
class Selection:
    """Which heatmap the focus view shows. ``head`` is a head index or an aggregate name."""

    kind: str = "cross"
    layer: int = 0
    head: int | str = 0
    step: int = 0
    hypothesis: int = 0


@dataclass(frozen=True)
class RunLabels:
    """What a run's streamed steps lack to be drawn as a trace: the source tokens' labels and the start token's
    (the decoder's first input), as its finished trace will label them."""

    source: tuple[str, ...]
    start: str


@dataclass(frozen=True)
class ViewOptions:
    """How the focus heatmap is drawn: ``colour_range`` "fixed" (0–1, comparable across maps) or "own" (this
    map's own minimum to maximum: flat-looking means and rollouts show their structure); ``predicted_labels``
    labels decoder rows with the token each one predicts ("<s> → El") instead of the decoder input alone;
    ``reveal_rows`` shows a decoder map only as far as the selected step has generated it."""

    colour_range: str = "fixed"
    predicted_labels: bool = False
    reveal_rows: bool = False


@dataclass
class Session:
    model: ModelInfo | None = None
    request: Request | None = None
    steps: list[DecodeStep] = field(default_factory=list)
    run_labels: RunLabels | None = None  # the current run's source and start token labels, before its steps
    results: list[DecodeResult] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    options: ViewOptions = field(default_factory=ViewOptions)
    model_opened_by: int = 0  # id of the model job whose model is open (jobs of another model are stale)
    run_settings: dict[str, RunSettings] = field(default_factory=dict)  # model path → its input bar
    ablation: Ablation = NO_ABLATION  # the heads the next run switches off
    original: DecodeResult | None = None  # with heads off: the same input's best result with every head on
    show_original: bool = False  # the views show ``original`` (every head on) instead of this run's result
    snapshot_step: int | None = None  # a series: the training step the next run uses
    partner: ModelInfo | None = None  # the model compared with (model B): every run runs on it too
    partner_opened_by: int = 0  # id of the partner open whose model B is compared with
    partner_result: DecodeResult | None = None  # model B's best result of the current run
    partner_error: str = ""  # why model B has no result for the current run
    jobs: JobBoard = field(default_factory=JobBoard)  # every job's id and whether it is current; the worker's too

    @property
    def model_job(self) -> int:
        """The id of the newest open, import, device move or weights re-read."""
        return self.jobs.newest("model")

    @property
    def partner_job(self) -> int:
        """The id of the newest partner open (a newer one, or stopping, makes older ones stale)."""
        return self.jobs.newest("partner")

    def new_job(self, kind: str, *, of_models: bool = False) -> int:
        """A new job of ``kind`` posted on the board; ``of_models``: it works on the open models' results, so it
        is stale once the worker holds other ones."""
        return self.jobs.new(kind, of=self.models_asked() if of_models else None)

    def models_asked(self) -> dict[str, int]:
        """The models a job asked for now works on: the model job that opened model A and, while comparing, B."""
        return {"model": self.model_opened_by, **({"partner": self.partner_opened_by} if self.comparing else {})}

    # --- runs ----------------------------------------------------------------------------------------
    def new_request(self, settings: RunSettings) -> Request:
        self.request = Request(self.jobs.new("run"), settings, ablation=self.ablation, snapshot=self.snapshot_step)
        self.steps, self.results, self.notices, self.original = [], [], [], None
        self.run_labels = None
        self.partner_result, self.partner_error = None, ""
        return self.request

    def is_current(self, request_id: int) -> bool:
        return self.request is not None and request_id == self.request.id

    def accept_labels(self, request_id: int, labels: RunLabels) -> bool:
        if not self.is_current(request_id):
            return False
        self.run_labels = labels
        return True

    def accept_steps(self, request_id: int, steps: list[DecodeStep]) -> bool:
        if not self.is_current(request_id):
            return False
        self.steps.extend(steps)
        return True

    def accept_results(self, request_id: int, results: list[DecodeResult]) -> bool:
        if not self.is_current(request_id):
            return False
        self.results = results
        self.selection.hypothesis = 0
        self.selection.step = max(0, step_count(self.trace) - 1)  # a fill (no decoder rows): its first mask
        self.clamp()
        return True

    def accept_original(self, request_id: int, result: DecodeResult) -> bool:
        """The unablated output of the current run's input (sent only when the run switches heads off)."""
        if not self.is_current(request_id):
            return False
        self.original = result
        if self.show_original:
            self.clamp()
        return True

    # --- comparing with a second model (model B) -----------------------------------------------------
    def new_partner_job(self) -> int:
        return self.jobs.new("partner")

    def accept_partner(self, job_id: int, info: ModelInfo) -> bool:
        if job_id != self.partner_job:
            return False
        # the next run runs on it too; until then (an empty input runs nothing) its pane says so
        self.partner, self.partner_result, self.partner_error = info, None, PARTNER_NOT_RUN
        self.partner_opened_by = job_id
        return True

    def accept_partner_result(self, request_id: int, result: DecodeResult | str) -> bool:
        """Model B's answer to the current run: its best result, or the line saying why it has none."""
        if self.partner is None or not self.is_current(request_id):
            return False
        if isinstance(result, str):
            self.partner_result, self.partner_error = None, result
        else:
            self.partner_result, self.partner_error = result, ""
        return True

    def stop_comparing(self) -> None:
        """Back to one model; a partner open still under way becomes stale."""
        self.jobs.new("partner")
        self.partner, self.partner_result, self.partner_error = None, None, ""

    @property
    def comparing(self) -> bool:
        return self.partner is not None

    @property
    def partner_missing(self) -> str:
        """Why model B shows no result of the current run: it failed, has not run it, or is running it."""
        return self.partner_error or PARTNER_RUNNING

    # --- switching heads off ------------------------------------------------------------------------------
    def _shape(self) -> dict[str, tuple[int, int]]:
        trace = self.trace
        return {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.kinds} if trace is not None else {}

    def toggle_head(self, kind: str, layer: int, head: int) -> Ablation:
        """Switch one head the other way; the caller re-runs."""
        self.ablation = self.ablation.toggled(kind, layer, head=head, shape=self._shape())
        return self.ablation

    def toggle_layer(self, kind: str, layer: int) -> Ablation:
        """Switch every head of a layer off, or on again when all of them already are."""
        shape = self._shape()
        all_off = len(self.ablation.heads_off(kind, layer, shape[kind][1])) == shape[kind][1]
        self.ablation = self.ablation.with_layer(kind, layer, off=not all_off, shape=shape)
        return self.ablation

    def restore_heads(self) -> None:
        self.ablation, self.show_original = NO_ABLATION, False

    def accept_notice(self, request_id: int, message: str) -> bool:
        """A notice of a run is kept only while that run is the newest; others always."""
        if request_id != NO_REQUEST and not self.is_current(request_id):
            return False
        self.notices.append(message)
        return True

    # --- the model -----------------------------------------------------------------------------------
    def new_model_job(self, because: str = "") -> int:
        """An id for an open, import or device move; a newer one makes older ones stale (a corpus job it stops
        says ``because``: default, another model was opened)."""
        return self.jobs.new("model", because)

    def is_current_model_job(self, job_id: int) -> bool:
        return job_id == self.model_job

    def accept_model(self, job_id: int, info: ModelInfo) -> bool:
        """A newly opened model replaces the old one, its results and its selection."""
        if not self.is_current_model_job(job_id):
            return False
        self.model, self.model_opened_by = info, job_id
        self.request, self.results, self.steps, self.notices = None, [], [], []
        self.run_labels = None
        self.ablation, self.original, self.show_original = NO_ABLATION, None, False
        self.selection = Selection(kind=info.kinds[-1] if info.kinds else "cross")
        self.snapshot_step = info.snapshots[-1] if info.snapshots else None  # a series opens trained
        return True

    # --- a snapshot series ----------------------------------------------------------------------------
    def snapshot_index(self) -> int:
        steps = self.model.snapshots if self.model is not None else ()
        return steps.index(self.snapshot_step) if self.snapshot_step in steps else max(len(steps) - 1, 0)

    def choose_snapshot(self, index: int) -> bool:
        """Use the ``index``-th snapshot (clamped) for the next run; False when nothing changes."""
        steps = self.model.snapshots if self.model is not None else ()
        if not steps:
            return False
        step = steps[min(max(index, 0), len(steps) - 1)]
        changed = step != self.snapshot_step
        self.snapshot_step = step
        return changed

    def choose_snapshot_step(self, step: int) -> bool:
        """The snapshot at ``step`` or the nearest one before it (a saved session's step)."""
        steps = self.model.snapshots if self.model is not None else ()
        index = max([i for i, s in enumerate(steps) if s <= step], default=0)
        return self.choose_snapshot(index)

    def keep_run_settings(self, settings: RunSettings) -> None:
        """Remember the open model's input bar before another model replaces it."""
        if self.model is not None:
            self.run_settings[str(self.model.path)] = settings

    def run_settings_for(self, info: ModelInfo, example: str = "") -> RunSettings:
        """What the input bar shows for ``info``: as the user left it, or its example at the model's own limit."""
        return self.run_settings.get(str(info.path), RunSettings(text=example, max_len=info.max_len,
                                                                 src_lang=info.src_lang, tgt_lang=info.tgt_lang))

    def accept_device(self, job_id: int, info: ModelInfo) -> bool:
        """The same model on another device: results stay."""
        if job_id != NO_REQUEST and not self.is_current_model_job(job_id):
            return False
        self.model = info
        if job_id != NO_REQUEST:  # the worker holds it as this job's model now (attnviz/state/jobs.py)
            self.model_opened_by = job_id
        return True

    # --- what is shown -------------------------------------------------------------------------------
    @property
    def fills(self) -> bool:
        """The open model is encoder-only: a run fills its masks (models/inference/fill_mask.py), nothing decodes."""
        return self.model is not None and self.model.arch == "encoder-only"

    @property
    def run_result(self) -> DecodeResult | None:
        """The chosen hypothesis of the newest run (with its heads switched off, if any)."""
        if not self.results:
            return None
        return self.results[min(self.selection.hypothesis, len(self.results) - 1)]

    @property
    def result(self) -> DecodeResult | None:
        """What the views show: the run's result, or the same input with every head on when ``show_original``."""
        if self.show_original and self.original is not None and self.results:
            return self.original
        return self.run_result

    @property
    def trace(self) -> AttentionTrace | None:
        result = self.result
        return result.trace if result is not None else None

    def clamp(self) -> None:
        """Keep the selection inside what the current trace has."""
        trace, selection = self.trace, self.selection
        if trace is None or not trace.kinds:
            return
        if selection.kind not in trace.kinds:
            selection.kind = "cross" if "cross" in trace.kinds else trace.kinds[0]
        selection.layer = min(max(selection.layer, 0), trace.layers(selection.kind) - 1)
        if isinstance(selection.head, int):
            selection.head = min(max(selection.head, 0), trace.heads(selection.kind) - 1)
        # an encoder-only run's steps are its masked positions (attnviz/gui/work.py fill_result)
        steps = len(self.result.steps) if self.fills else step_count(trace)
        selection.step = min(max(selection.step, 0), max(steps - 1, 0))

    def replace_selection(self, **changes: Any) -> Selection:
        self.selection = dataclasses.replace(self.selection, **changes)
        self.clamp()
        return self.selection

    def stepped_selection(self, field_name: str, delta: int) -> dict[str, Any] | None:
        """The change that moves ``field_name`` (layer, head, step) by ``delta``; heads wrap around and
        an aggregate steps to the first or last head. None when nothing is shown."""
        trace, selection = self.trace, self.selection
        if trace is None or not trace.kinds:
            return None
        if field_name == "head":
            heads = trace.heads(selection.kind)
            head = selection.head if isinstance(selection.head, int) else -1 if delta > 0 else heads
            return {"head": (head + delta) % heads}
        return {field_name: getattr(selection, field_name) + delta}
