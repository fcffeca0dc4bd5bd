"""Never lose a good file: every writer, on a real full disk and in a real read-only folder (small tmpfs
mounts made by the test; attnviz's CI runs as root), leaves the file that was there byte-identical, no
temporary behind, and says so in one line. Damaged settings never stop the app; training checks its
output folder before step 1; a killed training always leaves a state it can resume from."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnviz.cli import main
from models import build_model
from models.storage.checkpoint import save_checkpoint
from models.storage.files import WriteError, write_bytes
from models.storage.tensor_files import write_safetensors
from tests.helpers import tiny_config

ROOT = Path(__file__).resolve().parent.parent


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.decode().strip()}): the disk tests need root")


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB file system: a good file in it, then filled up so that nothing more fits."""
    folder = tmp_path / "disk"
    mount_tmpfs(folder, "1m")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Take every free byte of the file system."""
    for index, chunk in enumerate((65536, 512, 1)):
        with open(folder / f"filler{index}", "wb", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError:
                pass


def left_behind(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.endswith(".partial")]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, char_tokenizer):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny") / "tiny.safetensors"
    return save_checkpoint(path, build_model(tiny_config("transformer-preln")), char_tokenizer, char_tokenizer)


WRITERS = {
    "export npz": lambda out, ckpt: ["export", "-c", ckpt, "abc", "-o", out],
    "render png": lambda out, ckpt: ["render", "-c", ckpt, "abc", "--kind", "cross", "-o", out],
    "render svg": lambda out, ckpt: ["render", "-c", ckpt, "abc", "--kind", "cross", "-o", out],
    "render all heads": lambda out, ckpt: ["render", "-c", ckpt, "abc", "--kind", "cross", "--head", "all", "-o", out],
    "convert": lambda out, ckpt: None,
}
SUFFIXES = {"export npz": ".npz", "render png": ".png", "render svg": ".svg", "render all heads": ".png"}


@pytest.mark.parametrize("writer", list(SUFFIXES))
def test_a_full_disk_keeps_the_old_file(writer, small_disk, tiny_checkpoint, capsys, qapp):
    target = small_disk / f"good{SUFFIXES[writer]}"
    target.write_bytes(b"the good old file" * 10)
    before = target.read_bytes()
    fill(small_disk)
    code = main([str(arg) for arg in WRITERS[writer](target, tiny_checkpoint)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith(f"attnviz: error: {target}: could not write it")
    assert target.read_bytes() == before and left_behind(small_disk) == []


def test_a_full_disk_keeps_an_old_checkpoint(small_disk, tiny_checkpoint, char_tokenizer):
    target = small_disk / "model.safetensors"
    target.write_bytes(Path(tiny_checkpoint).read_bytes()[:2000])  # whatever was there: it must survive as it was
    before = target.read_bytes()
    fill(small_disk)
    with pytest.raises(WriteError, match="could not write it"):
        save_checkpoint(target, build_model(tiny_config("transformer-preln")), char_tokenizer, char_tokenizer)
    assert target.read_bytes() == before and left_behind(small_disk) == []


def test_a_read_only_folder_is_one_line_and_exit_1(tmp_path, tiny_checkpoint, capsys):
    folder = tmp_path / "readonly"
    mount_tmpfs(folder, "1m")
    try:
        (folder / "old.npz").write_bytes(b"old")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        for argv in (["export", "-c", tiny_checkpoint, "abc", "-o", folder / "old.npz"],
                     ["render", "-c", tiny_checkpoint, "abc", "--kind", "cross", "-o", folder / "x.svg"],
                     ["convert", tiny_checkpoint, "-o", folder / "x.safetensors"]):
            code = main([str(arg) for arg in argv])
            err = capsys.readouterr().err.strip().splitlines()
            assert code == 1 and len(err) == 1 and "cannot write in" in err[0] and "Read-only file system" in err[0]
        assert (folder / "old.npz").read_bytes() == b"old" and not (folder / "x.svg").exists()
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_files_get_the_umask_mode_and_a_folder_path_is_refused(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_bytes(tmp_path / "a.bin", b"x")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    finally:
        os.umask(old)
    with pytest.raises(WriteError, match="is a folder"):
        write_bytes(tmp_path, b"x")


def test_train_checks_its_output_folder_before_step_1(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in ("abc", "bca", "cab", "hag", "gah") * 4))
    started = time.perf_counter()
    code = main(["train", "--data", str(data), "--arch", "gru-additive", "--tokenizer", "char", "--steps", "100000",
                 "--out", str(tmp_path / "missing" / "dir" / "m.safetensors"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err == [f"attnviz: error: {tmp_path / 'missing' / 'dir' / 'm.safetensors'}: the folder "
                                 f"{tmp_path / 'missing' / 'dir'} does not exist"]
    assert time.perf_counter() - started < 20  # it did not train 100,000 steps first


def test_damaged_settings_fall_back_to_defaults_and_the_app_starts(tmp_path):
    config = tmp_path / "config" / "attnviz"
    config.mkdir(parents=True)
    (config / "attnviz.conf").write_text("[run]\nbeam=abc\nmax_len=abc\nmode=sideways\n"
                                         "[window]\ngeometry=hello\nstate=@ByteArray(garbage)\n"
                                         "[view]\nmasks=perhaps\ncolormap=42\n[files]\nrecent=7\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "QT_QPA_PLATFORM": "offscreen"}
    result = subprocess.run([sys.executable, "-m", "benchmarks.startup_probe", repr(time.time())], capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "heatmap" in result.stdout and "Traceback" not in result.stderr


KILL_DRIVER = """
import sys
from models.text.pairs import read_pairs
from models.training.trainer import TrainingConfig, build_tokenizers, train
from models.nn.config import make_config
pairs = read_pairs(sys.argv[1])
source, target = build_tokenizers(pairs, "char", 0, True)
config = make_config("gru-additive", source.vocab_size, target.vocab_size, hidden=16)
train(config, source, target, pairs, pairs[:4], out_path=sys.argv[2],
      config=TrainingConfig(steps=int(sys.argv[3]), batch_size=8, eval_every=10_000, save_every=1, progress=False,
                            validation_sentences=2), resume=sys.argv[4] == "resume")
"""


@pytest.mark.slow
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_training_killed_while_saving_can_always_resume(kill, tmp_path):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in ("abc", "bca", "cab", "hag", "gah", "ace") * 4))
    out = tmp_path / "m.safetensors"
    driver = [sys.executable, "-c", KILL_DRIVER, str(data), str(out)]
    run = subprocess.Popen(driver + ["100000", "fresh"], cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not out.exists() and time.time() < deadline:  # saving every step: the kill lands in or near a save
        time.sleep(0.05)
    time.sleep(0.3)
    run.send_signal(kill)
    run.wait(timeout=60)
    from models.training.trainer import _read_state, state_path

    if kill != signal.SIGKILL:  # a process killed outright cannot remove its temporary file
        assert left_behind(tmp_path) == []
    _, document = _read_state(state_path(out))  # the state file alone is a consistent point
    resumed = subprocess.run(driver + [str(document["step"] + 2), "resume"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert _read_state(state_path(out))[1]["step"] == document["step"] + 2
    assert left_behind(tmp_path) == []  # the resumed run removed whatever the killed one left


def test_a_resumed_training_removes_what_a_killed_save_left_behind(tmp_path):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in ("abc", "bca", "cab") * 4))
    out = tmp_path / "m.safetensors"
    driver = [sys.executable, "-c", KILL_DRIVER, str(data), str(out)]
    assert subprocess.run(driver + ["2", "fresh"], cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    stale = [tmp_path / ".m.safetensors.k1ll3d.partial", tmp_path / ".m.train-state.safetensors.k1ll3d.partial"]
    for path in stale:  # as SIGKILL in the middle of a save leaves them
        path.write_bytes(b"half a file")
    (tmp_path / ".other.safetensors.x.partial").write_bytes(b"not ours")
    resumed = subprocess.run(driver + ["3", "resume"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert left_behind(tmp_path) == [".other.safetensors.x.partial"]


@pytest.mark.parametrize("built", [False, True], ids=["while-building", "while-loading"])
def test_ctrl_c_closes_the_app_cleanly_and_saves_its_settings(tmp_path, random_checkpoint, built):
    config = tmp_path / "config"
    env = {**os.environ, "XDG_CONFIG_HOME": str(config), "QT_QPA_PLATFORM": "offscreen"}
    # launched as `attnviz CHECKPOINT --device cpu`, the probe saying when the window is shown (no example: no run)
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.startup_probe", repr(time.time()),
                                str(random_checkpoint), "--device", "cpu"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().startswith("shown")
        if built:  # the window built, the model loading behind it (else: at once, while torch is imported)
            assert process.stdout.readline().startswith("built")
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    errors = process.stderr.read()
    assert code == 0 and "Traceback" not in errors and "QThread" not in errors, errors[-500:]
    if built:  # a window that was built keeps its layout; one closed while building has nothing to keep yet
        assert "geometry=@ByteArray(" in (config / "attnviz" / "attnviz.conf").read_text(encoding="utf-8")


TERMINATED_DRIVER = """
import os, signal, sys, time
import models.storage.tensor_files
real = models.storage.tensor_files._write_safetensors_file
saves = []
def save_then_terminated(*args, **kwargs):  # the third file is written, then SIGTERM lands before it is in place
    real(*args, **kwargs)
    saves.append(args[0])
    if len(saves) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
models.storage.tensor_files._write_safetensors_file = save_then_terminated
""" + KILL_DRIVER


def test_sigterm_in_the_middle_of_a_save_removes_the_half_written_file(tmp_path):
    """``kill`` (SIGTERM) ends training through its cleanup, as Ctrl+C does: the temporary file of the save it
    interrupted is removed, the files there before are intact, and the run resumes from them."""
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in ("abc", "bca", "cab", "hag", "gah", "ace") * 4))
    out = tmp_path / "m.safetensors"
    driver = [sys.executable, "-c", TERMINATED_DRIVER, str(data), str(out)]
    run = subprocess.run(driver + ["100000", "fresh"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr[-2000:]
    assert left_behind(tmp_path) == []
    from models.training.trainer import _read_state, state_path

    _, document = _read_state(state_path(out))
    resumed = subprocess.run([sys.executable, "-c", KILL_DRIVER, str(data), str(out), str(document["step"] + 1),
                              "resume"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def test_an_interrupt_at_any_line_of_a_save_leaves_no_temporary_file(tmp_path):
    """Ctrl+C or SIGTERM (raised as SystemExit by training) can land between any two lines of the writer,
    also between creating its temporary file and the ``try`` that removes it; the interrupt is raised here
    from a trace function at each line in turn, once per save."""
    import models.storage.files as files

    target = tmp_path / "m.safetensors"
    lines_seen = 0
    for when in range(1, 200):
        counter = {"line": 0, "raised": False}

        def tracer(frame, event, _arg, counter=counter, when=when):
            if frame.f_code.co_filename != files.__file__:
                return None
            if event == "line" and not counter["raised"]:
                counter["line"] += 1
                if counter["line"] == when:
                    counter["raised"] = True
                    raise KeyboardInterrupt
            return tracer

        sys.settrace(tracer)
        try:
            files.write_bytes(target, b"new content")
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert left_behind(tmp_path) == [], f"interrupted at line event {when}"
        if not counter["raised"]:  # the save ran to its end: every line has had its turn
            lines_seen = counter["line"]
            break
    assert lines_seen > 10 and target.read_bytes() == b"new content"


def test_safetensors_written_tensor_by_tensor_read_back_with_safetensors_own_reader(tmp_path):
    """write_safetensors writes each tensor from its own memory (no copy of the file's bytes); safetensors'
    own reader gets every dtype, shape (a scalar, an empty and a strided tensor among them) and the metadata back."""
    from safetensors import safe_open

    tensors = {"weight": torch.randn(3, 5), "strided": torch.randn(5, 3).t(), "half": torch.randn(4).half(),
               "brain": torch.randn(2, 2).bfloat16(), "ids": torch.arange(7), "flag": torch.tensor(True),
               "scalar": torch.tensor(2.5, dtype=torch.float64), "empty": torch.empty(0, 4)}
    path = write_safetensors(tmp_path / "t.safetensors", tensors, {"format": "test"})
    with safe_open(str(path), "pt") as read:
        assert read.metadata() == {"format": "test"}
        assert sorted(read.keys()) == sorted(tensors)
        for name, tensor in tensors.items():
            back = read.get_tensor(name)
            assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor), name
