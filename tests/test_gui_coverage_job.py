"""The window's source coverage (ALTI+) of a long prompt is a long job: a run asked for while it computes starts
between two of its units instead of waiting for it, the old coverage answers that it stopped, and the new run gets
its own coverage, equal to the core's."""

from __future__ import annotations

import pytest
import torch

from models import build_model
from models.analysis.contributions import alti, source_coverage
from models.nn.config import DecoderOnlyConfig
from models.storage.checkpoint import save_checkpoint
from tests.test_gui import WAIT, run_text

PROMPT = 900  # characters: ALTI+ of its traced pass takes dozens of units (runs of queries of each layer)


@pytest.fixture
def long_prompt_window(qtbot, qsettings, tmp_path, char_tokenizer):
    """A window on a random-weight decoder-only model (6 layers) that reads prompts of ``PROMPT`` characters."""
    from attnviz.gui.app import create_window

    torch.manual_seed(0)
    config = DecoderOnlyConfig(arch="decoder-only", vocab_size=char_tokenizer.vocab_size, d_model=64, layers=6,
                               heads=4, d_ff=64, max_len=PROMPT + 32, pad_id=0, bos_id=2, eos_id=3,
                               min_output_len=8, prompt_separator=True)
    path = save_checkpoint(tmp_path / "lm.safetensors", build_model(config).eval(), char_tokenizer, char_tokenizer)
    window = create_window(str(path), "cpu", qsettings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    yield window
    window.close()


def test_a_run_asked_for_during_a_long_prompts_coverage_overtakes_it_and_gets_its_own(qtbot, long_prompt_window):
    window, worker = long_prompt_window, long_prompt_window.worker
    answers = []
    worker.contributions_ready.connect(answers.append)
    long_text = ("the old man gave his grandson a red bicycle and the boy rode it every day " * 20)[:PROMPT]
    run_text(qtbot, window, long_text, max_len=4)
    long_run = window.session.request.id
    # its coverage job is asked for once the views are drawn: the traced pass and ALTI+'s units are ahead of it
    qtbot.waitUntil(lambda: window.session.jobs.newest("coverage") > long_run, timeout=WAIT)
    assert not window.contributions.coverage
    run_text(qtbot, window, "team", max_len=4)  # waits for the new run's result
    short_run = window.session.request.id
    qtbot.waitUntil(lambda: any(answer.job.request_id == long_run for answer in answers), timeout=WAIT)
    old = [answer for answer in answers if answer.job.request_id == long_run]
    assert len(old) == 1 and old[0].value is None and old[0].coverage is None
    assert old[0].stopped is not None and old[0].stopped.line == "Stopped: a newer sentence run was asked for."
    # the new run's own coverage follows, as the core computes it
    qtbot.waitUntil(lambda: 0 in window.contributions.coverage, timeout=WAIT)
    translator, result = worker.translator, window.session.results[0]
    expected = source_coverage(alti(translator.model, translator.source("team").ids, result.token_ids))
    assert f"source contribution {expected.avg_source:.2f}" in window.contributions.coverage[0]
    assert f"source contribution {expected.avg_source:.2f}" in window.views.input_bar.output.text()
    assert [answer.job.request_id for answer in answers] == [long_run, short_run]
