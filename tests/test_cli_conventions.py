"""The CLI's one convention, read off the real parser: every option has help and one spelling, defaults are shown,
no reST in --help; the corpus tools' demo corpora; mistakes answered before a model loads; export to CSV; info."""

from __future__ import annotations

import argparse
import csv
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.cli import build_parser
from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.inference.decoding import finish
from models.errors import CheckpointError
from models.inference.translator import Translator, decoding_mode
from tests.test_cli import assert_error, assert_one_line_error, cli

MODEL_COMMANDS = ("info", "translate", "export", "render", "evaluate", "importance", "stats", "lens")
WRITING_COMMANDS = ("export", "render", "train", "convert", "stats")
DATA_COMMANDS = ("info", "translate", "evaluate", "importance", "stats", "demos", "lens")
SYNONYMS = {"out": "output", "outfile": "output", "ckpt": "checkpoint", "model": "checkpoint", "fmt": "format"}
DEMO = "en-es-transformer"
RETIRED = ["--replace-unknown"]  # still accepted, does nothing: what it asked for is the default now


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return dict(action.choices)


def visible_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if action.option_strings and action.help is not argparse.SUPPRESS
            and not isinstance(action, argparse._HelpAction)]


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_option_has_help_its_default_and_one_spelling(name):
    parser = subcommands()[name]
    formatter = parser.formatter_class(prog=parser.prog)
    concepts: dict[str, str] = {}
    for action in visible_options(parser):
        shown = formatter._get_help_string(action)
        assert action.help and action.help.strip(), f"{name} {action.option_strings}: no help"
        long_names = [option for option in action.option_strings if option.startswith("--")]
        assert len(long_names) == 1, f"{name}: {action.option_strings} is one option with two long spellings"
        if action.default is not None and action.default is not False and action.default != []:
            assert "default" in shown, f"{name} {long_names[0]}: its default {action.default!r} is not shown"
        concept = SYNONYMS.get(long_names[0][2:], long_names[0][2:])
        assert concept not in concepts, f"{name}: {long_names[0]} and {concepts[concept]} spell one thing twice"
        concepts[concept] = long_names[0]
    for action in parser._actions:  # a hidden option is an old spelling of a visible one, or a retired no-op
        if action.option_strings and action.help is argparse.SUPPRESS and action.option_strings != RETIRED:
            assert any(other.dest == action.dest for other in visible_options(parser)), action.option_strings
    text = parser.format_help()
    assert "``" not in text and "::" not in text, f"reST markup in attnviz {name} --help"


def test_an_option_means_one_thing_in_every_command():
    meanings: dict[str, tuple[str, object]] = {}
    for name, parser in subcommands().items():
        for action in visible_options(parser):
            for option in action.option_strings:
                choices = tuple(action.choices) if action.choices else None
                first = meanings.setdefault(option, (name, choices))
                assert first[1] == choices, f"{option} takes {first[1]} in {first[0]} but {choices} in {name}"


def test_the_shared_options_are_where_they_belong():
    commands = subcommands()
    options = {name: {option for action in parser._actions for option in action.option_strings}
               for name, parser in commands.items()}
    assert all({"-c", "--checkpoint"} <= options[name] for name in MODEL_COMMANDS)
    assert all({"-o", "--output"} <= options[name] for name in WRITING_COMMANDS)
    assert all("--json" in options[name] for name in DATA_COMMANDS)


def test_old_spellings_stay_accepted():
    parser = build_parser()
    assert parser.parse_args(["train", "--data", "x.tsv", "--arch", "gru-additive", "--out", "m.safetensors"]).output \
        == "m.safetensors"
    args = parser.parse_args(["render", "--snapshots", "runs", "abc", "--kind", "cross", "--format", "svg", "-o", "f"])
    assert args.frame_format == "svg"
    assert parser.parse_args(["render", "-c", "x", "abc", "--kind", "cross", "-o", "f.png"]).frame_format == "png"
    assert parser.parse_args(["info", "model.safetensors"]).path == "model.safetensors"


def test_the_corpus_tools_use_a_demos_own_references(capsys):
    code, out, err = cli(capsys, "stats", "-c", "piglatin-gru-additive", "--limit", "3")
    assert code == 0, err
    assert out.startswith("3 sentences (3 reference pairs of the bundled demo piglatin-gru-additive)")
    code, out, err = cli(capsys, "evaluate", "-c", "piglatin-gru-additive", "--limit", "2", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["corpus"] == "2 reference pairs of the bundled demo piglatin-gru-additive"
    assert document["examples"] == 2
    code, out, err = cli(capsys, "importance", "-c", "piglatin-gru-additive", "--limit", "2", "--metric", "exact")
    assert code == 0, err
    assert out.startswith("2 sentences (2 reference pairs of the bundled demo piglatin-gru-additive), exact match %")
    assert "that run ≈" in out.splitlines()[0]
    assert err.splitlines()[-1] == "attnviz: importance: 1/1 heads (cross:0:0), about 0 s left"


def test_a_corpus_tool_without_data_on_another_checkpoint_is_one_line(capsys, random_checkpoint):
    for command in ("stats", "evaluate", "importance"):
        code, out, err = cli(capsys, command, "-c", random_checkpoint)
        assert_error(code, err, "--data is required for a checkpoint that is not a bundled demo")
        assert out == ""


def test_mistakes_are_answered_before_the_model_loads(capsys, tmp_path):
    """Answered from the header alone: the demo's file cut short after its header still gets the mistake's own
    answer, never "the file ends early", which reading any weight would give."""
    data = (Path("resources/checkpoints") / f"{DEMO}.safetensors").read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    headless = tmp_path / f"{DEMO}.safetensors"
    headless.write_bytes(data[:8 + header_size + 16])
    with pytest.raises(CheckpointError, match="ends early|cut short"):
        load_checkpoint(headless)
    pickle = tmp_path / "model.pt"
    torch.save({"weight": torch.zeros(2)}, pickle)
    mistakes = [
        (["translate", "-c", "en-es-transfomer", "hi"], ["did you mean en-es-transformer?", "piglatin-gru-additive"]),
        (["render", "-c", headless, "hi", "--kind", "cross", "--layer", "3", "-o", tmp_path / "a.png"],
         ["--layer must be below 3 for cross; got 3"]),
        (["export", "-c", headless, "hi", "--kind", "enc_self", "--head", "4", "-o", tmp_path / "a.csv"],
         ["--head must be below 4 for enc_self; got 4"]),
        (["render", "-c", "piglatin-gru-additive", "hi", "--kind", "enc_self", "-o", tmp_path / "a.png"],
         ["this model has no enc_self attention (it has cross)"]),
        (["translate", "-c", headless, "--ablate", "cross:5:0", "hi"], ["cannot ablate cross:5:0"]),
        (["translate", "-c", pickle, "hi"], [str(pickle), "not an attnviz checkpoint", "attnviz convert"]),
    ]
    for args, fragments in mistakes:
        code, _, err = cli(capsys, *args)
        assert_one_line_error(code, err, *fragments)


def test_export_writes_one_heatmap_as_csv_with_the_tokens(capsys, tmp_path, random_checkpoint):
    output = tmp_path / "cross.csv"
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "--target", "bcab", "abca", "--kind", "cross",
                       "--layer", "1", "--head", "2", "-o", output)
    assert code == 0, err
    assert err == f"wrote {output} (cross layer 1 head 2: 5 × 5)\n"
    translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    forced = translator.decode(translator.source("abca"), mode=decoding_mode(1, True),
                               target_ids=translator.target("bcab"))
    trace = finish(forced)[0].trace
    with open(output, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["query \\ key", "a", "b", "c", "a#2", "</s>"]
    assert [row[0] for row in rows[1:]] == trace.tgt_tokens
    values = np.array([[float(value) for value in row[1:]] for row in rows[1:]])
    np.testing.assert_allclose(values, trace.attention["cross"][1][2], rtol=1e-5, atol=1e-7)


def test_export_says_what_it_wrote(capsys, tmp_path, random_checkpoint):
    output = tmp_path / "trace.npz"
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "--max-len", "3", "abc", "-o", output)
    assert code == 0
    assert err == f"wrote {output} ({len(np.load(output).files)} arrays)\n"
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "abc", "--head", "all", "-o", tmp_path / "x.csv")
    assert_one_line_error(code, err, "a .csv holds one heatmap", "--kind")


def test_translate_json(capsys, random_checkpoint):
    code, out, _ = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "4", "--json", "abc", "hag")
    document = json.loads(out)
    code_lines, lines, _ = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "4", "abc", "hag")
    assert code == code_lines == 0
    assert [entry["input"] for entry in document] == ["abc", "hag"]
    assert [entry["output"] for entry in document] == lines.splitlines()
    assert all(isinstance(entry["score"], float) and entry["tokens"] for entry in document)


def test_info_says_how_far_training_went_and_lists_the_config(capsys):
    code, out, _ = cli(capsys, "info", "-c", DEMO)
    assert code == 0
    lines = out.splitlines()
    assert "trained      3,000 of 20,000 planned steps (stopped early)" in lines
    config = lines[lines.index("config") + 1: lines.index("provenance") - 1]
    assert "  d_model:                   256" in config and "  heads:                     4" in config
    assert len({len(line) - len(line.split(":", 1)[1].lstrip()) for line in config}) == 1  # values in one column
    assert not any(line.lstrip().startswith("{") for line in lines)
    code, positional, _ = cli(capsys, "info", DEMO)
    assert (code, positional) == (0, out)


def test_info_of_a_finished_run_and_of_a_snapshot(capsys, tmp_path, random_checkpoint):
    checkpoint = load_checkpoint(random_checkpoint)
    tokenizer = checkpoint.source_tokenizer
    finished = save_checkpoint(tmp_path / "done.safetensors", checkpoint.model, tokenizer, tokenizer,
                               {"steps": 500, "training": {"steps": 500}})
    snapshot = save_checkpoint(tmp_path / "step.safetensors", checkpoint.model, tokenizer, tokenizer,
                               {"steps": 250, "training": {"steps": 1000}, "snapshot": {"step": 250, "of": 4}})
    assert "trained      500 steps" in cli(capsys, "info", "-c", finished)[1].splitlines()
    assert ("trained      250 of 1,000 planned steps (a snapshot taken during the run)"
            in cli(capsys, "info", "-c", snapshot)[1].splitlines())


def test_weights_kept_in_bfloat16_translate_the_demo_alike(capsys):
    code, out, err = cli(capsys, "translate", "-c", DEMO, "--dtype", "bfloat16", "--json", "The Lord is my shepherd.")
    assert code == 0, err
    assert json.loads(out)[0]["output"] == "El Señor es mi pastor."


def test_the_window_opens_a_demo_given_by_name_as_every_command_does():
    from attnviz.cli import build_parser
    from attnviz.state.demos import demo_path

    args = build_parser().parse_args(["gui", "piglatin-gru-additive"])
    assert args.checkpoint == str(demo_path("piglatin-gru-additive"))
    assert build_parser().parse_args(["gui", "lesson.attnviz"]).checkpoint == "lesson.attnviz"  # other paths as given


def test_the_core_accepts_the_beam_widths_the_commands_offer(capsys, random_checkpoint):
    """One range (models/inference/modes.py): what ``--beam`` offers is what decoding itself accepts."""
    from models.errors import InputError
    from models.inference.modes import MAX_BEAM, MIN_BEAM, Mode

    translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    source = translator.source("abca")
    assert finish(translator.decode(source, mode=Mode.BEAM, beam=MAX_BEAM, max_len=2))
    for width in (MIN_BEAM - 1, MAX_BEAM + 1):
        with pytest.raises(InputError, match=f"the beam width must be between 1 and 64; got {width}"):
            finish(translator.decode(source, mode=Mode.BEAM, beam=width, max_len=2))
    help_text = subcommands()["translate"].format_help()
    assert f"at most {MAX_BEAM}" in help_text


def test_the_commands_docstring_lists_every_subcommand_with_its_help():
    """The module docstring of attnviz.cli is the command list's overview: every subcommand, each with the help its
    parser gives, in COMMANDS' order."""
    import re

    import attnviz.cli
    from attnviz.cli import COMMANDS, build_parser

    listed = re.findall(r"^    attnviz (\w+)(?: \.\.\.)? +(.+)$", attnviz.cli.__doc__, flags=re.MULTILINE)
    subparsers = next(action for action in build_parser()._actions if action.choices and "info" in action.choices)
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert [name for name, _ in listed if name != "gui"] == list(COMMANDS)
    assert all(text == helps[name] for name, text in listed if name in helps), (listed, helps)
