"""Small models and data shared by the tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from models import make_config

TINY = {
    "transformer-preln": dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, max_len=64),
    "transformer-postln": dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, max_len=64),
}
TINY_RNN = dict(hidden=32, max_len=64)

LETTERS = "abcdefgh "


@contextlib.contextmanager
def toolkit_imports(toolkit: str, install: str):
    """Imports of an optional toolkit a test file checks us against: if any of them fails (the toolkit, or a
    module it needs, is not installed) the whole file is skipped with the reason, never a collection error.
    CI sets ``ATTNVIZ_REQUIRE_TOOLKITS=1``: there a missing toolkit fails, so a lost install step is seen."""
    try:
        yield
    except ImportError as failure:
        reason = f"{toolkit} cannot be imported ({failure}); install it with: {install}"
        if os.environ.get("ATTNVIZ_REQUIRE_TOOLKITS") == "1":
            raise ImportError(f"ATTNVIZ_REQUIRE_TOOLKITS=1: {reason}") from failure
        import pytest

        pytest.skip(reason, allow_module_level=True)


def tiny_config(arch: str, vocab_size: int = len(LETTERS) + 4, **overrides):
    """A small config of ``arch`` (vocabulary: the 4 specials plus ``LETTERS``)."""
    return make_config(arch, vocab_size, vocab_size, **{**TINY.get(arch, TINY_RNN), **overrides})


def write_checkpoint_twice_the_free_memory(path: Path, tokenizer) -> int:
    """A real attnviz checkpoint file whose float32 weights need about twice the memory this machine has free, as
    a sparse file (its weights take no disk); returns their size in bytes."""
    import math

    from models.storage.checkpoint import available_memory

    available = available_memory()
    width = 64 * math.ceil(math.sqrt(available / 24) / 64)  # 3 attentions of 4 width² float32 weights: 2× that
    config = tiny_config("transformer-postln", d_model=width, heads=1, d_ff=64, encoder_layers=1, decoder_layers=1)
    return write_sparse_checkpoint(path, config, tokenizer, tokenizer)


def write_sparse_checkpoint(path: Path, config, source, target=None) -> int:
    """A real attnviz checkpoint file of the model ``config`` describes with the tokenizers ``source`` and
    ``target`` (default: the same), its float32 weights as a sparse file (they take no disk, and read as zeros);
    returns their size in bytes. The model is built without weights to learn its shapes."""
    import json
    import struct

    from models import build_model
    from models.nn.config import config_to_dict
    from models.nn.build import parameters_on_meta

    target = target or source
    with parameters_on_meta():
        model = build_model(config)
    header, offset = {}, 0
    for name, tensor in model.state_dict().items():
        size = tensor.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "attnviz", "format_version": "1", "provenance": "{}",
                              "config": json.dumps(config_to_dict(config)),
                              "tokenizers": json.dumps({"source": source.to_dict(), "target": target.to_dict()})}
    encoded = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded)
        handle.truncate(8 + len(encoded) + offset)
    return offset


def learn_bpe(words: list[str], merges: int) -> tuple[list[tuple[str, str]], list[str]]:
    """BPE merges learned on ``words`` the subword-nmt way (``</w>`` on a word's last character; each round
    merges the most frequent adjacent pair, ties to the smallest pair), deterministic from run to run.
    Returns the merges in rank order and every symbol (the characters, then each merge's result)."""
    from collections import Counter

    counts = Counter(tuple(word[:-1]) + (word[-1] + "</w>",) for word in words)
    symbols = sorted({symbol for word in counts for symbol in word})
    learned: list[tuple[str, str]] = []
    for _ in range(merges):
        pairs: Counter = Counter()
        for word, count in counts.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        learned.append(best)
        symbols.append(best[0] + best[1])
        merged: Counter = Counter()
        for word, count in counts.items():
            out, index = [], 0
            while index < len(word):
                if word[index: index + 2] == best:
                    out.append(best[0] + best[1])
                    index += 2
                else:
                    out.append(word[index])
                    index += 1
            merged[tuple(out)] += count
        counts = merged
    return learned, list(dict.fromkeys(symbols))


def assert_same_forward(expected, logits, intermediates, *, layers: int | dict[str, int] = 2,
                        heads: int | dict[str, int] = 4) -> None:
    """Our logits and every head of every layer (encoder self, decoder self, cross) equal a transformers
    model's eager forward with ``output_attentions`` (``expected``): logits to 1e-4, weights to 1e-5.
    ``layers``/``heads``: one count for every kind, or one per kind."""
    assert (logits - expected.logits).abs().max() < 1e-4
    for kind, theirs in (("enc_self", expected.encoder_attentions), ("dec_self", expected.decoder_attentions),
                         ("cross", expected.cross_attentions)):
        count = layers[kind] if isinstance(layers, dict) else layers
        assert len(theirs) == len(intermediates.attention[kind]) == count, kind
        for layer, weights in zip(theirs, intermediates.attention[kind]):
            count = heads[kind] if isinstance(heads, dict) else heads
            assert layer.shape[1] == weights.shape[1] == count and (layer - weights).abs().max() < 1e-5, kind


def assert_greedy_equals_generate(checkpoint, original, sentences, encode, *, generation_config, max_new: int) -> None:
    """Our greedy decoding equals the transformers model's ``generate`` on every sentence (``encode``: the
    folder's own tokenizer, whose ids our source encoding must equal too), and some outputs end early."""
    import torch

    from models.inference.decoding import Capture, finish, greedy
    from models.inference.translator import Translator

    translator = Translator(checkpoint)
    lengths = set()
    for text in sentences:
        ids = encode(text)
        with torch.no_grad():
            expected = original.generate(torch.tensor([ids]), generation_config=generation_config)[0, 1:].tolist()
        ours = finish(greedy(checkpoint.model, ids, Capture(max_len=max_new)))[0].token_ids
        assert ours == expected, text
        assert translator.source(text).ids == ids
        lengths.add(len(ours))
    assert len(lengths) > 1  # some end early


def toolkit_outputs(folder: Path, outputs: str) -> dict[str, np.ndarray]:
    """What a toolkit computed on a fixture it wrote (``make_fixtures.py``), read from ``folder / outputs``."""
    with np.load(folder / outputs) as data:
        return dict(data)


def fixture_copy(folder: Path, tmp_path: Path, outputs: str) -> Path:
    """A toolkit's fixture folder copied into ``tmp_path`` without the reference outputs: as users have it."""
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    (copy / outputs).unlink()
    return copy


REPOSITORY = Path(__file__).resolve().parent.parent


def torchrun(program: Sequence[str], *, processes: int, log_dir: Path, succeeds: bool = True) -> list[tuple[str, str]]:
    """``program`` (a script and its arguments, or ``-m MODULE ...``) started by torchrun in ``processes`` CPU
    processes (gloo) from the repository, its code first on the path, checked to succeed (or to fail); per rank
    what it wrote to stdout and stderr (torchrun keeps each rank's in files of its own under ``log_dir``)."""
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--standalone",
                "--log-dir", str(log_dir), "--redirects", "3"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        environment.pop(name, None)  # a test run under torchrun must not leak its own process group
    result = subprocess.run([sys.executable, *launcher, *map(str, program)], cwd=REPOSITORY, env=environment,
                            capture_output=True, text=True, timeout=300)
    ranks = [sorted(log_dir.glob(f"*/attempt_0/{rank}")) for rank in range(processes)]
    outputs = [((folder[-1] / "stdout.log").read_text(encoding="utf-8"),
                (folder[-1] / "stderr.log").read_text(encoding="utf-8")) if folder else ("", "") for folder in ranks]
    logs = "".join(out + err for out, err in outputs)
    assert (result.returncode == 0) == succeeds, result.stderr[-3000:] + logs[-3000:]
    return outputs


def write_pairs(path: Path, pairs: Sequence[tuple[str, str]]) -> Path:
    """A PAIRS.tsv file of ``pairs`` (source<TAB>target a line), as `attnviz train` and the corpus jobs read it."""
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    return path


def open_corpus_panels(qtbot, window, folder: Path, *, timeout: int) -> None:
    """Head statistics and head importance of a two-pair corpus, both panels shown with their results."""
    corpus = write_pairs(folder / "pairs.tsv", [("abc", "cba"), ("hag", "gah")])
    window.stats.open(str(corpus))
    qtbot.waitUntil(lambda: window.head_stats.stats is not None, timeout=timeout)
    window.importance.open(str(corpus))
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=max(timeout, 60_000))


def settled(qtbot, snapshot, *, polls: int = 3, timeout: int = 5_000):
    """``snapshot()`` (what the test reads: geometries, a plot's layout, labels) once it has settled: not empty (None,
    or any false value, is "not laid out yet") and the same at ``polls`` polls of the event loop in a row. A layout
    settles over several passes of the event loop (pyqtgraph's after new data or a resize, a dock's after it shows);
    one that never stops changing fails here."""
    seen = []

    def same() -> bool:
        seen.append(snapshot())
        recent = seen[-polls:]
        return len(recent) == polls and bool(recent[-1]) and all(value == recent[-1] for value in recent)

    qtbot.waitUntil(same, timeout=timeout)
    return seen[-1]


def plot_layout(plot) -> tuple | None:
    """What a pyqtgraph plot's layout decides: its view box's place and range and its axes' sizes and names; None
    while the view box has no size yet."""
    box = plot.vb.sceneBoundingRect()
    if box.isEmpty():
        return None
    axes = tuple((plot.getAxis(side).width(), plot.getAxis(side).height(), plot.getAxis(side).labelString())
                 for side in ("left", "bottom"))
    return box.getRect(), tuple(tuple(span) for span in plot.viewRange()), axes


def worker_idle(qtbot, window, *, timeout: int) -> None:
    """Wait until the window's worker thread has done everything queued on it so far, and its answers meanwhile
    have reached the GUI thread (twice: a unit done may queue the next one)."""
    from PySide6.QtCore import QTimer

    for _ in range(2):
        reached, came = [], []
        QTimer.singleShot(0, window.worker, lambda: reached.append(True))  # on the worker thread, after its queue
        qtbot.waitUntil(lambda: bool(reached), timeout=timeout)
        QTimer.singleShot(0, window, lambda: came.append(True))  # on the GUI thread, after the answers before it
        qtbot.waitUntil(lambda: bool(came), timeout=timeout)
