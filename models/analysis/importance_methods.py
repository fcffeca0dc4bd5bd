"""Each head-importance method of the catalogue (models/analysis/catalogue.py ``IMPORTANCE_METHODS``) computed by
its name: the one dispatcher the window's worker (stepping its units) and ``attnviz importance`` (driving them to
the end) both use."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..inference.batch_sizes import Batching
from ..inference.distributed import ONE_PROCESS, Processes
from ..inference.translator import Translator
from .catalogue import IMPORTANCE_METHODS
from .importance import (
    TOKENS_PER_PASS, HeadImportance, ImportanceError, ablation_importance_steps, gradient_importance,
    head_importance_steps,
)
from .steps import Steps


def importance_steps(translator: Translator, pairs: Sequence[tuple[str, str]], method: str, *,
                     metric: str | None = None, kinds: Sequence[str] | None = None, beam: int = 1,
                     max_len: int | None = None, tokens_per_pass: int = TOKENS_PER_PASS,
                     batching: Batching = Batching(), processes: Processes = ONE_PROCESS) -> Steps:
    """The :class:`HeadImportance` of ``pairs`` by ``method`` (a name of the catalogue) as a generator of units
    (models/analysis/steps.py): ``nll`` one teacher-forced pass of as many heads as ``tokens_per_pass`` padded
    tokens hold per unit; ``gradient`` one unit in all (one forward and backward pass per batch); ``decode`` every
    pair decoded again per head (``beam``, ``max_len``), one batch (``batching``) per unit, and scored in ``metric``,
    ``chrf`` or ``exact`` (default: the model's own, ``importance.metric_for``). ``kinds``: the heads' kinds
    (default: every kind the model has)."""
    entry = IMPORTANCE_METHODS.get(method)
    if entry is None:
        raise ImportanceError(f"unknown importance method {method!r}; choose one of {', '.join(IMPORTANCE_METHODS)}")
    if entry.estimated:
        return _one_unit(lambda: gradient_importance(translator, pairs, kinds=kinds, processes=processes))
    if entry.decodes:
        return head_importance_steps(translator, pairs, kinds=kinds, beam=beam, max_len=max_len, metric=metric,
                                     batching=batching, processes=processes)
    return ablation_importance_steps(translator, pairs, kinds=kinds, tokens_per_pass=tokens_per_pass,
                                     processes=processes)


def _one_unit(compute: Callable[[], HeadImportance]) -> Steps:
    """``compute`` as a generator of one unit: its first step returns the result."""
    return compute()
    yield  # never reached: it makes this function a generator
