"""``attnviz importance --metric nll`` (the default) and ``--method gradient`` on the bundled pig-latin demo:
the JSON layout, the tables, the unknown-character warning, and bad combinations as one line."""

from __future__ import annotations

import json

import numpy as np

from tests.test_ablation_cli import DEMO, WORDS, pig_pairs  # noqa: F401  (pig_pairs is a fixture)
from tests.test_cli import assert_one_line_error, cli


def test_nll_ablation_is_the_default_and_ranks_first_the_heads_the_task_needs(capsys, pig_pairs):  # noqa: F811
    code, out, err = cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--json")
    assert code == 0 and "warning" not in err
    document = json.loads(out)
    assert (document["metric"], document["method"], document["examples"]) == ("nll", "ablation", len(WORDS))
    assert 0 < document["baseline"] < 0.5  # nats per reference token: the demo knows its task
    assert set(document["drops"]) == {"dec_self", "cross"} and np.shape(document["drops"]["cross"]) == (3, 1)
    for kind, table in document["drops"].items():
        np.testing.assert_allclose(table, np.array(document["scores"][kind]) - document["baseline"])
    # the three heads whose loss alone takes exact match from 92 % to 17 % or less (--metric exact) come first
    top = {f"{entry['kind']}:{entry['layer']}:{entry['head']}" for entry in document["ranking"][:3]}
    assert top == {"dec_self:0:0", "cross:0:0", "cross:2:0"}
    assert document["ranking"][0]["drop"] > 1.0 and "gradient" not in document


def test_gradient_adds_the_signed_raw_and_normalised_tables(capsys, pig_pairs):  # noqa: F811
    code, out, _ = cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--json", "--method", "gradient")
    document = json.loads(out)
    assert code == 0 and (document["metric"], document["method"]) == ("nll", "gradient")
    for kind in ("dec_self", "cross"):
        gradient, raw = np.array(document["gradient"][kind]), np.array(document["importance"][kind])
        np.testing.assert_allclose(document["drops"][kind], -gradient, atol=1e-12)
        assert raw.shape == (3, 1) and (raw >= np.abs(gradient) - 1e-12).all()
        np.testing.assert_allclose(document["normalized"][kind], np.ones((3, 1)))  # one head a layer: its norm
    assert document["ranking"][0]["kind"] == "cross" and document["ranking"][0]["layer"] == 2

    code, out, _ = cli(capsys, "importance", "-c", "en-es-transformer", "--data", pig_pairs, "--method", "gradient",
                       "--normalize", "layer", "--kind", "cross")
    assert code == 0 and "cross-attention: first-order estimate of the NLL (nats/token) rise with the head off" in out
    assert "cross-attention: importance |∂L/∂ξ| (Michel et al., each layer divided by its L2 norm)" in out
    assert "encoder self-attention" not in out


def test_characters_the_vocabulary_lacks_are_one_warning(capsys, tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("hello\tellohay\nsnow ☃\townsay ☃\nfish\tishfay ✓\n", encoding="utf-8")
    code, out, err = cli(capsys, "importance", "-c", DEMO, "--data", pairs)
    assert code == 0 and out.startswith(f"3 sentences (3 pairs from {pairs}), NLL (nats/token) ")
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == ["attnviz: warning: 2 of 3 pairs have characters the vocabulary lacks; each was scored as "
                        "its unknown token"]


def test_bad_combinations_are_one_line(capsys, tmp_path, pig_pairs):  # noqa: F811
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--method", "gradient",
                               "--metric", "chrf")[::2], "--method gradient differentiates the NLL")
    assert_one_line_error(*cli(capsys, "importance", "-c", "piglatin-gru-no-attention", "--data", pig_pairs,
                               "--method", "gradient")[::2], "no attention heads to switch off")
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", empty, "--method", "gradient")[::2],
                          "no sentence pairs")
    long = tmp_path / "long.tsv"
    long.write_text("hello\tellohay\nlong\t" + "a" * 80 + "\n", encoding="utf-8")
    assert_one_line_error(*cli(capsys, "importance", "-c", DEMO, "--data", long)[::2],
                          "pair 2: the reference has 81 tokens with the end token; this model takes at most 64")


def test_decoding_importance_takes_the_batch_options_and_its_tables_do_not_depend_on_them(capsys, pig_pairs):  # noqa: F811
    """--metric exact decodes the pairs again per head in batches: one at a time (--batch-size 1) and in batches
    bounded by tokens give the same tables and pruning curves."""
    documents = []
    for batching in (["--batch-size", "1"], ["--batch-size", "3", "--batch-tokens", "64"], []):
        code, out, err = cli(capsys, "importance", "-c", DEMO, "--data", pig_pairs, "--json", "--metric", "exact",
                             "--limit", "6", "--prune-curve", *batching)
        assert code == 0, err
        documents.append(json.loads(out))
    for document in documents[1:]:
        assert document["drops"] == documents[0]["drops"] and document["baseline"] == documents[0]["baseline"]
        assert document["prune_curve"]["scores"] == documents[0]["prune_curve"]["scores"]
