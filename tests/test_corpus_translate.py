"""A corpus through `attnviz translate`: decoded in batches (sorted by length, bounded by tokens and sentences),
printed in input order, each bad line reported once with its number while the others are decoded, characters the
vocabulary lacks summarised in one line, and a progress bar only on a terminal."""

from __future__ import annotations

import io
import json
import sys

import pytest

from attnviz.cli import main
from attnviz.cli.common import progress_bar
from attnviz.state.demos import demo_reference_pairs
from models.inference.batch_sizes import Batching, length_batches
from models.inference.corpus import decode_corpus
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from attnviz.state.demos import demo_path


def translate(capsys, monkeypatch, stdin: bytes, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["translate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SOURCES = [source for source, _ in demo_reference_pairs("en-es-transformer")]


@pytest.mark.parametrize("options", [["--beam", "1", "--max-len", "40"], ["--beam", "3", "--max-len", "12"]])
def test_a_file_in_batches_prints_what_one_at_a_time_prints(capsys, monkeypatch, options):
    lines = SOURCES + [source.upper() for source in SOURCES[:5]] + ["yes ."]
    stdin = "\n".join(lines).encode() + b"\n"
    code, alone, _ = translate(capsys, monkeypatch, stdin, "-c", "en-es-transformer", "--batch-size", "1", *options)
    assert code == 0 and len(alone.splitlines()) == len(lines)
    for batching in (["--batch-size", "5"], [], ["--batch-tokens", "40"]):
        code, batched, _ = translate(capsys, monkeypatch, stdin, "-c", "en-es-transformer", *batching, *options)
        assert (code, batched) == (0, alone)
    code, document, _ = translate(capsys, monkeypatch, stdin, "-c", "en-es-transformer", "--json", *options)
    assert [entry["output"] for entry in json.loads(document)] == alone.splitlines()
    assert [entry["input"] for entry in json.loads(document)] == lines


def test_each_bad_line_is_reported_once_and_the_others_are_decoded(capsys, monkeypatch):
    too_long = "the cat is on the table " * 4  # beyond the decoder-only demo's 64 positions
    stdin = b"the cat\n\nhello there\n\xff\xfe not utf-8\n" + too_long.encode() + b"\nyes\n"
    code, out, err = translate(capsys, monkeypatch, stdin, "-c", "piglatin-decoder-only", "--max-len", "12")
    assert code == 1
    assert err.splitlines() == [
        "attnviz: error: input 2: the text is empty",
        "attnviz: error: standard input:4: not UTF-8 text (byte 0xff at column 1)",
        f"attnviz: error: input 5: the prompt has {len(too_long.strip()) + 2} tokens; this model's context holds 64 "
        "positions, prompt and continuation together"]
    good = {1: "the cat", 3: "hello there", 6: "yes"}
    _, alone, _ = translate(capsys, monkeypatch, b"", "-c", "piglatin-decoder-only", "--max-len", "12",
                            *good.values())
    outputs = out.split("\n")[:-1]
    assert len(outputs) == 6
    assert [outputs[number - 1] for number in good] == alone.splitlines()
    assert all(outputs[number - 1] == "" for number in (2, 4, 5))
    code, document, _ = translate(capsys, monkeypatch, stdin, "-c", "piglatin-decoder-only", "--max-len", "12",
                                  "--json")
    entries = json.loads(document)
    assert code == 1 and [entry["output"] for entry in entries] == outputs[:1] + [None] + outputs[2:3] + [None] * 2 \
        + outputs[5:]
    assert entries[1]["error"] == "input 2: the text is empty" and entries[3]["input"] is None


def test_characters_the_vocabulary_lacks_are_one_line_for_a_whole_file(capsys, monkeypatch):
    stdin = "the cat is here\nTHE DOG.\nyes\nCats, dogs.\n".encode()
    code, out, err = translate(capsys, monkeypatch, stdin, "-c", "piglatin-gru-additive", "--max-len", "5")
    assert code == 0 and len(out.splitlines()) == 4
    assert err.splitlines() == ["attnviz: warning: 2 of 4 inputs had characters the vocabulary lacks: '.' ','; each "
                                "became its unknown token (--verbose names the inputs; --strict refuses "
                                "such text)"]
    code, _, err = translate(capsys, monkeypatch, stdin, "-c", "piglatin-gru-additive", "--max-len", "5", "--verbose")
    assert [line.split(":")[2].strip() for line in err.splitlines()] == ["input 2", "input 4"]


def test_no_progress_bar_when_stderr_is_no_terminal(capsys, monkeypatch):
    stdin = ("\n".join(SOURCES * 10) + "\n").encode()
    code, out, err = translate(capsys, monkeypatch, stdin, "-c", "en-es-transformer", "--max-len", "2")
    assert code == 0 and len(out.splitlines()) == 10 * len(SOURCES) and err == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_progress_bar_on_a_terminal_for_more_lines_than_it_shows(monkeypatch, capsys):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("LINES", "10")
    with progress_bar(30) as bar:
        for number in range(30):
            bar.write(f"output {number}")
            bar.update(1)
    assert capsys.readouterr().out.splitlines() == [f"output {number}" for number in range(30)]
    assert "29/30" in terminal.getvalue() and "line/s" in terminal.getvalue()
    shown = Terminal()
    monkeypatch.setattr(sys, "stderr", shown)
    with progress_bar(5) as bar:  # fits on the screen: no bar
        bar.update(5)
    assert shown.getvalue() == ""
    with progress_bar(30, enabled=False) as bar:  # --json: no bar
        bar.update(30)
    assert shown.getvalue() == ""


def test_batches_are_sorted_by_length_and_bounded():
    lengths = [5, 30, 1, 12, 12, 7, 30, 2, 9]
    batches = length_batches(lengths, Batching(tokens=60, size=3), rows=2)
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    flat = [lengths[index] for batch in batches for index in batch]
    assert flat == sorted(flat)
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * 2 * max(lengths[index] for index in batch) <= 60
    assert length_batches(lengths, Batching(size=1)) == [[index] for index in sorted(range(9),
                                                                                     key=lambda i: (lengths[i], i))]


def test_results_come_in_input_order_as_soon_as_the_ones_before_are_done():
    translator = Translator(load_checkpoint(demo_path("piglatin-gru-additive")), "cpu")
    texts = ["a b c d e f g", "yes", "hello there", "abc", "the cat is on the table", "no"]
    sources = [translator.source(text) for text in texts]
    batches = []
    decode_batch = translator.decode_batch
    translator.decode_batch = lambda batch, **settings: batches.append(len(batch)) or decode_batch(batch, **settings)
    results = decode_corpus(translator, sources, batching=Batching(size=2), max_len=10)
    first = next(results)
    assert batches == [2, 2, 2]  # the first text is among the longest: its batch is the last
    rest = list(results)
    alone = [translator.translate(text, max_len=10).text for text in texts]
    assert [found[0].text for found in [first, *rest]] == alone
    batches.clear()
    results = decode_corpus(translator, sources[1:], batching=Batching(size=2), max_len=10)
    next(results)
    assert batches == [2]  # "yes" is in the first batch


def test_under_torchrun_each_process_decodes_its_share_and_rank_0_prints_everything(capsys, monkeypatch, tmp_path):
    from tests.helpers import torchrun

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)  # the in-process reference run must not join a process group
    arguments = ["translate", "-c", "en-es-transformer", "--max-len", "12", "--beam", "2", "--batch-size", "3",
                 *SOURCES]
    (out, _), other = torchrun(["-m", "attnviz", *arguments], processes=2, log_dir=tmp_path / "logs")
    code, alone, _ = translate(capsys, monkeypatch, b"", *arguments[1:])
    assert code == 0 and out == alone and len(out.splitlines()) == len(SOURCES)
    assert other == ("", "")


def test_evaluate_in_batches_scores_what_one_at_a_time_scores(capsys):
    """The alignment score reads each output's trace: the batch's traces are each sentence's own."""
    documents = []
    for batching in (["--batch-size", "1"], ["--batch-size", "5"]):
        assert main(["evaluate", "-c", "piglatin-gru-additive", "--alignment", "piglatin", "--json", *batching]) == 0
        document = json.loads(capsys.readouterr().out)
        document.pop("seconds")
        documents.append(document)
    assert documents[0] == documents[1] and documents[0]["aligned_tokens"] > 100
