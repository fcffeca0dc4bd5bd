"""The first minutes with the command line: answers that need no model come without importing torch, and a
foreign checkpoint (a Hugging Face folder) is accepted wherever a checkpoint is, converted once and cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.cli import COMMANDS, main
from models.storage.checkpoint import describe_checkpoint, load_checkpoint
from models.storage.metadata import describe_file
from attnviz.state.demos import demo_checkpoints

ROOT = Path(__file__).resolve().parent.parent

# Each argv runs through attnviz.cli.main in one fresh interpreter; after each, torch must still be absent.
NO_TORCH_PROGRAM = """
import contextlib, io, json, sys
import attnviz.cli
report = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = attnviz.cli.main(argv)
        except SystemExit as exit:
            code = exit.code
    report.append({"argv": argv, "code": code, "torch": "torch" in sys.modules, "out": out.getvalue(),
                   "err": err.getvalue()})
print(json.dumps(report))
"""


def run_without_torch(argvs: list[list[str]]) -> list[dict]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", NO_TORCH_PROGRAM, json.dumps(argvs)], capture_output=True,
                          text=True, cwd=ROOT, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_answers_that_need_no_model_never_import_torch(random_checkpoint):
    random_checkpoint = str(random_checkpoint)
    argvs = [["--help"], ["--version"], ["gui", "--help"], *([name, "--help"] for name in COMMANDS),
             ["demos"], ["demos", "--json"], ["info", "-c", "en-es-transformer"], ["info", "--json", random_checkpoint],
             ["info", "piglatin-gru-transformer-decoder"],
             *([name, "-c", "en-es-transfomer", "hello"] for name in ("translate", "evaluate", "stats")),
             ["info", "-c", "en-es-transfomer"], ["render", "-c", "en-es-transfomer", "hi", "-o", "x.png"],
             ["translate", "-c", "missing/model.safetensors", "hi"],
             ["translate", "-c", "en-es-transformer", "--ablate", "cross:9:0", "hi"]]
    report = run_without_torch(argvs)
    assert [entry["argv"] for entry in report if entry["torch"]] == []
    answers = {" ".join(entry["argv"]): entry for entry in report}
    assert answers["info -c en-es-transformer"]["code"] == 0
    assert "transformer-preln" in answers["info -c en-es-transformer"]["out"]
    assert json.loads(answers[f"info --json {random_checkpoint}"]["out"])["parameters"] > 0
    misspelt = answers["translate -c en-es-transfomer hello"]
    assert misspelt["code"] == 1 and "did you mean en-es-transformer?" in misspelt["err"]
    assert answers["demos"]["code"] == 0 and "piglatin-gru-additive" in answers["demos"]["out"]
    assert "cannot ablate cross:9:0" in answers["translate -c en-es-transformer --ablate cross:9:0 hi"]["err"]


@pytest.mark.parametrize("path", [*demo_checkpoints(), "random"], ids=lambda path: Path(path).stem)
def test_info_read_from_the_header_says_what_the_loaded_model_does(random_checkpoint, path):
    path = random_checkpoint if path == "random" else path
    assert describe_file(path) == describe_checkpoint(load_checkpoint(path))


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.test_import_t5 import SENTENCES, build

    folder, _, _ = build(tmp_path_factory.mktemp("t5-small-like"), "v1.1")
    return folder, SENTENCES[1]


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_hugging_face_folder_is_a_checkpoint_converted_once(capsys, monkeypatch, tmp_path, t5_folder):
    folder, sentence = t5_folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    converted = tmp_path / "t5.safetensors"
    assert cli(capsys, "convert", folder, "-o", converted)[0] == 0
    expected = cli(capsys, "translate", "-c", converted, "--max-len", "5", sentence)
    assert expected[0] == 0

    assert cli(capsys, "translate", "-c", folder, "--max-len", "5", sentence)[:2] == expected[:2]
    cached = list((tmp_path / "cache" / "attnviz" / "converted").rglob("*"))
    cached = [path for path in cached if path.is_file()]
    assert len(cached) == 1 and cached[0].name == f"{folder.name}.safetensors"
    written = cached[0].stat().st_mtime_ns
    assert cli(capsys, "translate", "-c", folder, "--max-len", "5", sentence)[:2] == expected[:2]
    assert cached[0].stat().st_mtime_ns == written  # read from the cache, not converted again
    described = run_without_torch([["info", str(folder)]])[0]  # found in the cache without importing torch
    assert described["code"] == 0 and not described["torch"] and f"{folder.name}.safetensors" in described["out"]
    code, out, _ = cli(capsys, "info", "--json", folder)
    assert code == 0 and json.loads(out)["arch"] == load_checkpoint(converted).config.arch
    assert cli(capsys, "render", "-c", folder, sentence, "--kind", "cross", "--max-len", "3",
               "-o", tmp_path / "cross.svg")[0] == 0


def test_a_changed_folder_is_converted_again(capsys, monkeypatch, tmp_path, t5_folder):
    folder, sentence = t5_folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli(capsys, "info", folder)[0] == 0
    config = folder / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    assert cli(capsys, "info", folder)[0] == 0
    assert len(list((tmp_path / "cache" / "attnviz" / "converted").rglob("*.safetensors"))) == 2


def test_a_folder_that_needs_answers_names_attnviz_convert(capsys, monkeypatch, tmp_path):
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "fairseq"
    shutil.copytree(ROOT / "tests" / "data" / "fairseq" / "transformer-preln", folder)
    (folder / "dict.src.txt").rename(folder / "dict.en.txt")
    (folder / "dict.tgt.txt").rename(folder / "dict.de.txt")
    code, out, err = cli(capsys, "translate", "-c", folder, "hello")
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"attnviz: error: {folder}") and f"attnviz convert {folder} -o" in lines[0]
    assert not list((tmp_path / "cache").rglob("*.safetensors"))


def test_attnviz_dtype_opens_the_window_with_weights_in_that_precision(tmp_path):
    """``attnviz --dtype bfloat16 DEMO`` as typed: the window (offscreen) opens the model in bfloat16, and the saved
    choice of the Weights box is left as it was."""
    import time

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "benchmarks.startup_probe", repr(time.time()), "--dtype", "bfloat16",
                             "piglatin-gru-additive"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "weights bfloat16" in result.stdout.splitlines()
    settings = (tmp_path / "config" / "attnviz" / "attnviz.conf").read_text()
    assert "bfloat16" not in settings


def test_the_command_line_says_what_it_takes():
    import attnviz.cli
    from attnviz.cli import build_parser

    assert all(f"attnviz {name} " in attnviz.cli.__doc__ for name in COMMANDS)  # every subcommand, listed
    parser = build_parser()
    overview = parser.format_help()
    assert "attnviz [CHECKPOINT|FOLDER|DEMO]" in overview and "Hugging Face" in overview
    gui = parser.parse_args(["gui", "--dtype", "bfloat16", "en-es-transformer"])
    assert gui.dtype == "bfloat16" and gui.checkpoint.endswith("en-es-transformer.safetensors")
    importance = COMMANDS["importance"].__doc__
    synopsis, first_paragraph = importance.split("\n\n")[:2]
    assert all(option in synopsis for option in ("--metric nll|chrf|exact", "--method", "--prune-curve"))
    assert "by default, the references' mean NLL" in first_paragraph and "chrF" not in first_paragraph


def test_every_command_warns_through_one_function():
    """``attnviz: warning:`` and ``attnviz: error:`` are written in one place (common.warn, common.error)."""
    written = [path.name for path in sorted((ROOT / "attnviz" / "cli").glob("*.py"))
               for line in path.read_text(encoding="utf-8").splitlines()
               if ('"attnviz: warning' in line or '"attnviz: error' in line) and "print(" in line]
    assert written == ["common.py", "common.py"]


def test_the_readme_installs_the_cpu_build_of_torch_from_pytorchs_index():
    """Plain PyPI gives Linux the CUDA build: the set-up names PyTorch's CPU index and the Python versions, outside
    the test command that .ci/run reads and runs."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    torch_pin = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pip install" in line)
    version = re.search(r"torch==([\d.]+)", torch_pin).group(1)
    assert f"pip install torch=={version} --index-url https://download.pytorch.org/whl/cpu" in setup
    oldest = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"Python {oldest} or newer" in setup
    test_command = setup.split("Install the test extras and run the whole test suite:", 1)[1].split("```")[1]
    assert "index-url" not in test_command and "python -m pytest" in test_command


def test_a_snapshot_folder_given_as_a_checkpoint_names_its_files(capsys, tmp_path, random_checkpoint):
    import shutil

    folder = tmp_path / "run.snapshots"
    folder.mkdir()
    for step in (10, 20):
        shutil.copy(random_checkpoint, folder / f"step-{step:06d}.safetensors")
    code, out, err = cli(capsys, "translate", "-c", folder, "abc")
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and len(lines) == 1
    assert f"give one of them, e.g. {folder / 'step-000020.safetensors'}" in lines[0]
    assert f"attnviz render --snapshots {folder}" in lines[0]


def test_a_toolkit_file_converts_again_when_a_file_beside_it_changes(capsys, monkeypatch, tmp_path):
    """fairseq's dictionaries lie beside its checkpoint: a changed dictionary is a changed model."""
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "fairseq"
    shutil.copytree(ROOT / "tests" / "data" / "fairseq" / "transformer-preln", folder)
    checkpoint = folder / "checkpoint_last.pt"
    converted = tmp_path / "fairseq.safetensors"
    assert cli(capsys, "convert", checkpoint, "-o", converted)[0] == 0
    expected = cli(capsys, "translate", "-c", converted, "--max-len", "4", "hello world")
    assert cli(capsys, "translate", "-c", checkpoint, "--max-len", "4", "hello world")[:2] == expected[:2]
    dictionary = folder / "dict.tgt.txt"
    os.utime(dictionary, ns=(dictionary.stat().st_atime_ns, dictionary.stat().st_mtime_ns + 10**9))
    assert cli(capsys, "info", checkpoint)[0] == 0
    assert len(list((tmp_path / "cache").rglob("*.safetensors"))) == 2
