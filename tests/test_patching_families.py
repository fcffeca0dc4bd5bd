"""Activation patching (models/analysis/patching.py) on a converted model of every encoder-decoder importer family
(built the way its import test builds it): the clean source and a copy with one token changed, forced on the clean
greedy output. The encoder's whole output patched gives the clean metric, the last decoder layer at the step's
position too, and a cross-attention head's cell equals the corrupted run with that head's output replaced by hand
(a hook on the attention's output projection)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch

from models.analysis.contributions import decoder_input
from models.analysis.patching import activation_patching
from models.importers import convert
from models.inference.translator import Translator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")

DATA = Path(__file__).parent / "data"
SENTENCE = "the cat sees a big house"


def forced_logits(model, src: list[int], output: list[int], hooks=()) -> torch.Tensor:
    try:
        with torch.no_grad():
            logits, _ = model(torch.tensor([src]), torch.tensor([decoder_input(model, output)]))
    finally:
        for handle in hooks:
            handle.remove()
    return logits[0]


def assert_patching_exact(translator: Translator, text: str = SENTENCE) -> None:
    model = translator.model.eval()
    clean = translator.source(text).ids
    output = translator.translate(text, max_len=6).token_ids
    corrupt = list(clean)
    corrupt[1] = clean[2] if clean[2] != clean[1] else clean[0]
    step = len(output) - 1
    result = activation_patching(model, clean, corrupt, output, step=step)
    scale = max(1.0, abs(result.clean), abs(result.corrupt))
    assert result.exact.encoder_all[-1] == pytest.approx(result.clean, abs=1e-5 * scale)
    assert result.exact.decoder[-1, step] == pytest.approx(result.clean, abs=1e-5 * scale)
    layer, head = len(model.decoder_layers) - 1, 0
    attention = model.decoder_layers[layer].cross_attention.attention
    columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    seen = []

    def note(_module, args):
        seen.append(args[0][..., columns].clone())

    def replace(_module, args):
        combined = args[0].clone()
        combined[..., columns] = seen[0]
        return (combined,)

    forced_logits(model, clean, output, [attention.output.register_forward_pre_hook(note)])
    logits = forced_logits(model, corrupt, output, [attention.output.register_forward_pre_hook(replace)])
    by_hand = float(logits[step, result.clean_token] - logits[step, result.corrupt_token])
    assert result.exact.heads["cross"][layer, head] == pytest.approx(by_hand, abs=1e-5 * scale)


FOLDERS = {  # family: the import test module whose builder writes its folder, the builder, its arguments
    "bart": ("test_import_hf_bart", "build", ("bart",)),
    "mbart": ("test_import_hf_bart", "build", ("mbart",)),
    "marian": ("test_import_marian", "build_marian", (True,)),
    "t5-v1.0": ("test_import_t5", "build", ("v1.0",)),
    "t5-v1.1": ("test_import_t5", "build", ("v1.1",)),
    "nllb": ("test_import_languages", "build_nllb", ()),
    "m2m100": ("test_import_languages", "build_m2m100", ()),
    "pegasus": ("test_import_pegasus", "build_pegasus", ()),
    "blenderbot-small": ("test_import_blenderbot_small", "build_blenderbot", ()),
}


@pytest.mark.parametrize("family", list(FOLDERS))
def test_transformers_families(family, tmp_path):
    pytest.importorskip("transformers")
    module, builder, arguments = FOLDERS[family]
    folder, *_ = getattr(importlib.import_module(f"tests.{module}"), builder)(tmp_path, *arguments)
    assert_patching_exact(Translator(convert(folder)))


@pytest.mark.parametrize("path", ["fairseq/transformer-postln", "fairseq/transformer-sides",
                                  "sockeye/transformer-preln"])
def test_toolkits(path):
    assert_patching_exact(Translator(convert(DATA / path)))
