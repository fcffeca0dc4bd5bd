"""Activation patching's tables as the window and the CLI show them, without Qt or torch
(docs/ARCHITECTURE.md#activation-patching).

A ``PatchReport`` is one patching run as plain data: the metric, both runs' values, the token labels and the tables
(models/analysis/patching.py's ``PatchingResult``, exact and AtP). ``patch_document`` is ``attnviz patch --json``;
``patch_panels`` the window's heatmaps (layers × positions, layers × heads per kind), normalised where it can be
((m − m_corrupt) / (m_clean − m_corrupt): 0 the corrupted run, 1 the clean one), else the raw metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.analysis.catalogue import PATCH_LOGIT, PATCH_METRICS

from .jobs import Answer

HEAD_KINDS = ("enc_self", "dec_self", "cross")
KIND_TITLES = {"enc_self": "encoder self-attention", "dec_self": "decoder self-attention", "cross": "cross-attention"}
ESTIMATES = ("exact", "atp")  # exact patching; attribution patching's estimate


@dataclass(frozen=True)
class PatchReport:
    """One patching run, as numbers and labels. ``tables[estimate]`` maps ``encoder`` ``[layers + 1, S]``,
    ``decoder`` ``[layers + 1, n]``, ``encoder_all`` ``[layers + 1]`` and ``heads_{kind}`` ``[layers, heads]`` to
    the patched metric (``exact`` absent when only AtP ran)."""

    metric: str
    step: int | None
    clean_token: str | None
    corrupt_token: str | None
    clean: float
    corrupt: float
    tables: dict[str, dict[str, np.ndarray]]
    source_labels: list[str]  # the clean source's tokens
    corrupt_labels: list[str]
    decoder_labels: list[str]  # the tokens fed at the decoder's positions
    clean_output: list[str] = field(default_factory=list)
    corrupt_output: list[str] = field(default_factory=list)
    spearman: dict[str, float | None] = field(default_factory=dict)
    prompt_len: int | None = None  # a decoder-only model's prompt (the first decoder positions)

    @property
    def normalisable(self) -> bool:
        return abs(self.clean - self.corrupt) >= 1e-9

    def scaled(self, table: np.ndarray) -> np.ndarray:
        """``table`` normalised where the two runs differ, else as it is."""
        return (table - self.corrupt) / (self.clean - self.corrupt) if self.normalisable else table

    @property
    def metric_line(self) -> str:
        """What the tables measure, in one line."""
        if self.metric == PATCH_LOGIT:
            return (f"logit({self.clean_token}) − logit({self.corrupt_token}) at step {self.step}: clean "
                    f"{self.clean:.3f}, corrupted {self.corrupt:.3f}")
        return f"{PATCH_METRICS[self.metric]}: clean {self.clean:.3f}, corrupted {self.corrupt:.3f}"

    @property
    def scale_line(self) -> str:
        if self.normalisable:
            return "normalised: (m − m_corrupted) / (m_clean − m_corrupted), 0 the corrupted run, 1 the clean one"
        return "the two runs' metrics are equal: the raw patched metric"


def report_of(result, *, source_labels: list[str], corrupt_labels: list[str], decoder_labels: list[str],
              token_label, clean_output: list[str] = (), corrupt_output: list[str] = ()) -> PatchReport:
    """A ``PatchReport`` of a ``PatchingResult``; ``token_label(id)`` names an output token."""
    tables = {"atp": result.atp.named()}
    if result.exact is not None:
        tables["exact"] = result.exact.named()
    return PatchReport(result.metric, result.step,
                       None if result.clean_token is None else token_label(result.clean_token),
                       corrupt_token=None if result.corrupt_token is None else token_label(result.corrupt_token),
                       clean=result.clean, corrupt=result.corrupt, tables=tables, source_labels=list(source_labels),
                       corrupt_labels=list(corrupt_labels), decoder_labels=list(decoder_labels),
                       clean_output=list(clean_output), corrupt_output=list(corrupt_output),
                       spearman=result.spearman, prompt_len=result.prompt_len)


def report_for(translator, run, *, clean, corrupt) -> PatchReport:
    """The report of a ``PatchRun`` (models/analysis/patching.py) of the ``SourceInput``s ``clean`` and ``corrupt``,
    labelled by ``translator``'s tokenizers."""
    result = run.result
    token = translator.target_tokenizer.token
    fed = translator.source_tokenizer.token if result.prompt_len else token  # a prompt is read as a source
    return report_of(result, source_labels=translator.source_labels(clean),
                     corrupt_labels=translator.source_labels(corrupt),
                     decoder_labels=[fed(int(index)) for index in result.decoder_ids], token_label=token,
                     clean_output=[token(int(index)) for index in run.output_ids],
                     corrupt_output=[token(int(index)) for index in run.corrupt_output_ids])


def _tables_document(report: PatchReport, tables: dict[str, np.ndarray], scale) -> dict:
    def rows(name):
        return scale(tables[name]).tolist() if name in tables else []
    return {"encoder": rows("encoder"), "decoder": rows("decoder"), "encoder_all": rows("encoder_all"),
            "heads": {kind: scale(tables[f"heads_{kind}"]).tolist() for kind in HEAD_KINDS
                      if f"heads_{kind}" in tables}}


def patch_document(report: PatchReport, *, clean_text: str, corrupt_text: str) -> dict:
    """``attnviz patch --json``: the tables normalised (``normalised`` says whether they are) and raw (``raw``)."""
    exact = report.tables.get("exact", {})
    document = {
        "metric": {"name": report.metric, "label": PATCH_METRICS[report.metric], "step": report.step,
                   "clean_token": report.clean_token, "corrupt_token": report.corrupt_token,
                   "normalised": report.normalisable},
        "clean": {"source": clean_text, "tokens": report.source_labels, "output": report.clean_output,
                  "value": report.clean},
        "corrupt": {"source": corrupt_text, "tokens": report.corrupt_labels, "output": report.corrupt_output,
                    "value": report.corrupt},
        "decoder_tokens": report.decoder_labels,
        "prompt_len": report.prompt_len,
        **_tables_document(report, exact, report.scaled),
        "atp": _tables_document(report, report.tables["atp"], report.scaled),
        "raw": {**_tables_document(report, exact, lambda table: table),
                "atp": _tables_document(report, report.tables["atp"], lambda table: table)},
        "spearman": report.spearman,
    }
    return document


def patch_arrays(report: PatchReport) -> dict[str, np.ndarray]:
    """The tables as the pane's NPZ export holds them, named as ``attnviz patch --json`` names them: exact patching's
    ``encoder``, ``decoder``, ``encoder_all``, ``heads_{kind}`` normalised (its ``heads``: one array per kind),
    ``atp_…`` attribution patching's, ``raw_…`` and ``raw_atp_…`` the patched metric unscaled; the metric
    (``metric_clean``, ``metric_corrupt``, ``step``: −1 for the whole output's NLL), the tokens and Spearman's ρ."""
    arrays: dict[str, np.ndarray] = {}
    for estimate, tables in report.tables.items():
        prefix = "" if estimate == "exact" else f"{estimate}_"
        for name, table in tables.items():
            arrays[prefix + name] = np.asarray(report.scaled(table), dtype=np.float32)
            arrays[f"raw_{prefix}{name}"] = np.asarray(table, dtype=np.float32)
    spearman = {f"spearman_{key}": np.float32(np.nan if value is None else value)
                for key, value in report.spearman.items()}
    return {**arrays, "metric": np.array(report.metric), "metric_clean": np.float64(report.clean),
            "metric_corrupt": np.float64(report.corrupt), "step": np.int64(-1 if report.step is None else report.step),
            "normalised": np.bool_(report.normalisable), "clean_tokens": np.array(report.source_labels, dtype=str),
            "corrupt_tokens": np.array(report.corrupt_labels, dtype=str),
            "decoder_tokens": np.array(report.decoder_labels, dtype=str), **spearman}


def patch_csv_tables(report: PatchReport, estimate: str) -> list[tuple[str, np.ndarray, list[str], list[str]]]:
    """The tables the pane shows for ``estimate``, each as a CSV holds it: its name (``encoder``, ``decoder``,
    ``heads_{kind}``), the values (the encoder's with its ``(all)`` column), the row and the column labels."""
    return [(panel.name, panel.values, list(panel.row_labels), list(panel.column_labels))
            for panel in patch_panels(report, estimate=estimate).panels]


# ------------------------------------------------------------------------------------------------ the heatmaps


@dataclass(frozen=True)
class PatchPanel:
    """One heatmap: ``values`` ``[rows, columns]`` (rows the layers), their labels, and what a click on a cell
    names: ``kind`` a head kind (a cell is a head), else None (a residual position)."""

    name: str
    title: str
    values: np.ndarray
    row_labels: list[str]
    column_labels: list[str]
    kind: str | None = None


@dataclass(frozen=True)
class PatchPanels:
    """What the patching tab shows: the heatmaps of one estimate, the colour range (symmetric about 0), the lines
    above them, and the selected cell ``(panel name, row, column)``."""

    panels: tuple[PatchPanel, ...]
    low: float
    high: float
    lines: tuple[str, ...]
    selected: tuple[str, int, int] | None = None


def patch_panels(report: PatchReport, *, estimate: str = "exact", selected=None) -> PatchPanels:
    """The tab's heatmaps: per residual stream layers × positions (the encoder's with an "all" column: every position
    of that layer patched at once), then per head kind layers × heads."""
    if estimate not in report.tables:
        estimate = "atp"
    tables = report.tables[estimate]
    panels = []
    if "encoder" in tables:
        values = np.concatenate([tables["encoder"], tables["encoder_all"][:, None]], axis=1)
        panels.append(PatchPanel("encoder", "encoder residual stream", report.scaled(values),
                                 row_labels=_layer_labels(values.shape[0]),
                                 column_labels=report.source_labels + ["(all)"]))
    decoder = tables["decoder"]
    panels.append(PatchPanel("decoder", "residual stream" if report.prompt_len else "decoder residual stream",
                             report.scaled(decoder), row_labels=_layer_labels(decoder.shape[0]),
                             column_labels=report.decoder_labels))
    for kind in HEAD_KINDS:
        if f"heads_{kind}" in tables:
            heads = report.scaled(tables[f"heads_{kind}"])
            panels.append(PatchPanel(f"heads_{kind}", f"{KIND_TITLES[kind]} heads", heads,
                                     row_labels=[f"L{layer}" for layer in range(heads.shape[0])],
                                     column_labels=[f"H{head}" for head in range(heads.shape[1])], kind=kind))
    reach = max([float(np.nanmax(np.abs(panel.values))) for panel in panels if panel.values.size] + [1e-9])
    reach = max(reach, 1.0) if report.normalisable else reach
    lines = [report.metric_line, report.scale_line]
    if estimate == "atp":
        lines.append("attribution patching's estimate (one forward and one backward pass)")
    rho = report.spearman.get("all")
    if rho is not None:
        lines.append(f"Spearman ρ of attribution patching against exact patching: {rho:.3f}")
    return PatchPanels(tuple(panels), -reach, reach, lines=tuple(lines), selected=selected)


def _layer_labels(count: int) -> list[str]:
    """The residual stream's rows: the embeddings, then each layer's output."""
    return ["emb"] + [f"L{layer}" for layer in range(count - 1)]


def text_tables(report: PatchReport, *, width: int = 7) -> list[str]:
    """``attnviz patch``'s readable output: the lines, then every exact table (AtP where there is none), two
    decimals a cell, columns headed by their tokens."""
    panels = patch_panels(report)
    rows = "rows: emb the embeddings, Lk layer k's output"
    lines = list(panels.lines) + [rows + ("; (all): every position of the layer" if "encoder" in report.tables.get(
        "exact", report.tables["atp"]) else "")]
    for panel in panels.panels:
        lines += ["", panel.title + ":"]
        head = "".join(label[:width - 1].rjust(width) for label in panel.column_labels)
        lines.append(" " * 5 + head)
        for label, row in zip(panel.row_labels, panel.values):
            lines.append(label.ljust(5) + "".join(f"{value:{width}.2f}" for value in row))
    return lines


# ------------------------------------------------------------------------------------------------ the window's job

WAITING = "Patching: running the clean and corrupted sources and every patched run…"
EMPTY = ("Edit a word of the source in the corrupted box (the same number of tokens), then Run: each cell says how "
         "much of the clean run's output that activation restores.")


@dataclass(frozen=True)
class PatchJob:
    """One patching in the window: the run's source (``clean``), the edited source, the step (None: where the greedy
    outputs first differ), the NLL instead of the logit difference, and the run's languages."""

    id: int
    clean: str
    corrupt: str
    step: int | None = None
    nll: bool = False
    src_lang: str = ""
    tgt_lang: str = ""


@dataclass(frozen=True)
class PatchAnswer(Answer):
    """The worker's answer to a :class:`PatchJob`: its ``PatchReport`` (``value``), or the line saying why not."""


def selected_cell(panels_state: PatchPanels, *, kind: str, layer: int, head) -> tuple[str, int, int] | None:
    """The head the main view shows, outlined on its kind's panel (the grids' selection), else the cell chosen."""
    if isinstance(head, int) and any(panel.kind == kind for panel in panels_state.panels):
        return f"heads_{kind}", layer, head
    return panels_state.selected
