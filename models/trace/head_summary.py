"""Corpus head statistics as plain data (numpy only, no torch): what each attention head does on average over
a corpus, and on which sentences it behaves most and least like that. Computed by models/analysis/head_stats.py.

Every statistic is a mean over the real query rows of the corpus (padded rows never count); within a row,
only real keys count (a padded key is a key no sentence has). Per kind, a statistic is an array
``[layers, heads]``. The definitions (``STATISTICS`` says which kinds each applies to):

- ``entropy``: ``-Σ_k a_k log a_k`` of the attention row, in nats (0 = all weight on one key).
- ``confidence``: the row's largest weight.
- ``eos``: the weight on source keys holding the end token ``</s>``.
- ``bos``: the weight on the decoder's start token ``<s>`` (decoder self-attention: key 0).
- ``padding``: the weight on padded keys. Masks make it exactly 0; it is computed to prove that.
- ``same``: the weight on the query's own position (self-attention).
- ``previous``: the weight on the position just before the query (self-attention; rows from position 1).
- ``diagonal``: cross-attention's weight near the length-scaled diagonal. Decoder row ``t`` of ``T`` rows
  over ``S`` source tokens has its centre at ``c_t = (t + 0.5)·S/T − 0.5`` (the row's relative position
  mapped onto the source) and the band holds the keys ``k`` with ``|k − c_t| ≤ max(1, 0.1·S)``. A head that
  follows the source in order scores near 1; a uniform head scores about the band's share of the source.

A head is *typical* on a sentence when its mean entropy on that sentence is close to its corpus mean entropy,
and atypical when it is far from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STATISTICS = {  # name → (the kinds it applies to, what it means)
    "entropy": (("enc_self", "dec_self", "cross"), "mean entropy of a row, nats"),
    "confidence": (("enc_self", "dec_self", "cross"), "mean largest weight of a row"),
    "eos": (("enc_self", "cross"), "weight on </s>"),
    "bos": (("dec_self",), "weight on <s>"),
    "padding": (("enc_self", "dec_self", "cross"), "weight on padding (must be 0)"),
    "same": (("enc_self", "dec_self"), "weight on the query's own position"),
    "previous": (("enc_self", "dec_self"), "weight on the position before the query"),
    "diagonal": (("cross",), "weight within the band around the length-scaled diagonal"),
}
DIAGONAL_BAND = 0.1  # the band's half-width as a share of the source length (at least one position)
TYPICAL_BY = "entropy"
RUNS = ("reference", "decoded")  # forced on the corpus' targets; forced on the model's own greedy output


def statistics_of(kind: str) -> list[str]:
    """The statistics that mean something for ``kind``, in table order."""
    return [name for name, (kinds, _) in STATISTICS.items() if kind in kinds]


@dataclass
class KindSums:
    """One attention kind's per-sentence sums over real query rows: ``sums[stat]`` ``[N, layers, heads]`` (float32
    once gathered over a corpus); ``rows[n]`` the real query rows of sentence n (``previous`` counts
    ``previous_rows``: rows from 1)."""

    sums: dict[str, np.ndarray]
    rows: np.ndarray
    previous_rows: np.ndarray

    def rows_of(self, statistic: str) -> np.ndarray:
        return self.previous_rows if statistic == "previous" else self.rows


@dataclass
class RunStats:
    """Statistics of one pass over the corpus (``run``: ``reference`` or ``decoded``)."""

    run: str
    kinds: dict[str, KindSums]

    def mean(self, kind: str, statistic: str) -> np.ndarray:
        """``[layers, heads]``: the statistic over every real query row of the corpus."""
        sums = self.kinds[kind]
        return sums.sums[statistic].sum(axis=0, dtype=np.float64) / max(int(sums.rows_of(statistic).sum()), 1)

    def per_sentence(self, kind: str, statistic: str) -> np.ndarray:
        """``[N, layers, heads]``: the statistic of each sentence on its own (NaN for a sentence without rows)."""
        sums = self.kinds[kind]
        rows = sums.rows_of(statistic).astype(np.float64)[:, None, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(rows > 0, sums.sums[statistic].astype(np.float64) / rows, np.nan)

    def shape(self, kind: str) -> tuple[int, int]:
        return self.kinds[kind].sums[TYPICAL_BY].shape[1:]

    def typical(self, kind: str, layer: int, head: int, count: int = 5) -> tuple[list[int], list[int]]:
        """Sentence indices where the head is most typical (nearest first) and least typical (farthest
        first): by the distance of its per-sentence mean entropy from its corpus mean entropy."""
        values = self.per_sentence(kind, TYPICAL_BY)[:, layer, head]
        distance = np.abs(values - self.mean(kind, TYPICAL_BY)[layer, head])
        present = np.flatnonzero(~np.isnan(distance))
        order = present[np.argsort(distance[present], kind="stable")]
        count = min(count, len(order))
        return order[:count].tolist(), order[::-1][:count].tolist()

    def tables(self) -> dict[str, dict[str, np.ndarray]]:
        """kind → statistic → ``[layers, heads]``."""
        return {kind: {name: self.mean(kind, name) for name in statistics_of(kind)} for kind in self.kinds}


@dataclass
class HeadStats:
    """A corpus' head statistics: the pairs it ran, its runs, and with ``decoded`` the model's outputs."""

    pairs: list[tuple[str, str]]
    runs: dict[str, RunStats]
    outputs: list[str] = field(default_factory=list)  # greedy outputs, in corpus order (decoded run only)

    @property
    def kinds(self) -> list[str]:
        return list(next(iter(self.runs.values())).kinds)

    def max_padding(self) -> float:
        """The largest mean weight any head put on padding (0 unless a mask is broken)."""
        return max((float(np.max(run.mean(kind, "padding"))) for run in self.runs.values() for kind in run.kinds),
                   default=0.0)

    def arrays(self) -> dict[str, np.ndarray]:
        """``{run}.{kind}.{statistic}`` → ``[layers, heads]`` float32, for an NPZ file."""
        return {f"{name}.{kind}.{statistic}": values.astype(np.float32)
                for name, run in self.runs.items() for kind, table in run.tables().items()
                for statistic, values in table.items()}

    def to_json(self, count: int = 5) -> dict:
        """One JSON-ready document: per run, kind and statistic a ``[layers][heads]`` list, and per head the
        most and least typical sentences."""
        document = {"sentences": len(self.pairs), "statistics": {name: text for name, (_, text) in STATISTICS.items()},
                    "diagonal_band": DIAGONAL_BAND, "runs": {}}
        for name, run in self.runs.items():
            kinds = {}
            for kind, table in run.tables().items():
                layers, heads = run.shape(kind)
                typical = [[dict(zip(("most", "least"), run.typical(kind, layer, head=head, count=count)))
                            for head in range(heads)] for layer in range(layers)]
                kinds[kind] = {**{statistic: values.round(6).tolist() for statistic, values in table.items()},
                               "typical": typical}
            document["runs"][name] = kinds
        if self.outputs:
            document["outputs"] = self.outputs
        return document
