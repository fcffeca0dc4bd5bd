"""Writing what the app shows, every file atomically (models/storage/files.py): NPZ (the layout the README
documents) and CSV; PNG and SVG figures are written by attnviz/gui/rendering.py.

Every writer here and there fails only with an ``AttnvizError`` (``WriteError``, or ``InputError`` for a name
it cannot write): the CLI prints it as its one error line, the window as "Export failed: …".
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from models.errors import InputError
from models.storage.files import atomic_output, check_output_folder
from models.trace.records import AttentionTrace, DecodeResult

IMAGE_SUFFIXES = (".png", ".svg")


def trace_arrays(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """``src_tokens``, ``tgt_tokens`` (a decoder-only model's trace: ``prompt_len`` instead, its tokens being
    :func:`sequence_arrays`'), ``{kind}_L{layer}`` ``[heads, q, k]`` float32, ``{kind}_mask`` bool, and ``ablated``:
    the heads switched off in the run as ``KIND:LAYER:HEAD`` strings (empty when none was)."""
    if trace.prompt_len is None:
        arrays = {"src_tokens": np.array(trace.src_tokens, dtype=str),
                  "tgt_tokens": np.array(trace.tgt_tokens, dtype=str)}
    else:
        arrays = {"prompt_len": np.array(trace.prompt_len)}
    arrays["ablated"] = np.array([f"{kind}:{layer}:{head}" for kind, layer, head in trace.ablated], dtype=str)
    for kind in trace.kinds:
        for layer, weights in enumerate(trace.attention[kind]):
            arrays[f"{kind}_L{layer}"] = weights.astype(np.float32)
        arrays[f"{kind}_mask"] = trace.masks[kind].astype(bool)
    return arrays


def sequence_arrays(result: DecodeResult) -> dict[str, np.ndarray]:
    """A decoder-only model's whole sequence: ``token_ids`` (the prompt's, then the output's) and their ``tokens``
    (n + 1 of them, n the positions fed: the trace's rows and keys are the first n, row i predicting token i + 1)."""
    trace = result.trace
    return {"token_ids": np.array(list(result.prompt_ids) + list(result.token_ids), dtype=np.int64),
            "tokens": np.array(list(trace.src_tokens) + list(result.tokens), dtype=str)}


def write_npz(path: str | Path, result: DecodeResult, extra: dict[str, np.ndarray] | None = None) -> Path:
    """The trace (a decoder-only model's with :func:`sequence_arrays`) plus ``output_tokens``, ``translation``
    (the output's text: a decoder-only model's continuation), ``score`` and the ``extra`` arrays (contributions)."""
    arrays = {**trace_arrays(result.trace), **(extra or {})}
    if result.trace.prompt_len is not None:
        arrays.update(sequence_arrays(result))
    arrays.update(output_tokens=np.array(result.tokens, dtype=str), translation=np.array(result.text),
                  score=np.array(result.score))
    return write_arrays(path, arrays)


def write_fill_npz(path: str | Path, result, extra: dict[str, np.ndarray] | None = None) -> Path:
    """An encoder-only run (models/inference/fill_mask.py's ``FillResult``): the trace, ``src_ids``, the masked
    positions ``masked_positions`` [masks], each one's predictions best first ``fill_ids`` [masks, k] (int64),
    ``fill_tokens`` and ``fill_probs`` (float32), and ``translation``: the sentence with each mask filled; and
    ``contributions``' arrays where given (models/analysis/methods.py ``contribution_arrays``)."""
    predictions = result.predictions
    shape = (len(predictions), len(predictions[0].top_ids) if predictions else 0)
    arrays = {**trace_arrays(result.trace), "src_ids": np.array(result.source_ids, dtype=np.int64),
              "masked_positions": np.array([p.position for p in predictions], dtype=np.int64),
              "fill_ids": np.array([p.top_ids for p in predictions], dtype=np.int64).reshape(shape),
              "fill_tokens": np.array([p.top_tokens for p in predictions], dtype=str).reshape(shape),
              "fill_probs": np.array([p.top_probs for p in predictions], dtype=np.float32).reshape(shape),
              "translation": np.array(result.text), **(extra or {})}
    return write_arrays(path, arrays)


def write_arrays(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """A compressed NumPy archive of ``arrays`` at exactly ``path``; a failure is one ``WriteError`` line."""
    with atomic_output(path) as temporary, open(temporary, "wb") as handle:  # np.savez would append .npz
        np.savez_compressed(handle, **arrays)
    return Path(path)


def write_csv(path: str | Path, matrix: np.ndarray, query_tokens: list[str], key_tokens: list[str]) -> Path:
    """One heatmap: a header row of key tokens, then one row per query token."""
    with atomic_output(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query \\ key", *key_tokens])
        for token, row in zip(query_tokens, matrix):
            writer.writerow([token, *(f"{value:.6g}" for value in row)])
    return Path(path)


def check_output(path: str | Path, suffixes: tuple[str, ...]) -> Path:
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise InputError(f"{path}: the file name must end in {' or '.join(suffixes)}")
    return check_output_folder(path)
