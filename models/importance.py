"""Head importance: how much the score on held-out pairs drops when one attention head is switched off
alone (Michel et al. 2019). The score is evaluate's (models/evaluation.py): chrF, or exact match for a
model whose target side is characters, where chrF rewards near misses that are wrong answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .ablation import Ablation, AblationError
from .evaluation import Evaluation, evaluate
from .trace import KINDS
from .translator import Translator

# (heads done, heads in all, the head just scored as KIND:LAYER:HEAD); returning False stops the run
Progress = Callable[[int, int, str], "bool | None"]
METRICS = {"exact": "exact match %", "chrf": "chrF"}


def metric_for(translator: Translator) -> str:
    """``exact`` for a character-level target side, else ``chrf``."""
    return "exact" if translator.target_tokenizer.kind == "char" else "chrf"


def metric_value(evaluation: Evaluation, metric: str) -> float:
    """The score on a 0-100 scale."""
    return 100.0 * evaluation.exact if metric == "exact" else evaluation.chrf


@dataclass
class HeadImportance:
    """Per kind a ``[layers, heads]`` table of the score with that head off (``scores``) and of the drop
    from the unablated ``baseline`` (``drops``; positive = the head helped)."""

    metric: str
    baseline: float
    examples: int
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def metric_name(self) -> str:
        return METRICS[self.metric]

    @property
    def drops(self) -> dict[str, np.ndarray]:
        return {kind: self.baseline - table for kind, table in self.scores.items()}

    def ranking(self) -> list[tuple[str, int, int, float]]:
        """Every head as ``(kind, layer, head, drop)``, the largest drop first (ties in kind, layer, head order)."""
        heads = [(kind, layer, head, float(drop)) for kind, table in self.drops.items()
                 for (layer, head), drop in np.ndenumerate(table)]
        return sorted(heads, key=lambda entry: -entry[3])

    def to_json(self) -> dict:
        return {"metric": self.metric, "metric_name": METRICS[self.metric], "baseline": self.baseline,
                "examples": self.examples, "seconds": round(self.seconds, 3),
                "scores": {kind: table.tolist() for kind, table in self.scores.items()},
                "drops": {kind: table.tolist() for kind, table in self.drops.items()},
                "ranking": [{"kind": kind, "layer": layer, "head": head, "drop": drop}
                            for kind, layer, head, drop in self.ranking()]}


def head_importance(translator: Translator, pairs: Sequence[tuple[str, str]], *, kinds: Sequence[str] | None = None,
                    beam: int = 1, max_len: int | None = None, progress: Progress | None = None) -> HeadImportance | None:
    """Score ``pairs`` once as the model is, then once per head of ``kinds`` (default: every kind the model
    has) with that head alone switched off. None when ``progress`` returned False (the run was stopped).

    Without ``max_len`` outputs stop at twice the longest reference plus 10 tokens (all runs alike): a model
    missing a head often never ends its sentence, and decoding to the model's maximum would only make the
    same wrong output longer.
    """
    shape = translator.model.attention_shape()
    if not shape:
        raise AblationError("this model has no attention heads to switch off")
    for kind in kinds or ():
        if kind not in shape:
            raise AblationError(f"this model has no {kind} attention (it has {', '.join(k for k in KINDS if k in shape)})")
    chosen = [kind for kind in KINDS if kind in shape and (not kinds or kind in kinds)]
    started = time.perf_counter()
    if max_len is None:
        tokenizer = translator.target_tokenizer
        longest = max(len(tokenizer.encode(tokenizer.normalize(reference), unknown="replace")) for _, reference in pairs)
        max_len = 2 * longest + 10
    metric = metric_for(translator)
    score = lambda ablation: metric_value(evaluate(translator, pairs, beam=beam, max_len=max_len,  # noqa: E731
                                                   ablation=ablation), metric)
    result = HeadImportance(metric=metric, baseline=score(Ablation()), examples=len(pairs))
    total = sum(shape[kind][0] * shape[kind][1] for kind in chosen)
    done = 0
    for kind in chosen:
        layers, heads = shape[kind]
        table = np.zeros((layers, heads))
        for layer in range(layers):
            for head in range(heads):
                table[layer, head] = score(Ablation.of([(kind, layer, head)]))
                done += 1
                if progress is not None and progress(done, total, f"{kind}:{layer}:{head}") is False:
                    return None
        result.scores[kind] = table
    result.seconds = time.perf_counter() - started
    return result
