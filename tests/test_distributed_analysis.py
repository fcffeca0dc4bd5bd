"""``attnviz importance`` and ``attnviz stats`` under ``torchrun`` with two CPU processes (gloo): each process
scores its share of a bundled demo's pairs, and rank 0 alone prints the ``--json`` document one process prints
(and writes the files); the other rank writes nothing at all.

Tolerance: the NLL tables, gradients and statistics are sums of float32 forward passes. Two processes run
other batches (half the pairs each, other padding), so float32 matmuls and softmaxes group their sums
differently and a value moves by rounding alone: measured up to 1.5e-7 nats (ablation) and 3.7e-7
(gradient) on the en-es demo. The tables must agree to 1e-5 (absolute), the bound the batched ablation is
held to against one head at a time in float32 (tests/test_importance_batched.py), where only the grouping of
the sums differs too. What is counted (sentences, pairs, tokens, outputs) and the corpus' greedy outputs must
be equal exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import torchrun
from tests.test_cli import cli

DEMO = "en-es-transformer"
TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)  # the in-process reference run must not join a process group


def two_processes(tmp_path, *arguments: str) -> dict:
    """The one JSON document rank 0 prints; rank 1 prints nothing, not even progress."""
    (out, _), (other_out, other_err) = torchrun(["-m", "attnviz", *arguments], processes=2, log_dir=tmp_path / "logs")
    assert (other_out, other_err) == ("", "")
    return json.loads(out)


def one_process(capsys, *arguments: str) -> dict:
    code, out, _ = cli(capsys, *arguments)
    assert code == 0
    return json.loads(out)


def assert_tables_close(together: dict, alone: dict, names: tuple[str, ...]) -> None:
    """``together[name][key]`` equals ``alone[name][key]`` to the tolerance, for every name and key."""
    for name in names:
        assert together[name].keys() == alone[name].keys(), name
        for kind, table in alone[name].items():
            np.testing.assert_allclose(together[name][kind], table, rtol=0, atol=TOLERANCE, err_msg=f"{name} {kind}")


@pytest.mark.parametrize("method", ["ablation", "gradient"])
def test_importance_over_two_processes_gives_one_processs_tables(capsys, tmp_path, method):
    arguments = ("importance", "-c", DEMO, "--limit", "8", "--method", method, "--json")
    together, alone = two_processes(tmp_path, *arguments), one_process(capsys, *arguments)
    for name in ("corpus", "metric", "method", "examples", "unknown_pairs"):
        assert together[name] == alone[name], name
    assert together["examples"] == 8
    assert together["baseline"] == pytest.approx(alone["baseline"], abs=TOLERANCE)
    tables = ("scores", "drops") + (("gradient", "importance", "normalized") if method == "gradient" else ())
    assert_tables_close(together, alone, tables)
    drop = lambda document: {(head["kind"], head["layer"], head["head"]): head["drop"]  # noqa: E731
                             for head in document["ranking"]}
    assert drop(together) == pytest.approx(drop(alone), abs=TOLERANCE)


def test_stats_over_two_processes_gives_one_processs_tables_and_rank_0_writes(capsys, tmp_path):
    arguments = ("stats", "-c", DEMO, "--decode", "--json")
    together = two_processes(tmp_path, *arguments, "-o", tmp_path / "together.npz")
    alone = one_process(capsys, *arguments, "-o", tmp_path / "alone.npz")
    assert together["sentences"] == alone["sentences"] == 12
    assert together["outputs"] == alone["outputs"]  # each greedy output decoded alone, by whichever process
    assert together["runs"].keys() == alone["runs"].keys() == {"reference", "decoded"}
    for run, kinds in alone["runs"].items():
        assert together["runs"][run].keys() == kinds.keys()
        for kind, statistics in kinds.items():
            typical = statistics.pop("typical")  # sentence numbers: the most and least typical per head
            assert together["runs"][run][kind].pop("typical") == typical, (run, kind)
            assert_tables_close(together["runs"][run], kinds, (kind,))
    written, expected = np.load(tmp_path / "together.npz"), np.load(tmp_path / "alone.npz")
    assert written.files == expected.files
    for name in expected.files:
        np.testing.assert_allclose(written[name], expected[name], rtol=0, atol=TOLERANCE, err_msg=name)


def test_a_user_error_is_one_line_from_rank_0_alone(tmp_path):
    """Every process checks the whole input and meets the same error: saying it once is enough."""
    missing = tmp_path / "missing.tsv"
    (_, err), other = torchrun(["-m", "attnviz", "stats", "-c", DEMO, "--data", missing], processes=2,
                               log_dir=tmp_path / "logs", succeeds=False)
    assert err.splitlines() == [f"attnviz: error: {missing}: no such file"]
    assert other == ("", "")
