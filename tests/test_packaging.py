"""What a user gets from `pip install .`: a wheel that carries the demos and finds them from anywhere, a
command line that answers --help without loading torch, demos named by their name."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attnviz.cli import main
from attnviz.state.demos import DEMO_FOLDER, demo_checkpoints, demo_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' staging folder: stale files would ship
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
                    "-w", str(folder)], check=True, capture_output=True, timeout=600)
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    return next(folder.glob("attnviz-*.whl"))


@pytest.mark.slow
def test_the_wheel_carries_every_demo_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"attnviz/resources/checkpoints/{path.name}" for path in demo_checkpoints()}
    records = json.loads((ROOT / "resources" / "checkpoints" / "demos.json").read_text(encoding="utf-8"))
    assert len(shipped) == len(records) >= 8 and shipped <= names
    assert {"attnviz/resources/checkpoints/demos.json", "attnviz/resources/icons/attnviz.svg"} <= names
    metadata = zipfile.ZipFile(wheel).read(next(name for name in names if name.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in metadata


@pytest.mark.slow
def test_an_installed_wheel_finds_its_demos_outside_the_source_tree(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    probe = ("import attnviz.state.demos as d, json; "
             "print(json.dumps([str(d.RESOURCES), [p.name for p in d.demo_checkpoints()], "
             "d.demo_example(d.DEFAULT_DEMO)]))")
    result = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {probe}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    folder, names, example = json.loads(result.stdout)
    assert folder == str(target / "attnviz" / "resources")
    assert names == [path.name for path in demo_checkpoints()] and example == "The Lord is my shepherd."


def test_help_and_version_load_no_torch():
    probe = ("import sys, contextlib, io\nfrom attnviz.cli import main\n"
             "for argv in (['--help'], ['--version']):\n"
             "    with contextlib.redirect_stdout(io.StringIO()):\n"
             "        try: main(argv)\n"
             "        except SystemExit: pass\n"
             "print(sorted({'torch', 'PySide6', 'pyqtgraph'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.stdout.strip() == "[]", result.stderr


def test_a_demo_is_named_by_its_name(capsys):
    assert demo_path("piglatin-gru-additive") == DEMO_FOLDER / "piglatin-gru-additive.safetensors"
    assert demo_path("no-such-demo") is None and demo_path("../checkpoints/x") is None
    assert main(["translate", "-c", "piglatin-gru-additive", "team", "queen"]) == 0
    assert capsys.readouterr().out == "eamtay\neenquay\n"
    assert main(["demos", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [demo["name"] for demo in listed] == [path.stem for path in demo_checkpoints()]
    assert listed[0] == {"name": "en-es-transformer", "arch": "transformer-preln",
                         "path": str(DEMO_FOLDER / "en-es-transformer.safetensors"),
                         "example": "The Lord is my shepherd."}


@pytest.mark.parametrize("platform", ["xcb", ""])
def test_no_display_is_one_line_and_exit_1_not_a_qt_abort(platform):
    import os

    env = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = platform
    result = subprocess.run([sys.executable, "-m", "attnviz"], capture_output=True, text=True, timeout=120,
                            env=env, cwd=ROOT)
    assert result.returncode == 1  # Qt's own failure is SIGABRT (-6) and a core dump
    assert result.stderr.strip().splitlines() == [
        "attnviz: error: no display to open the window on (DISPLAY is not set); or run headless with "
        "QT_QPA_PLATFORM=offscreen, or draw images with `attnviz render`"]


def test_info_reports_the_steps_trained_and_a_character_vocabulary(capsys):
    assert main(["info", "piglatin-gru-additive"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "source       char tokenizer, 32 tokens: ' -abcdefghijklmnopqrstuvwxyz'" in out
    assert "trained      8,000 steps" in out
    assert main(["info", "--json", "piglatin-gru-additive"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 8000 and summary["target_tokenizer"]["characters"] == " -abcdefghijklmnopqrstuvwxyz"
