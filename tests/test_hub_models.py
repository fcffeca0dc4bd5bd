"""Hugging Face model ids as checkpoints: a model in the local Hugging Face cache (the layout huggingface_hub writes:
``models--ORG--NAME/refs/main``, ``snapshots/COMMIT/`` links into ``blobs/``) opens by its id wherever a checkpoint
is taken, converted once; nothing is downloaded unless ``--download`` asks, and a download that cannot reach the Hub
is one line. The model is a real tiny Marian folder written by transformers' ``save_pretrained``, moved into that
layout. No test here reaches the network."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import huggingface_hub.constants
import pytest

from attnviz.cli import main
from models.storage.hub import folder_files
from tests.test_cli_startup import run_without_torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # MarianTokenizer: "pip install sacremoses"

ROOT = Path(__file__).resolve().parent.parent
MODEL_ID = "Helsinki-NLP/opus-mt-en-es"
REVISION = "3f1c2b7a9d8e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"
SENTENCE = "the cat is on the house"


def move_into_hub_cache(folder: Path, cache: Path, model_id: str, revision: str = REVISION) -> Path:
    """``folder``'s files moved into the cache layout huggingface_hub writes; returns the snapshot folder."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshot, blobs = repo / "snapshots" / revision, repo / "blobs"
    for made in (repo / "refs", snapshot, blobs):
        made.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for file in sorted(folder.iterdir()):
        blob = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.move(file, blobs / blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob))
    return snapshot


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class HubListener:
    """A local TCP port standing for the Hub: it records every connection made to it, and answers none."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.socket.setblocking(False)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def connections(self) -> int:
        count = 0
        while True:
            try:
                connection, _ = self.socket.accept()
            except BlockingIOError:
                return count
            connection.close()
            count += 1

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty Hugging Face cache (HF_HUB_CACHE), attnviz's converted cache, and HF_ENDPOINT at a local listener."""
    listener = HubListener()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", listener.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # other test modules set it for transformers
    yield tmp_path / "hf-cache", listener
    listener.close()


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    """A tiny Marian folder (save_pretrained) and what ``attnviz translate`` says with it converted by hand."""
    from tests.test_import_marian import build_marian

    folder = build_marian(tmp_path_factory.mktemp("opus-mt-en-es"))[0]
    converted = tmp_path_factory.mktemp("converted") / "by-hand.safetensors"
    assert main(["convert", str(folder), "-o", str(converted)]) == 0
    return folder, converted


def cached_model(marian_folder, tmp_path, cache: Path, model_id: str = MODEL_ID) -> Path:
    copy = tmp_path / "save_pretrained"
    shutil.copytree(marian_folder[0], copy)
    return move_into_hub_cache(copy, cache, model_id)


def test_a_model_id_in_the_hugging_face_cache_is_a_checkpoint_converted_once(capsys, tmp_path, hub, marian_folder):
    cache, listener = hub
    snapshot = cached_model(marian_folder, tmp_path, cache)
    expected = cli(capsys, "translate", "-c", marian_folder[1], "--max-len", "6", SENTENCE)
    assert expected[0] == 0 and expected[1].strip()

    assert cli(capsys, "translate", "-c", MODEL_ID, "--max-len", "6", SENTENCE)[:2] == expected[:2]
    converted = [path for path in (tmp_path / "cache" / "attnviz" / "converted").rglob("*") if path.is_file()]
    assert [path.name for path in converted] == ["opus-mt-en-es.safetensors"]  # named by the id, not the commit
    written = converted[0].stat().st_mtime_ns
    assert cli(capsys, "translate", "-c", MODEL_ID, "--max-len", "6", SENTENCE)[:2] == expected[:2]
    assert converted[0].stat().st_mtime_ns == written  # read from the cache, not converted again

    described = run_without_torch([["info", MODEL_ID], ["info", "--json", "-c", MODEL_ID]])
    assert [entry["code"] for entry in described] == [0, 0] and not any(entry["torch"] for entry in described)
    assert "opus-mt-en-es.safetensors" in described[0]["out"]
    provenance = json.loads(described[1]["out"])["provenance"]
    assert provenance["model_id"] == MODEL_ID and provenance["converted_from"] == str(snapshot.resolve())
    assert cli(capsys, "render", "-c", MODEL_ID, SENTENCE, "--kind", "cross", "--max-len", "3",
               "-o", tmp_path / "cross.svg")[0] == 0
    assert listener.connections() == 0  # the network was never asked


def test_convert_takes_a_model_id_too(capsys, tmp_path, hub, marian_folder):
    cache, listener = hub
    cached_model(marian_folder, tmp_path, cache)
    output = tmp_path / "from-id.safetensors"
    assert cli(capsys, "convert", MODEL_ID, "-o", output)[0] == 0
    assert cli(capsys, "translate", "-c", output, "--max-len", "6", SENTENCE)[:2] == \
        cli(capsys, "translate", "-c", marian_folder[1], "--max-len", "6", SENTENCE)[:2]
    assert listener.connections() == 0


def test_a_model_id_the_cache_lacks_is_one_line_and_nothing_is_downloaded(capsys, hub):
    cache, listener = hub
    for model_id, argv in (("Helsinki-NLP/opus-mt-en-de", ["translate", "-c", "Helsinki-NLP/opus-mt-en-de", "hello"]),
                           ("Helsinki-NLP/opus-mt-en-de", ["info", "Helsinki-NLP/opus-mt-en-de"]),
                           ("facebook/bart-base", ["convert", "facebook/bart-base", "-o", "bart.safetensors"])):
        code, out, err = cli(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 1 and out == "" and len(lines) == 1, err
        assert lines[0].startswith(f"attnviz: error: {model_id}: no such file, and not in the local Hugging Face "
                                   f"cache ({cache}); add --download to fetch it from {listener.url}")
    assert listener.connections() == 0 and not cache.exists()
    code, _, err = cli(capsys, "translate", "-c", "en-es-transfomer", "hello")  # a bare name: a misspelt demo
    assert code == 1 and "did you mean en-es-transformer?" in err and "Hugging Face cache" in err


def test_a_cached_config_without_weights_says_how_to_get_them(capsys, tmp_path, hub, marian_folder):
    cache, listener = hub
    snapshot = cached_model(marian_folder, tmp_path, cache)
    (snapshot / "model.safetensors").unlink()  # what AutoConfig.from_pretrained alone leaves
    code, _, err = cli(capsys, "translate", "-c", MODEL_ID, "hello")
    assert code == 1 and err.strip().splitlines() == [
        f"attnviz: error: {MODEL_ID}: in the local Hugging Face cache ({snapshot}) without its weights; add --download "
        "to fetch them"]
    assert listener.connections() == 0


def test_a_path_then_a_demo_then_a_model_id(capsys, tmp_path, hub, marian_folder, monkeypatch):
    """The order of resolution: a file or folder of that name, then a bundled demo's name, then the cache."""
    cache, _ = hub
    cached_model(marian_folder, tmp_path, cache, "piglatin-gru-additive")  # a model id that is a demo's name
    code, out, _ = cli(capsys, "info", "--json", "piglatin-gru-additive")
    assert code == 0 and json.loads(out)["arch"] == "gru-additive"
    cached_model(marian_folder, tmp_path / "second", cache, "tiny-marian")  # a bare id no demo has
    code, out, _ = cli(capsys, "info", "--json", "tiny-marian")
    assert code == 0 and json.loads(out)["provenance"]["model_id"] == "tiny-marian"
    cached_model(marian_folder, tmp_path / "third", cache)
    local = tmp_path / "here" / "Helsinki-NLP" / "opus-mt-en-es"
    shutil.copytree(marian_folder[0], local)
    monkeypatch.chdir(tmp_path / "here")
    code, out, _ = cli(capsys, "info", "--json", MODEL_ID)  # the folder of that name here, not the cached model
    provenance = json.loads(out)["provenance"]
    assert code == 0 and provenance["converted_from"] == str(local.resolve()) and "model_id" not in provenance


def test_download_that_cannot_reach_the_hub_is_one_line(tmp_path):
    """``--download`` asks the Hub (HF_ENDPOINT, here a local port nobody listens on): the error names the model
    and the address, in one line, after the note saying what was being downloaded."""
    with socket.socket() as probe:  # a free port, closed again: connections to it are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    environment = {**{key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"},
                   "PYTHONPATH": str(ROOT), "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
                   "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "attnviz", "translate", "-c", "Helsinki-NLP/opus-mt-en-de",
                           "--download", "hello"], capture_output=True, text=True, env=environment, cwd=tmp_path,
                          timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert lines[0] == (f"attnviz: note: downloading Helsinki-NLP/opus-mt-en-de from {endpoint} into the Hugging Face "
                        f"cache {tmp_path / 'hf-cache'}")
    assert len(lines) == 2 and lines[1].startswith(f"attnviz: error: Helsinki-NLP/opus-mt-en-de: could not be "
                                                   f"downloaded from {endpoint} (")


def test_a_download_asks_for_the_model_folder_alone_safetensors_first():
    """What ``--download`` asks ``snapshot_download`` for (its ``allow_patterns``), from a repository's listing:
    configs, tokenizer files, the chat template and one set of weights at the top; never other frameworks' weights,
    exports in sub-folders, or the original-format copy some repositories carry beside the shards."""
    opus_mt = [".gitattributes", "README.md", "config.json", "flax_model.msgpack", "generation_config.json",
               "metadata.json", "pytorch_model.bin", "rust_model.ot", "source.spm", "target.spm", "tf_model.h5",
               "tokenizer_config.json", "vocab.json"]
    assert folder_files(opus_mt) == ["config.json", "generation_config.json", "source.spm", "target.spm",
                                     "tokenizer_config.json", "vocab.json", "pytorch_model.bin"]
    bart = ["config.json", "flax_model.msgpack", "merges.txt", "model.safetensors", "pytorch_model.bin",
            "rust_model.ot", "tf_model.h5", "tokenizer.json", "vocab.json", "onnx/model.safetensors"]
    assert folder_files(bart) == ["config.json", "merges.txt", "tokenizer.json", "vocab.json", "model.safetensors"]
    sharded = ["config.json", "consolidated.safetensors", "generation_config.json", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors", "model.safetensors.index.json", "params.json", "tokenizer.json",
               "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
               "original/consolidated.00.pth", "pytorch_model-00001-of-00002.bin"]
    assert folder_files(sharded) == ["chat_template.jinja", "config.json", "generation_config.json",
                                     "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
                                     "tokenizer_config.json", "model-00001-of-00002.safetensors",
                                     "model-00002-of-00002.safetensors", "model.safetensors.index.json"]


WINDOW = textwrap.dedent("""
    import json, sys, time
    from PySide6.QtCore import QSettings
    from attnviz.cli.common import window_checkpoint
    from attnviz.gui.app import launch
    started = launch(window_checkpoint(sys.argv[1]), "cpu", QSettings(sys.argv[2], QSettings.Format.IniFormat))
    app, window = started.app, started.window
    deadline = time.monotonic() + 120
    while window.session.model is None and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    model = window.session.model
    print(json.dumps({"path": str(model.path), "model_id": model.provenance.get("model_id")} if model else None))
    window.close()
    window.shut_down()
""")


def test_the_window_opens_a_model_id(tmp_path, marian_folder):
    """``attnviz ORG/NAME``: the launcher's checkpoint is the cached model converted once, and the window opens it."""
    cache = tmp_path / "hf-cache"
    cached_model(marian_folder, tmp_path, cache)
    environment = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(cache),
                   "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    result = subprocess.run([sys.executable, "-c", WINDOW, MODEL_ID, str(tmp_path / "s.ini")], capture_output=True,
                            text=True, env=environment, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    opened = json.loads(result.stdout.strip().splitlines()[-1])
    converted = list((tmp_path / "cache").rglob("*.safetensors"))
    assert [path.name for path in converted] == ["opus-mt-en-es.safetensors"]
    assert opened == {"path": str(converted[0]), "model_id": MODEL_ID}


class LocalHub:
    """A Hugging Face Hub on a local port, serving one repository's files as the Hub's HTTP interface does (the
    model's API document, its file tree, HEAD and GET of each file), and recording every request: what
    ``--download`` really asks for, with no network."""

    def __init__(self, model_id: str, files: dict[str, bytes], commit: str = REVISION) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 (http.server's names)
                hub.answer(self, body=False)

            def do_GET(self):  # noqa: N802
                hub.answer(self, body=True)

            def log_message(self, *args):
                pass

        self.model_id, self.files, self.commit = model_id, files, commit
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, handler, *, body: bool) -> None:
        from urllib.parse import unquote, urlsplit

        path = unquote(urlsplit(handler.path).path)
        self.requests.append(f"{handler.command} {path}")
        api = f"/api/models/{self.model_id}"
        resolve = f"/{self.model_id}/resolve/"
        if path in (api, f"{api}/revision/main", f"{api}/revision/{self.commit}"):
            self.send(handler, json.dumps({"id": self.model_id, "sha": self.commit, "private": False,
                                           "siblings": [{"rfilename": name} for name in self.files]}).encode(),
                      body=body)
        elif path.startswith(f"{api}/tree/"):
            tree = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in self.files.items()]
            self.send(handler, json.dumps(tree).encode(), body=body)
        elif path.startswith(resolve) and path[len(resolve):].split("/", 1)[-1] in self.files:
            name = path[len(resolve):].split("/", 1)[1]
            data = self.files[name]
            self.send(handler, data, body=body, headers={"X-Repo-Commit": self.commit,
                                                         "ETag": f'"{hashlib.sha256(data).hexdigest()}"'})
        else:  # as the Hub answers for a repository it does not have
            handler.send_response(404)
            handler.send_header("X-Error-Code", "RepoNotFound")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

    @staticmethod
    def send(handler, data: bytes, *, body: bool, headers: dict[str, str] | None = None) -> None:
        handler.send_response(200)
        for key, value in {"Content-Length": str(len(data)), **(headers or {})}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def downloaded(self) -> list[str]:
        prefix = f"GET /{self.model_id}/resolve/"
        return sorted(request[len(prefix):].split("/", 1)[1] for request in self.requests if request.startswith(prefix))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_download_fetches_the_model_folder_alone_then_opens_it_from_the_cache(capsys, monkeypatch, tmp_path,
                                                                             marian_folder):
    """``--download`` from a Hub (a local one): only the files a model folder needs come down (not the other
    frameworks' weights, nor the pickled copy beside the safetensors), into the Hugging Face cache, where the next
    run finds them without asking."""
    folder = marian_folder[0]
    files = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    files |= {"README.md": b"# a model\n", "tf_model.h5": b"not needed", "pytorch_model.bin": b"not needed either",
              "onnx/model.safetensors": b"nor this"}
    hub = LocalHub(MODEL_ID, files)
    try:
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        # Other test modules set HF_HUB_OFFLINE for transformers, and huggingface_hub reads it once, when imported.
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        expected = cli(capsys, "translate", "-c", marian_folder[1], "--max-len", "6", SENTENCE)
        code, out, err = cli(capsys, "translate", "-c", MODEL_ID, "--download", "--max-len", "6", SENTENCE)
        assert (code, out) == expected[:2], err
        assert f"attnviz: note: downloading {MODEL_ID} from {hub.url}" in err
        wanted = folder_files(list(files))
        assert hub.downloaded() == sorted(wanted) and "pytorch_model.bin" not in wanted
        snapshot = tmp_path / "hf-cache" / f"models--{MODEL_ID.replace('/', '--')}" / "snapshots" / REVISION
        assert sorted(path.name for path in snapshot.iterdir()) == sorted(wanted)
        asked = len(hub.requests)
        assert cli(capsys, "translate", "-c", MODEL_ID, "--download", "--max-len", "6", SENTENCE)[:2] == expected[:2]
        assert len(hub.requests) == asked  # found in the cache: the Hub is not asked again
        code, out, err = cli(capsys, "translate", "-c", "Helsinki-NLP/opus-mt-xx-yy", "--download", SENTENCE)
        assert code == 1 and err.strip().splitlines()[1:] == [
            f"attnviz: error: Helsinki-NLP/opus-mt-xx-yy: no such model on {hub.url} (or a private one: log in with "
            "hf auth login)"]
    finally:
        hub.close()


@pytest.mark.parametrize("family, model_id", [("bart", "facebook/bart-base"), ("t5", "google-t5/t5-small")])
def test_every_family_opens_by_its_id(capsys, tmp_path, hub, family, model_id):
    """Other families attnviz imports, from the same cache layout: each opens by its id as its folder does."""
    cache, listener = hub
    folder = tmp_path / family
    folder.mkdir()
    if family == "bart":
        from tests.test_import_hf_bart import build
        build(folder, "bart")
    else:
        from tests.test_import_t5 import build
        build(folder, "v1.1")
    expected = cli(capsys, "translate", "-c", folder, "--max-len", "4", "the cat sat")
    move_into_hub_cache(folder, cache, model_id)
    assert expected[0] == 0 and cli(capsys, "translate", "-c", model_id, "--max-len", "4", "the cat sat")[:2] == \
        expected[:2]
    assert listener.connections() == 0


def test_the_hugging_face_cache_is_where_huggingface_hub_puts_it(tmp_path):
    """HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub: as huggingface_hub's own rule says, read
    in a fresh interpreter for each environment."""
    program = ("import json, huggingface_hub.constants as c; from models.storage.hub import hub_cache; "
               "print(json.dumps([c.HF_HUB_CACHE, str(hub_cache())]))")
    cleared = {key: value for key, value in os.environ.items()
               if key not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")}
    for settings in ({"HF_HUB_CACHE": str(tmp_path / "a"), "HF_HOME": str(tmp_path / "b")},
                     {"HF_HOME": str(tmp_path / "b"), "XDG_CACHE_HOME": str(tmp_path / "c")},
                     {"XDG_CACHE_HOME": str(tmp_path / "c")}, {"HOME": str(tmp_path / "home")}):
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                              env={**cleared, "PYTHONPATH": str(ROOT), **settings})
        theirs, ours = json.loads(done.stdout)
        assert Path(theirs) == Path(ours), settings
