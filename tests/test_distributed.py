"""Training under ``torchrun`` with two CPU processes (gloo): it exits cleanly, rank 0 alone writes a
checkpoint that loads, and splitting each global batch between the processes gives the weights that one
process gets from the whole batch, up to the order of float sums (no dropout).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from models.storage.checkpoint import load_checkpoint
from models.training.trainer import state_path
from tests import distributed_driver
from tests.helpers import torchrun

DRIVER = Path(__file__).resolve().parent / "distributed_driver.py"


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)  # the in-process reference run must not join a process group


@pytest.fixture
def corpus(tmp_path) -> Path:
    words = [a + b + c for a in "abcd" for b in "efgh" for c in "abcd"][:60]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{word}\t{word[::-1]}\n" for word in words), encoding="utf-8")
    return path


def driver_arguments(corpus: Path, out: Path) -> list[str]:
    return ["--data", str(corpus), "--arch", "gru-additive", "--out", str(out)]


def test_two_processes_train_like_one_process_with_the_whole_batch(corpus, tmp_path):
    out = tmp_path / "ddp.safetensors"
    output = "".join(stdout for stdout, _ in torchrun([DRIVER, *driver_arguments(corpus, out)], processes=2,
                                                      log_dir=tmp_path / "logs"))
    assert "rank 0 of 2: step 5" in output and "rank 1 of 2: step 5" in output

    checkpoint = load_checkpoint(out)
    assert checkpoint.provenance["processes"] == 2 and checkpoint.provenance["steps"] == 5
    assert checkpoint.provenance["rank"] == "0"  # only rank 0 saves
    assert state_path(out).is_file() and not list(tmp_path.glob("*.partial"))

    single = tmp_path / "single.safetensors"
    distributed_driver.main(driver_arguments(corpus, single))  # one process, here
    assert load_checkpoint(single).provenance["processes"] == 1
    together, alone = load_file(str(out)), load_file(str(single))
    assert together.keys() == alone.keys()
    # Two processes with gloo sum the halves' gradients in another order than one process summing the whole
    # batch, so the runs agree only up to float rounding, and Adam divides each update by the gradient's own
    # scale: a weight whose gradient is pure rounding noise (the additive score's bias shifts every score
    # equally, which softmax ignores) still takes full-sized steps, in any direction. What must hold: every
    # tensor agrees to a relative norm of 1e-3 — each process training on its own half of the batch, without
    # averaging gradients, differs by 0.006-0.19 here — and no weight moves further apart than Adam's
    # steps can take it (learning rate 5e-3 per step, 5 steps).
    for name in sorted(together):
        difference = (together[name] - alone[name]).abs()
        assert difference.max() <= 5 * 5e-3, name
        if name != "decoder.attention.score.bias":
            assert difference.norm() <= 1e-3 * alone[name].norm(), name
