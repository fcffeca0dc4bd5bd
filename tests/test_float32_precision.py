"""The same numbers on every device: float32 is placed with TF32 off (models/inference/translator.py
``float32_precision``) unless the user asks for speed (--tf32, ATTNVIZ_TF32=1); and what is computed on weights
rounded to 16 bits says so in one line. The flags are the process's, so each test puts them back."""

from __future__ import annotations

import pytest
import torch

from attnviz.state.demos import demo_path
from models.nn.precisions import rounded_weights_notice
from models.inference.translator import TF32_VARIABLE, Translator
from models.storage.checkpoint import load_checkpoint
from tests.test_cli import cli


def tf32_flags() -> tuple[bool, bool, str]:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


@pytest.fixture(autouse=True)
def flags_put_back(monkeypatch):
    monkeypatch.delenv(TF32_VARIABLE, raising=False)
    before = tf32_flags()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[:2]
    torch.set_float32_matmul_precision(before[2])


def allow_everything() -> None:
    """torch's own defaults lean to speed: cuDNN's TF32 is on until someone turns it off."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")


def test_placing_a_model_turns_tf32_off_unless_asked_for(monkeypatch):
    checkpoint = load_checkpoint(demo_path("piglatin-gru-additive"))
    allow_everything()
    translator = Translator(checkpoint, "cpu")
    assert tf32_flags() == (False, False, "highest")
    allow_everything()
    translator.to("cpu")  # moved to another device: placed again, by the same rule
    assert tf32_flags() == (False, False, "highest")
    Translator(checkpoint, "cpu", tf32=True)
    assert tf32_flags() == (True, True, "high")
    monkeypatch.setenv(TF32_VARIABLE, "1")
    Translator(checkpoint, "cpu").to("cpu")
    assert tf32_flags() == (True, True, "high")


def test_the_tf32_flag_parses_and_reaches_the_placement(capsys):
    allow_everything()
    code, out, _ = cli(capsys, "translate", "-c", "piglatin-gru-additive", "hello")
    assert code == 0 and out.strip() and tf32_flags() == (False, False, "highest")
    code, out, _ = cli(capsys, "translate", "-c", "piglatin-gru-additive", "--tf32", "hello")
    assert code == 0 and out.strip() and tf32_flags() == (True, True, "high")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_contributions_and_importance_of_rounded_weights_say_so_in_one_line(capsys, dtype, tmp_path):
    notice = f"attnviz: note: {rounded_weights_notice(dtype)}"
    assert "rounded to " + dtype in notice
    code, _, err = cli(capsys, "contributions", "-c", "en-es-transformer", "--limit", "1", "--dtype", dtype)
    assert code == 0 and err.splitlines() == [notice]
    code, _, err = cli(capsys, "importance", "-c", "piglatin-gru-additive", "--limit", "1", "--dtype", dtype)
    assert code == 0 and notice in err.splitlines()
    code, _, err = cli(capsys, "export", "-c", "en-es-transformer", "--contributions", "--ig-steps", "2",
                       "--dtype", dtype, "The cat.", "-o", tmp_path / "a.npz")
    assert code == 0 and notice in err.splitlines()
    code, _, err = cli(capsys, "contributions", "-c", "en-es-transformer", "--limit", "1")
    assert code == 0 and "rounded" not in err
