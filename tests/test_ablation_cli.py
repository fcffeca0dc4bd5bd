"""``--ablate`` on translate, export, render and evaluate, and ``attnviz importance``, on the bundled trained
demos; bad specs and bad pairs files are one line and exit 1."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.text.piglatin import to_pig_latin
from tests.test_cli import assert_one_line_error, cli

DEMO = "piglatin-gru-transformer-decoder"
TEXT = "strength through joy"
WORDS = ["impress", "strength through joy", "the air conditioning is working", "hello world", "good morning",
         "the cat sat", "open the door", "pig latin", "green apple", "yellow house", "quick brown fox", "string theory"]


@pytest.fixture
def pig_pairs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{text}\t{to_pig_latin(text)}\n" for text in WORDS), encoding="utf-8")
    return path


def test_translate_with_a_layers_cross_heads_off_changes_the_output(capsys):
    code, plain, _ = cli(capsys, "translate", "-c", DEMO, TEXT)
    assert (code, plain.strip()) == (0, "engthstray oughthray oyjay")
    code, ablated, err = cli(capsys, "translate", "-c", DEMO, TEXT, "--ablate", "cross:0:*")
    assert code == 0 and err == ""
    assert ablated.strip() and ablated != plain
    code, both, _ = cli(capsys, "translate", "-c", DEMO, TEXT, "--ablate", "cross:0:0", "--ablate", "cross:2:*")
    assert code == 0 and both not in (plain, ablated)


def test_export_writes_which_heads_were_off(capsys, tmp_path):
    output = tmp_path / "ablated.npz"
    code, _, _ = cli(capsys, "export", "-c", "en-es-transformer", "The Lord is my shepherd.", "-o", output,
                     "--ablate", "cross:1:*", "--ablate", "enc_self:0:2")
    assert code == 0
    arrays = np.load(output)
    assert list(arrays["ablated"]) == ["enc_self:0:2", "cross:1:0", "cross:1:1", "cross:1:2", "cross:1:3"]
    weights = arrays["cross_L1"]  # the weights the switched-off heads computed are still there
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-4)
    plain = tmp_path / "plain.npz"
    assert cli(capsys, "export", "-c", "en-es-transformer", "The Lord is my shepherd.", "-o", plain)[0] == 0
    assert np.load(plain)["ablated"].shape == (0,)


def test_render_draws_an_ablated_run(capsys, tmp_path):
    output = tmp_path / "heads.png"
    code, _, err = cli(capsys, "render", "-c", DEMO, TEXT, "--kind", "cross", "--layer", "0", "--head", "all",
                       "--ablate", "cross:0:0", "-o", output)
    assert code == 0 and output.stat().st_size > 1000, err
    figure = tmp_path / "heads.svg"
    code, _, _ = cli(capsys, "render", "-c", "en-es-transformer", "The Lord is my shepherd.", "--kind", "cross",
                     "--layer", "1", "--head", "all", "--ablate", "cross:1:2", "-o", figure)
    text = figure.read_text(encoding="utf-8")
    assert code == 0 and "L1 · H2 · off" in text and "L1 · H1 · off" not in text and "L1 · H1<" in text
    assert text.count("stroke='#e53935'") == 1  # the one switched-off head is crossed out


def test_evaluate_scores_the_ablated_model(capsys, pig_pairs):
    code, out, _ = cli(capsys, "evaluate", "-c", DEMO, "--data", pig_pairs, "--json")
    plain = json.loads(out)
    code, out, _ = cli(capsys, "evaluate", "-c", DEMO, "--data", pig_pairs, "--json", "--ablate", "cross:0:*")
    ablated = json.loads(out)
    assert code == 0 and plain["exact"] >= 0.75 and ablated["exact"] < plain["exact"] - 0.25


def test_importance_ranks_first_a_head_the_task_cannot_do_without(capsys, pig_pairs):
    code, out, err = cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--json", "--metric", "exact")
    assert code == 0
    assert err.splitlines()[-1] == "attnviz: importance: 6/6 heads (cross:2:0), about 0 s left"
    document = json.loads(out)
    assert document["metric"] == "exact" and document["examples"] == len(WORDS)
    assert set(document["drops"]) == {"dec_self", "cross"} and np.shape(document["drops"]["cross"]) == (3, 1)
    top, last = document["ranking"][0], document["ranking"][-1]
    assert top["drop"] == max(max(row) for table in document["drops"].values() for row in table)
    # switching the top head off on its own (through evaluate) destroys the task; the last one barely matters
    spec = f"{top['kind']}:{top['layer']}:{top['head']}"
    code, out, _ = cli(capsys, "evaluate", "-c", DEMO, "--data", pig_pairs, "--json", "--ablate", spec)
    assert 100 * json.loads(out)["exact"] == pytest.approx(document["baseline"] - top["drop"])
    assert document["baseline"] >= 75 and document["baseline"] - top["drop"] <= 25
    assert last["drop"] <= 10

    code, out, _ = cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--kind", "cross", "--limit", "4",
                       "--metric", "exact")
    assert code == 0 and out.startswith(f"4 sentences (4 pairs from {pig_pairs}), exact match % ")
    assert "cross-attention: exact match % drop" in out and "decoder self-attention" not in out
    assert "most important: cross:" in out


@pytest.mark.parametrize("args, fragments", [
    (["translate", "-c", DEMO, TEXT, "--ablate", "cross:3:0"], ["cannot ablate cross:3:0", "layers 0 to 2"]),
    (["translate", "-c", DEMO, TEXT, "--ablate", "cross:0:1"], ["cannot ablate cross:0:1", "heads 0 to 0"]),
    (["translate", "-c", DEMO, TEXT, "--ablate", "enc_self:0:0"], ["no enc_self attention (it has dec_self, cross)"]),
    (["export", "-c", DEMO, TEXT, "-o", "x.npz", "--ablate", "cross"], ["must be KIND:LAYER:HEAD"]),
    (["translate", "-c", "piglatin-gru-no-attention", "impress", "--ablate", "cross:0:0"],
     ["this model has no attention heads to switch off"]),
    (["evaluate", "-c", DEMO, "--data", "PAIRS", "--ablate", "cross:0:x"], ["the head must be a number from 0 or *"]),
])
def test_bad_ablations_are_one_line(capsys, tmp_path, pig_pairs, args, fragments):
    args = [str(pig_pairs) if arg == "PAIRS" else str(tmp_path / arg) if arg.endswith(".npz") else arg for arg in args]
    code, _, err = cli(capsys, *args)
    assert_one_line_error(code, err, *fragments)


def test_importance_refuses_bad_pairs_and_models_without_attention(capsys, tmp_path, pig_pairs):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n", encoding="utf-8")
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", empty)[::2], "no sentence pairs")
    broken = tmp_path / "broken.tsv"
    broken.write_text("no tab here\n", encoding="utf-8")
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", broken)[::2], str(broken))
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", tmp_path / "missing.tsv")[::2],
                          "no such file")
    assert_one_line_error(*cli(capsys, "importance", "-c", "piglatin-gru-no-attention", "--data", pig_pairs)[::2],
                          "no attention heads to switch off")
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--kind", "enc_self")[::2],
                          "no enc_self attention")
