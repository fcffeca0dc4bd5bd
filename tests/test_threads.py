"""How many threads torch computes on: the cores other work leaves idle, or what the user set."""

from __future__ import annotations

import os

import torch

from models.inference.translator import idle_cores, use_idle_cores


def test_threads_are_the_cores_the_load_leaves_idle():
    assert idle_cores(2, 0.3) == 2
    assert idle_cores(2, 4.3) == 1  # a loaded machine: one thread, never none
    assert idle_cores(8, 2.6, keep_free=1) == 4  # the window keeps a core for its GUI thread
    assert idle_cores(1, 0.0, keep_free=1) == 1


def test_torch_computes_on_the_idle_cores_unless_told_fewer(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = os.cpu_count() or 1
    try:
        torch.set_num_threads(cores)
        before = idle_cores(cores, os.getloadavg()[0])
        threads = use_idle_cores()
        after = idle_cores(cores, os.getloadavg()[0])
        assert threads in (before, after)
        assert torch.get_num_threads() == threads
        torch.set_num_threads(1)  # a count chosen already is never raised
        assert use_idle_cores() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", str(cores))  # nor one the user set lowered
        torch.set_num_threads(cores)
        assert use_idle_cores() == cores
    finally:
        torch.set_num_threads(1)  # as tests/conftest.py sets it
