"""Hostile and broken input, seeded: damaged checkpoint headers and metadata, configs that claim models far
bigger than their weights, pickle bombs, odd text and options.

Every case runs the real CLI (``attnviz.cli.main`` in this process, a few as subprocesses for argv and
standard-input bytes) and must end with exit 1 (one ``attnviz: error:`` line, no traceback) or exit 0, or
argparse's exit 2 for option ranges; within 5 s; with the process's resident memory growing by less than
1 GB (its high-water mark is reset before each case through /proc/self/clear_refs); and creating no file.
"""

from __future__ import annotations

import io
import json
import pickle
import random
import re
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from attnviz.cli import main
from tests.test_checkpoint import rewrite_metadata

SEED = 12
MAX_SECONDS = 5.0
MAX_GROWTH_KB = 1 << 20  # 1 GiB
WORST = {"seconds": 0.0, "growth_kb": 0, "cases": 0}


def _status(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def run_cli(capsys, argv: list, allowed=(0, 1)) -> tuple[int, str, str]:
    """Run one case, check the limits every case must keep, return (exit code, stdout, stderr)."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM restarts from the current resident size
    before = _status("VmRSS")
    started = time.perf_counter()
    try:
        code = main([str(arg) for arg in argv])
    except SystemExit as exit:  # argparse usage errors
        code = exit.code
    seconds = time.perf_counter() - started
    growth = _status("VmHWM") - before
    captured = capsys.readouterr()
    WORST.update(seconds=max(WORST["seconds"], seconds), growth_kb=max(WORST["growth_kb"], growth),
                 cases=WORST["cases"] + 1)
    assert seconds < MAX_SECONDS, f"{argv}: {seconds:.1f} s"
    assert growth < MAX_GROWTH_KB, f"{argv}: memory grew by {growth // 1024} MB"
    assert code in allowed, (argv, code, captured.err)
    assert "Traceback" not in captured.err
    if code == 1:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), captured.err
    return code, captured.out, captured.err


@pytest.fixture(autouse=True)
def no_file_created(tmp_path):
    """A payload must not leave files behind (converted output is written to paths checked separately)."""
    yield
    made = [path for path in tmp_path.rglob("*") if path.name.startswith("payload-made")]
    assert not made, made


@pytest.fixture(scope="module", autouse=True)
def report_worst():
    yield
    print(f"\nfuzz: {WORST['cases']} cases, worst {WORST['seconds']:.2f} s, "
          f"worst memory growth {WORST['growth_kb'] / 1024:.0f} MB")


# Checkpoint metadata

ABSURD = [10 ** 8, 10 ** 9, 10 ** 300, -1, 0, True, False, 1.5, float("1e300"), "12", None, [1], {"a": 1}, ""]
CONFIG_FIELDS = ["d_model", "heads", "d_head", "d_ff", "encoder_layers", "decoder_layers", "max_len",
                 "src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "dropout", "logit_scale",
                 "layer_norm_eps", "final_norm", "activation", "arch"]


def absurd_configs(count: int) -> list[dict]:
    rng = random.Random(SEED)
    cases = [{field: value} for field in ("d_model", "d_ff", "max_len", "heads", "encoder_layers")
             for value in (10 ** 8, 10 ** 9, 10 ** 6)]
    cases += [{"d_model": 30000, "heads": 1}, {"d_model": 30000, "d_head": 30000}, {"max_len": 100000}]
    while len(cases) < count:
        cases.append({field: rng.choice(ABSURD) for field in rng.sample(CONFIG_FIELDS, rng.randint(1, 3))})
    return cases


@pytest.mark.parametrize("changes", absurd_configs(60), ids=lambda changes: ",".join(changes))
def test_absurd_configs_are_refused_before_allocating(capsys, tmp_path, random_checkpoint, changes):
    config = json.loads(json.loads(Path(random_checkpoint).read_bytes()[8:8 + struct.unpack(
        "<Q", Path(random_checkpoint).read_bytes()[:8])[0]])["__metadata__"]["config"])
    config.update(changes)
    path = rewrite_metadata(random_checkpoint, tmp_path / "absurd.safetensors", config=json.dumps(config))
    code, _, err = run_cli(capsys, ["info", path])
    if code == 1:
        assert str(path) in err


BAD_METADATA = [
    {"format_version": "9" * 300}, {"format_version": "99999999999999999999"}, {"format_version": "-1"},
    {"format_version": "1.0"}, {"format_version": "true"}, {"format_version": "\u0661"}, {"format_version": ""},
    {"config": "[" * 100_000}, {"config": '{"a":' * 50_000}, {"provenance": "[" * 100_000 + "]" * 100_000},
    {"provenance": "1" + "0" * 5000}, {"provenance": json.dumps({"steps": 10 ** 300})},
    {"provenance": '"just a string"'}, {"tokenizers": "[]"}, {"tokenizers": json.dumps({"source": 1, "target": 2})},
    {"tokenizers": json.dumps({"source": {"kind": "char", "characters": 5}, "target": {"kind": "char"}})},
    {"tokenizers": json.dumps({"source": {"kind": "char", "characters": [["a"], 1, None]},
                               "target": {"kind": "char", "characters": ["a"] * 9}})},
    {"tokenizers": json.dumps({"source": {"kind": "word", "tokens": {"a": 1}}, "target": {"kind": "word"}})},
    {"tokenizers": json.dumps({"source": {"kind": "sentencepiece", "model": "not base64!"},
                               "target": {"kind": "sentencepiece", "model": 7}})},
    {"config": json.dumps({"arch": ["transformer-preln"]})}, {"config": "null"}, {"config": "1e999"},
    {"provenance": json.dumps({"note": "\x1b]0;owned\x07\x1b[2J\ud800"})},
]


@pytest.mark.parametrize("changes", BAD_METADATA, ids=lambda changes: f"{next(iter(changes))}")
def test_bad_metadata_is_one_line(capsys, tmp_path, random_checkpoint, changes):
    path = rewrite_metadata(random_checkpoint, tmp_path / "bad.safetensors", **changes)
    for command in (["info", path], ["info", "--json", path], ["translate", "-c", path, "abc"]):
        _, out, _ = run_cli(capsys, command)
        assert "\x1b" not in out  # a checkpoint's escape sequences never reach the terminal


def damaged_headers(source: bytes, count: int) -> list[bytes]:
    """The checkpoint's bytes with its header length or header JSON damaged in seeded random ways."""
    rng = random.Random(SEED)
    (length,) = struct.unpack("<Q", source[:8])
    header, data = source[8:8 + length], source[8 + length:]
    cases = [struct.pack("<Q", 2 ** 63) + source[8:], struct.pack("<Q", length + 1000) + source[8:],
             source[:8 + length // 2], source[:4], source[:8 + length] + data[: len(data) // 2]]
    parsed = json.loads(header)
    name = next(key for key in parsed if key != "__metadata__")
    for change in ({"dtype": "F99"}, {"shape": [10 ** 9, 10 ** 9]}, {"shape": [-1]},
                   {"data_offsets": [0, 10 ** 12]}, {"data_offsets": [5, 2]}, {"shape": "x"}):
        altered = json.loads(header)
        altered[name].update(change)
        encoded = json.dumps(altered).encode()
        cases.append(struct.pack("<Q", len(encoded)) + encoded + data)
    while len(cases) < count:
        mutated = bytearray(header)
        for _ in range(rng.randint(1, 6)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        cases.append(source[:8] + bytes(mutated) + data)
    return cases


def test_damaged_safetensors_headers(capsys, tmp_path, random_checkpoint):
    for number, content in enumerate(damaged_headers(Path(random_checkpoint).read_bytes(), 40)):
        path = tmp_path / f"damaged-{number}.safetensors"
        path.write_bytes(content)
        run_cli(capsys, ["info", path])


# Foreign files: pickle bombs and oversized claims

def bytearray_bomb(size: int) -> bytes:
    return b"\x80\x02cbuiltins\nbytearray\n\x8a\x05" + size.to_bytes(5, "little") + b"\x85R."


def list_of_range_bomb(size: int) -> bytes:
    return (b"\x80\x02cbuiltins\nlist\ncbuiltins\nrange\n\x8a\x05" + size.to_bytes(5, "little")
            + b"\x85R\x85R.")


def nested_references(depth: int = 40, width: int = 10, as_key: bool = False) -> bytes:
    """Each level a list (or tuple, hashable: a dict key) holding ``width`` references to the level below."""
    out = bytearray(b"\x80\x02X\x03\x00\x00\x00lolq\x00")
    for level in range(1, depth + 1):
        out += b"(" + (b"h" + bytes([level - 1])) * width
        out += (b"t" if as_key else b"l") + b"q" + bytes([level])
    if as_key:
        out += b"}h" + bytes([depth]) + b"X\x01\x00\x00\x00xs."
    else:
        out += b"}X\x05\x00\x00\x00modelh" + bytes([depth]) + b"s."
    return bytes(out)


def expanded_tensor() -> bytes:
    """A torch.save file whose one tensor claims 10**10 elements on a 1-element storage (zero strides)."""
    buffer = io.BytesIO()
    torch.save({"weight": torch.zeros(1).expand(100_000, 100_000)}, buffer)
    return buffer.getvalue()


def in_torch_zip(pickled: bytes) -> bytes:
    """``pickled`` as the data.pkl of an otherwise real torch.save archive."""
    buffer = io.BytesIO()
    torch.save({"a": torch.zeros(2)}, buffer)
    original, out = zipfile.ZipFile(io.BytesIO(buffer.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in original.namelist():
            archive.writestr(name, pickled if name.endswith("data.pkl") else original.read(name))
    return out.getvalue()


class OpensAFile:
    """Pickled, it asks the reader to call ``open(marker, "w")``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def code_running_pickle(marker: Path) -> bytes:
    return pickle.dumps(OpensAFile(marker))


BOMBS = {
    "bytearray-8GB.pkl": bytearray_bomb(8 * 10 ** 9), "bytearray-8GB.pt": in_torch_zip(bytearray_bomb(8 * 10 ** 9)),
    "list-range.pkl": list_of_range_bomb(10 ** 10), "nested-references.pkl": nested_references(),
    "nested-references.pt": in_torch_zip(nested_references()), "nested-key.pkl": nested_references(as_key=True),
    "nested-key.pt": in_torch_zip(nested_references(as_key=True)), "expanded-tensor.pt": expanded_tensor(),
    "deep-lists.pkl": b"\x80\x02" + b"(" * 100_000 + b"l" * 100_000 + b".",
    "truncated.pt": in_torch_zip(bytearray_bomb(8 * 10 ** 9))[:300],
}


@pytest.mark.parametrize("trust", [False, True])
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_pickle_bombs_are_refused(capsys, tmp_path, name, trust):
    path = tmp_path / name
    path.write_bytes(BOMBS[name])
    out = tmp_path / "converted.safetensors"
    _, _, err = run_cli(capsys, ["convert", path, "-o", out, *(["--trust"] if trust else [])], allowed=(1,))
    assert str(path) in err and not out.exists()


def test_a_pickle_that_would_write_a_file_writes_none(capsys, tmp_path):
    marker = tmp_path / "payload-made-this"
    path = tmp_path / "hostile.pkl"
    path.write_bytes(code_running_pickle(marker))
    for trust in ([], ["--trust"]):
        run_cli(capsys, ["convert", path, "-o", tmp_path / "x.safetensors", *trust], allowed=(1,))
    assert not marker.exists()


@pytest.fixture(scope="module")
def small_marian(tmp_path_factory) -> Path:
    """A real (tiny, untrained) Marian folder written by transformers."""
    import transformers

    from tests.test_import_marian import write_folder

    folder = tmp_path_factory.mktemp("marian")
    vocab_size = write_folder(folder)
    config = transformers.MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
        max_position_embeddings=32, pad_token_id=vocab_size - 1, decoder_start_token_id=vocab_size - 1,
        eos_token_id=0)
    transformers.MarianMTModel(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("changes", [{"d_model": 30000}, {"d_model": 10 ** 9}, {"encoder_ffn_dim": 10 ** 9},
                                     {"encoder_layers": 10 ** 6}, {"max_position_embeddings": 10 ** 9},
                                     {"d_model": True}, {"vocab_size": "many"}, {"encoder_layers": 1.5}])
def test_marian_configs_that_claim_too_much(capsys, tmp_path, small_marian, changes):
    folder = tmp_path / "marian"
    folder.mkdir()
    for file in small_marian.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "converted.safetensors"
    run_cli(capsys, ["convert", folder, "-o", out], allowed=(1,))
    assert not out.exists()


def test_a_state_dict_with_an_oversized_claim(capsys, tmp_path):
    """A safetensors file the importers read (nn.Transformer layout) whose settings claim a huge model."""
    path = tmp_path / "weights.safetensors"
    save_file({"weight": torch.zeros(2, 2)}, str(path))
    run_cli(capsys, ["convert", path, "-o", tmp_path / "out.safetensors"], allowed=(1,))


# Text and options

def odd_texts(count: int) -> list[str]:
    rng = random.Random(SEED)
    pools = ["abc", "\x00\x1b[2J\x07", "\u202e\u200b\ufeff", "\U0001F600\u0301", "\ud800\udfff", "é" * 3, "\t\r\x0b"]
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 12))) for _ in range(count)]


@pytest.mark.parametrize("text", odd_texts(25))
def test_odd_text_in_process(capsys, random_checkpoint, text):
    run_cli(capsys, ["translate", "-c", random_checkpoint, "--max-len", "4", text])


def test_very_long_text_is_truncated_with_a_notice(capsys, random_checkpoint):
    code, _, err = run_cli(capsys, ["translate", "-c", random_checkpoint, "--max-len", "2", "abc" * 100_000])
    assert code == 0 and "warning" in err and "only the first" in err


@pytest.mark.parametrize("command, options", [
    ("translate", ["--max-len", "-1"]), ("translate", ["--beam", "5000"]), ("translate", ["--beam", "0"]),
    ("translate", ["--max-len", "99999999999999999999"]), ("translate", ["--length-penalty", "inf"]),
    ("evaluate", ["--limit", "-1"]), ("evaluate", ["--limit", "0"]), ("evaluate", ["--beam", "100000"]),
])
def test_out_of_range_options(capsys, tmp_path, random_checkpoint, command, options):
    data = tmp_path / "pairs.tsv"
    data.write_text("abc\tbca\n")
    extra = ["--data", data] if command == "evaluate" else ["abc"]
    _, _, err = run_cli(capsys, [command, "-c", random_checkpoint, *options, *extra], allowed=(2,))
    assert options[0] in err


def cli_process(args: list, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """The CLI in a child process, argv given as bytes (as a shell passes them)."""
    return subprocess.run([sys.executable, "-m", "attnviz", *args], input=stdin, capture_output=True,
                          timeout=60, check=False, cwd=Path(__file__).resolve().parents[1])


def assert_process_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("attnviz: error: ")
    for fragment in fragments:
        assert fragment in err, err


def test_standard_input_encodings(random_checkpoint):
    """One process checks the bytes cases in turn (each start costs a second or two)."""
    checkpoint = str(random_checkpoint).encode()
    base = [b"translate", b"-c", checkpoint, b"--max-len", b"3"]
    bad_line = cli_process(base, b"abc\nab\xffc\n")  # reported once; the other lines are still decoded
    assert_process_error(bad_line, "standard input:2", "0xff", "column 3")
    assert len(bad_line.stdout.splitlines()) == 2 and bad_line.stdout.splitlines()[1] == b""
    utf16 = cli_process(base, "abc\n".encode("utf-16"))
    assert utf16.returncode == 1 and utf16.stderr.decode().startswith("attnviz: error: standard input:1: not UTF-8 "
                                                                      "text (byte 0xff at column 1)")
    assert_process_error(cli_process([*base, b"ab\xe9c"]), "input 1", "0xe9", "byte offset 2")
    crlf = cli_process(base, b"abc\r\nbca\r\n")
    assert crlf.returncode == 0 and len(crlf.stdout.splitlines()) == 2, crlf.stderr
    latin = cli_process([*base, b"--encoding", b"latin-1"], b"abc\nbca\n")
    assert latin.returncode == 0 and len(latin.stdout.splitlines()) == 2, latin.stderr


def test_a_lone_surrogate_argument_in_process(capsys, random_checkpoint):
    _, _, err = run_cli(capsys, ["translate", "-c", random_checkpoint, "ab\ud800"], allowed=(1,))
    assert "surrogate U+D800" in err


@pytest.mark.parametrize("changes, fragment", [
    ({"format_version": "9" * 300}, "format version '99999999999999999999...' is not supported"),
    ({"config": "[" * 100_000}, "'config' is nested 100000 levels deep"),
    ({"provenance": "1" + "0" * 5000}, "'provenance' is not valid JSON"),
    ({"provenance": "[1]"}, "'provenance' must be a JSON object"),
])
def test_metadata_messages_name_the_entry(capsys, tmp_path, random_checkpoint, changes, fragment):
    path = rewrite_metadata(random_checkpoint, tmp_path / "bad.safetensors", **changes)
    _, _, err = run_cli(capsys, ["info", path], allowed=(1,))
    assert fragment in err and str(path) in err


@pytest.mark.parametrize("changes, fragment", [
    ({"d_model": 10 ** 300}, "d_model must be between 0 and 32768; got a 301-digit number"),
    ({"d_model": True}, "d_model must be an integer; got True"),
    ({"dropout": "0.1"}, "dropout must be a number"),
    ({"final_norm": 1}, "final_norm must be true or false"),
    ({"encoder_layers": 20, "d_model": 4096}, "the config describes a model of"),
    ({"encoder_layers": 3}, "missing weights: encoder_layers.2."),
    ({"d_model": 36}, "the config implies"),
])
def test_config_messages_name_the_field(capsys, tmp_path, random_checkpoint, changes, fragment):
    data = Path(random_checkpoint).read_bytes()
    config = json.loads(json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])["__metadata__"]["config"])
    path = rewrite_metadata(random_checkpoint, tmp_path / "bad.safetensors", config=json.dumps({**config, **changes}))
    # info reads the header alone (no torch): the shapes the config implies are checked as the model is built
    shapes_only = "missing weights" in fragment or "config implies" in fragment
    command = ["translate", "-c", path, "abc"] if shapes_only else ["info", path]
    _, _, err = run_cli(capsys, command, allowed=(1,))
    assert fragment in err and str(path) in err


def test_nan_weights_open_with_a_warning_and_beam_search_survives(capsys, tmp_path, random_checkpoint):
    from models.storage.checkpoint import load_checkpoint, save_checkpoint

    checkpoint = load_checkpoint(random_checkpoint)
    with torch.no_grad():
        checkpoint.model.output.bias.fill_(float("nan"))
    path = save_checkpoint(tmp_path / "nan.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer)
    code, _, err = run_cli(capsys, ["translate", "-c", path, "--beam", "4", "--max-len", "5", "abc"])
    lines = err.splitlines()
    assert code == 0 and len(lines) == 2 and all(line.startswith("attnviz: warning: ") for line in lines)
    assert "output.bias" in lines[0] and "NaN or infinite" in lines[0]
    assert "the model produced NaN at step 1" in lines[1]
    from models.inference.decoding import Capture, forced, greedy, run
    from models.errors import NumericalWarning

    model = load_checkpoint(path).model
    for decoding in (greedy(model, [5, 6, 7, 3], Capture(max_len=4)), forced(model, [5, 6, 7, 3], [6, 5])):
        with pytest.warns(NumericalWarning, match="the model produced NaN at step 1"):
            steps, results = run(decoding)  # greedy and forced survive NaN too, and say so
        assert len(results) == 1 and steps


def test_translations_from_a_hostile_vocabulary_are_escaped(capsys, tmp_path, random_checkpoint):
    """A vocabulary of a lone surrogate and an escape character, and a model that always picks them."""
    from models.storage.checkpoint import load_checkpoint, save_checkpoint
    from models.text.tokenizers import CharTokenizer

    checkpoint = load_checkpoint(random_checkpoint)
    tokenizer = CharTokenizer(["\ud800", "\x1b", *"cdefgh "])
    with torch.no_grad():
        checkpoint.model.output.bias.zero_()
        checkpoint.model.output.bias[tokenizer.encode("\ud800")[0]] = 100.0
    path = save_checkpoint(tmp_path / "hostile-vocabulary.safetensors", checkpoint.model, tokenizer, tokenizer)
    code, out, _ = run_cli(capsys, ["translate", "-c", path, "--max-len", "3", "cde"])
    assert code == 0 and out.startswith("\\ud800")
