"""``attnviz convert --trust`` on torch.save files holding no model at all: one line, exit 1."""

from __future__ import annotations

import torch

from tests.test_cli import assert_one_line_error, cli


class Steps(int):
    """A subclass of int, as a training script might pickle a step counter: unpickled with trust, it becomes an
    inert stand-in that never ran a module's constructor."""


def test_a_pickled_int_is_one_line(capsys, tmp_path):
    path = tmp_path / "seven.pt"
    torch.save(7, path)
    code, _, err = cli(capsys, "convert", "--trust", path, "-o", tmp_path / "out.safetensors")
    assert_one_line_error(code, err, str(path), "a file holding int")


def test_a_pickled_int_subclass_is_one_line(capsys, tmp_path):
    path = tmp_path / "steps.pt"
    torch.save(Steps(7), path)
    code, _, err = cli(capsys, "convert", "--trust", path, "-o", tmp_path / "out.safetensors")
    assert_one_line_error(code, err, str(path), "no state dict")
    assert not (tmp_path / "out.safetensors").exists()
