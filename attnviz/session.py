"""What the app has open and what it shows, with no widgets: the model's description, the current
request, the results of the newest request (stale ones are dropped) and the view selection."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.trace import AttentionTrace, DecodeResult, DecodeStep

KIND_LABELS = {"enc_self": "Encoder self-attention", "dec_self": "Decoder self-attention", "cross": "Cross-attention"}
AXIS_NAMES = {"enc_self": ("source (queries)", "source (keys)"),
              "dec_self": ("decoder input (queries)", "decoder input (keys)"),
              "cross": ("decoder input (queries)", "source (keys)")}


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


@dataclass(frozen=True)
class Request:
    """One run the user asked for; ``id`` grows with every request, the newest wins."""

    id: int
    text: str
    mode: str = "greedy"  # greedy | beam | forced
    beam: int = 4
    target: str = ""
    max_len: int = 100


@dataclass
class Selection:
    """Which heatmap the focus view shows. ``head`` is a head index or an aggregate name."""

    kind: str = "cross"
    layer: int = 0
    head: int | str = 0
    step: int = 0
    hypothesis: int = 0


@dataclass
class Session:
    model: ModelInfo | None = None
    request: Request | None = None
    steps: list[DecodeStep] = field(default_factory=list)
    results: list[DecodeResult] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    _next_id: int = 0

    def new_request(self, text: str, **options: Any) -> Request:
        self._next_id += 1
        self.request = Request(self._next_id, text, **options)
        self.steps, self.results, self.notices = [], [], []
        return self.request

    def is_current(self, request_id: int) -> bool:
        return self.request is not None and request_id == self.request.id

    def accept_step(self, request_id: int, step: DecodeStep) -> bool:
        if not self.is_current(request_id):
            return False
        self.steps.append(step)
        return True

    def accept_results(self, request_id: int, results: list[DecodeResult]) -> bool:
        if not self.is_current(request_id):
            return False
        self.results = results
        self.selection.hypothesis = 0
        self.selection.step = max(0, len(self.trace.tgt_tokens) - 1) if self.trace else 0
        self.clamp()
        return True

    def set_model(self, info: ModelInfo) -> None:
        self.model = info
        self.results, self.steps = [], []
        self.selection = Selection(kind=info.kinds[-1] if info.kinds else "cross")

    @property
    def result(self) -> DecodeResult | None:
        if not self.results:
            return None
        return self.results[min(self.selection.hypothesis, len(self.results) - 1)]

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
        selection.step = min(max(selection.step, 0), len(trace.tgt_tokens) - 1)

    def replace_selection(self, **changes: Any) -> Selection:
        self.selection = dataclasses.replace(self.selection, **changes)
        self.clamp()
        return self.selection
