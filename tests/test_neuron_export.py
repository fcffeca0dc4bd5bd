"""``attnviz export --vectors``: the arrays written reproduce every head's exported weights through the formula the
README gives, softmax(q·kᵀ·scale (soft-capped) + bias) over the keys the mask allows, written out here."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from attnviz.cli import main  # noqa: E402

DEMOS = "resources/checkpoints"


def weights_from(arrays, kind: str, layer: int) -> np.ndarray:
    """Every head's weights ``[H, Q, K]`` from the exported vectors alone."""
    name = f"{kind}_L{layer}"
    q = arrays[f"query_{name}"].astype(np.float64)
    k = arrays[f"key_{name}"].astype(np.float64)
    scale = arrays[f"scale_{name}"] if f"scale_{name}" in arrays.files else 1.0 / np.sqrt(q.shape[-1])
    scores = np.einsum("hqd,hkd->hqk", q, k) * scale
    if f"softcap_{name}" in arrays.files:
        cap = float(arrays[f"softcap_{name}"])
        scores = cap * np.tanh(scores / cap)
    if f"bias_{name}" in arrays.files:
        scores = scores + arrays[f"bias_{name}"]
    allowed = arrays[f"{kind}_mask"][None]
    scores = np.where(allowed, scores, -np.inf)
    exp = np.where(allowed, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    return exp / exp.sum(axis=-1, keepdims=True)


def assert_exported_vectors_reproduce(path) -> set[str]:
    kinds = set()
    with np.load(path) as arrays:
        for name in arrays.files:
            if name.startswith("query_"):
                kind, layer = name[len("query_"):].rsplit("_L", 1)
                kinds.add(kind)
                weights = arrays[f"{kind}_L{layer}"]
                assert arrays[name].shape[:2] == weights.shape[:2]
                assert np.abs(weights_from(arrays, kind, int(layer)) - weights).max() < 1e-5, name
    return kinds


@pytest.mark.parametrize("demo", ["en-es-transformer", "en-es-transformer-postln"])
def test_the_exported_vectors_reproduce_the_exported_weights(demo, tmp_path, capsys):
    out = tmp_path / "run.npz"
    code = main(["export", "-c", f"{DEMOS}/{demo}.safetensors", "the cat sat on the mat", "--vectors", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert assert_exported_vectors_reproduce(out) == {"enc_self", "dec_self", "cross"}
    with np.load(out) as arrays:
        assert not bool(arrays["vectors_rotated"])
        assert not any(name.startswith(("scale_", "bias_", "softcap_")) for name in arrays.files)
        assert arrays["query_enc_self_L0"].shape == (4, len(arrays["src_tokens"]), 64)


def test_ablated_heads_keep_vectors_that_reproduce_the_run(tmp_path, capsys):
    out = tmp_path / "run.npz"
    assert main(["export", "-c", f"{DEMOS}/en-es-transformer.safetensors", "the cat sat on the mat", "--vectors",
                 "--ablate", "enc_self:0:1", "-o", str(out)]) == 0, capsys.readouterr().err
    assert_exported_vectors_reproduce(out)


def test_t5_exports_its_scale_and_relative_bias(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tests import test_import_t5

    folder, _, _ = test_import_t5.build(tmp_path, "v1.1")
    out = tmp_path / "t5.npz"
    # a random T5 never ends its output; 20 cached steps round as the one traced pass does (512: 1.7e-5 apart)
    assert main(["export", "-c", str(folder), "the cat sat on the mat", "--vectors", "--max-len", "20",
                 "-o", str(out)]) == 0, \
        capsys.readouterr().err
    assert assert_exported_vectors_reproduce(out) == {"enc_self", "dec_self", "cross"}
    with np.load(out) as arrays:
        assert (arrays["scale_enc_self_L0"] == 1.0).all() and "bias_enc_self_L0" in arrays.files
        assert "bias_cross_L0" not in arrays.files


def test_an_encoder_only_export_writes_its_vectors(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tests import test_encoder_only

    test_encoder_only.build(tmp_path, "bert")
    out = tmp_path / "bert.npz"
    assert main(["export", "-c", str(tmp_path), "the cat sat on the [MASK] .", "--vectors", "-o", str(out)]) == 0, \
        capsys.readouterr().err
    assert assert_exported_vectors_reproduce(out) == {"enc_self"}


def test_vectors_of_a_gru_or_into_a_csv_are_one_line(tmp_path, capsys):
    out = tmp_path / "gru.npz"
    assert main(["export", "-c", f"{DEMOS}/piglatin-gru-scaled-dot.safetensors", "hello", "--vectors",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnviz: error: the neuron view shows a Transformer head's query and key vectors; a GRU model's "
                   "attention scores its decoder's recurrent state against the encoder's annotations instead"]
    assert not out.exists()
    assert main(["export", "-c", f"{DEMOS}/en-es-transformer.safetensors", "hello", "--vectors", "--kind", "enc_self",
                 "-o", str(tmp_path / "one.csv")]) == 1
    assert "--vectors writes arrays to an .npz file" in capsys.readouterr().err
