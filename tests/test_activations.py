"""Every activation a Hugging Face encoder-decoder config can name (transformers' ACT2FN, as Marian, BART,
mBART, M2M/NLLB, Pegasus, FSMT and T5 read ``activation_function`` / ``feed_forward_proj``) computes what
transformers computes, or is refused in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
activations = pytest.importorskip("transformers.activations")

from models.errors import CheckpointError
from models.importers.common import Source
from models.importers.hf_common import HF_ACTIVATIONS, hf_activation
from models.nn.transformer import ACTIVATIONS

LEARNED = {"prelu", "xielu"}  # activations with trained parameters of their own


@pytest.mark.parametrize("name", sorted(HF_ACTIVATIONS))
def test_ours_equals_act2fn(name):
    x = torch.cat([torch.linspace(-14.0, 14.0, 4001), torch.randn(2000, generator=torch.Generator().manual_seed(0))])
    theirs = activations.ACT2FN[name](x)
    ours = ACTIVATIONS[HF_ACTIVATIONS[name]](x)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_every_act2fn_name_is_imported_but_those_that_learn_parameters():
    assert set(activations.ACT2FN) - set(HF_ACTIVATIONS) == LEARNED


@pytest.mark.parametrize("name", sorted(LEARNED))
def test_an_activation_with_parameters_is_refused_in_one_line(name, tmp_path: Path):
    with pytest.raises(CheckpointError, match=f"activation_function '{name}' is not supported") as error:
        hf_activation(Source(tmp_path), {"activation_function": name})
    assert "\n" not in str(error.value)
