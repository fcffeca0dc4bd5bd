"""The status bar's line while a run decodes: a beam whose best row has ended showed "step 209: <pad>"."""

from __future__ import annotations

import numpy as np
import torch

from attnviz.state.progress import decoding_progress
from models import build_model
from models.inference.decoding import Capture, beam_search, greedy, run
from tests.helpers import tiny_config


def test_a_beam_names_the_token_of_a_hypothesis_still_growing_never_its_padding():
    torch.manual_seed(3)
    model = build_model(tiny_config("transformer-preln")).eval()
    steps, _ = run(beam_search(model, [5, 6, 7, 3], Capture(max_len=40), beam=4))
    padded = [step for step in steps if step.finished.any()]
    assert padded, "no hypothesis ended before the last step: choose another seed"
    for step in steps:
        line = decoding_progress(step)
        assert "<pad>" not in line
        growing = np.flatnonzero(~step.finished)
        assert line.startswith(f"decoding… step {step.step + 1}: ")
        if len(growing):
            assert f"‘{step.tokens[growing[0]]}’ ({len(growing)} of 4 hypotheses still growing)" in line
        else:
            assert line.endswith("every hypothesis of the beam has ended")
    greedy_steps, _ = run(greedy(model, [5, 6, 7, 3], Capture(max_len=3)))
    assert decoding_progress(greedy_steps[0]) == f"decoding… step 1: {greedy_steps[0].tokens[0]}"
