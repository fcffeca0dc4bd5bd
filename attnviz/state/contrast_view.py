"""The window's "contrast with" choice (no Qt, no torch): why the model chose this token and not y′ (Yin & Neubig
2022). y′ is picked by a click on an entry of the step's top-k chart, or on a sibling node of the beam tree (another
continuation of the same prefix); the contributions that explain a token's score (the catalogue's
``contrastive``: the gradient methods, ALTI-Logit) are then computed on the worker for logit(y) − logit(y′) at that
step, and their title says so (attnviz/state/contributions.py ``contrast_title``). A click on the chosen token
itself clears the choice."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.trace.records import DecodeResult

from .viewmodel import BeamState


@dataclass(frozen=True)
class ContrastWith:
    """y′ for one step of one hypothesis of one run: its ``token_id`` and ``label``."""

    request_id: int
    hypothesis: int
    step: int
    token_id: int
    label: str
    chosen: str = ""  # the step's own token y, for the line

    def per_step(self, steps: int) -> tuple[int | None, ...] | None:
        """The contrast as the methods take it (models/analysis/contrast.py): y′ at its step, None at the others;
        None where its step is beyond an output of ``steps`` tokens."""
        if not 0 <= self.step < steps:
            return None
        return tuple(self.token_id if index == self.step else None for index in range(steps))

    def applies(self, request_id: int, hypothesis: int) -> bool:
        return (self.request_id, self.hypothesis) == (request_id, hypothesis)

    def saved(self) -> dict:
        """As a session file keeps it (attnviz/state/session_file.py): of no run, which the reopened one gives."""
        return {"hypothesis": self.hypothesis, "step": self.step, "token_id": self.token_id, "label": self.label}

    def line(self) -> str:
        return (f"Contrast: why ‘{self.chosen}’ and not ‘{self.label}’ at step {self.step + 1} — input × gradient, "
                "integrated gradients and ALTI-Logit explain logit(y) − logit(y′); click the chosen token to clear")


def from_top_k(request_id: int, hypothesis: int, result: DecodeResult, *, step: int,
               label: str) -> ContrastWith | None:
    """The contrast of the top-k entry labelled ``label`` at ``step`` of ``result`` (hypothesis ``hypothesis``), or
    None: the entry is the chosen token itself (the choice is cleared), or no such entry."""
    if not 0 <= step < len(result.steps):
        return None
    decoded, row = result.steps[step], result.rows[step]
    labels = list(decoded.top_tokens[row])
    if label not in labels or label == decoded.tokens[row]:
        return None
    token_id = int(decoded.top_ids[row][labels.index(label)])
    if token_id == int(decoded.token_ids[row]):
        return None
    return ContrastWith(request_id, hypothesis, step=step, token_id=token_id, label=label, chosen=decoded.tokens[row])


def from_beam_node(request_id: int, hypothesis: int, beam: BeamState, *, node: int,
                   result: DecodeResult) -> ContrastWith | None:
    """The contrast of the beam tree's node ``node`` with hypothesis ``hypothesis`` (its path ``beam.paths``): a
    sibling of the path's node at the same step (the same parent; at the first step another first token), or
    None (a node on the path, or elsewhere in the tree)."""
    if not 0 <= node < len(beam.nodes) or not 0 <= hypothesis < len(beam.paths):
        return None
    path, picked = beam.paths[hypothesis], beam.nodes[node]
    on_path = next((index for index in path if beam.nodes[index].depth == picked.depth), None)
    if on_path is None or on_path == node or beam.nodes[on_path].parent != picked.parent or picked.token_id < 0:
        return None
    step = picked.depth
    if not 0 <= step < len(result.token_ids) or picked.token_id == result.token_ids[step]:
        return None
    return ContrastWith(request_id, hypothesis, step=step, token_id=picked.token_id, label=picked.token,
                        chosen=beam.nodes[on_path].token)


def restored(saved: ContrastWith, request_id: int, result: DecodeResult) -> ContrastWith | None:
    """A reopened session's contrast on its first run ``request_id`` (``result``: the hypothesis it was picked on),
    its chosen token y read from that run; None where the run no longer reaches its step, or chose y′ itself."""
    if not 0 <= saved.step < len(result.token_ids) or result.token_ids[saved.step] == saved.token_id:
        return None
    return dataclasses.replace(saved, request_id=request_id, chosen=result.tokens[saved.step])
