"""Decoder-only models through the one decoding loop, the Translator and the CLI, checked against transformers.

The tiny random-weight models of tests/test_decoder_only.py (built by transformers here, eager attention, saved with
a tokenizer.json, converted by our importer): greedy continuations against ``generate(do_sample=False)``, beams
against ``generate(num_beams=4)``, each result's trace (one ``dec_self`` square over the prompt and the continuation)
against ``output_attentions`` of the whole sequence, forced decoding's scores against the teacher-forced
log-probabilities, the end tokens generation_config.json lists, the context's bound, and ``attnviz translate``,
``export`` and ``info`` on a converted folder.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from attnviz.cli.common import terminal_text  # noqa: E402
from models.errors import InputError  # noqa: E402
from models.importers import convert  # noqa: E402
from models.inference.decoding import (  # noqa: E402
    Capture, beam_search, finish, forced, forced_step_by_step, greedy,
)
from models.inference.translator import Translator  # noqa: E402
from models.nn.ablation import Ablation  # noqa: E402
from tests.test_decoder_only import (  # noqa: E402
    EOS, SENTENCES, STEPS, _zero_head_output, build, encode, imported, theirs,
)

__all__ = ["imported"]  # the fixture of tests/test_decoder_only.py: (family, transformers model, checkpoint, folder)
PROMPTS = SENTENCES[:3]


def generate(original, prompt: list[int], **settings) -> list[int]:
    """transformers' continuation of ``prompt`` (the prompt itself left out)."""
    settings = {"do_sample": False, "max_new_tokens": STEPS, "pad_token_id": EOS, "eos_token_id": EOS, **settings}
    with torch.no_grad():
        return original.generate(torch.tensor([prompt]), **settings)[0, len(prompt):].tolist()


def assert_trace_is_transformers(trace, original, prompt: list[int], output: list[int], label) -> None:
    """The trace is one dec_self square over every position fed (the prompt, then the output but its last token),
    labelled, with the prompt's length, every head within 1e-5 of transformers' attentions of that sequence."""
    fed = prompt + output[:-1]
    expected = theirs(original, fed).attentions
    assert trace.kinds == ["dec_self"] and trace.prompt_len == len(prompt)
    assert trace.src_tokens == [label(i) for i in prompt] and trace.tgt_tokens == [label(i) for i in fed]
    assert len(trace.attention["dec_self"]) == len(expected)
    for ours, reference in zip(trace.attention["dec_self"], expected):
        assert ours.shape == reference.shape[1:] == (4, len(fed), len(fed))
        assert np.abs(ours - reference[0].numpy()).max() < 1e-5
    assert np.array_equal(trace.masks["dec_self"], np.tril(np.ones((len(fed), len(fed)), dtype=bool)))


def test_greedy_continuation_and_its_trace_equal_transformers(imported):
    family, original, checkpoint, folder = imported
    label = checkpoint.target_tokenizer.token
    for text in PROMPTS:
        prompt = encode(folder, text)
        result = finish(greedy(checkpoint.model, prompt, Capture(label=label, max_len=STEPS)))[0]
        assert result.token_ids == generate(original, prompt), text
        assert result.prompt_ids == prompt
        assert_trace_is_transformers(result.trace, original, prompt, result.token_ids, label)


def test_every_step_reports_its_row_over_the_prompt_and_the_tokens_before(imported):
    family, original, checkpoint, folder = imported
    prompt = encode(folder, SENTENCES[4])
    steps = list(greedy(checkpoint.model, prompt, Capture(max_len=6)))
    expected = theirs(original, prompt + [step.token_id for step in steps][:-1]).attentions
    for t, step in enumerate(steps):
        for layer, rows in enumerate(step.attention["dec_self"]):
            assert rows.shape == (1, 4, len(prompt) + t)
            assert np.abs(rows[0] - expected[layer][0, :, len(prompt) - 1 + t, : len(prompt) + t].numpy()).max() < 1e-5
        assert step.masks["dec_self"].shape == (1, len(prompt) + t) and step.masks["dec_self"].all()


def test_beam_equals_generate_with_four_beams(imported):
    family, original, checkpoint, folder = imported
    label = checkpoint.target_tokenizer.token
    for text in PROMPTS[:2]:
        prompt = encode(folder, text)
        results = finish(beam_search(checkpoint.model, prompt, Capture(label=label, max_len=STEPS), beam=4,
                                     length_penalty=1.0))
        assert results[0].token_ids == generate(original, prompt, num_beams=4), text
        for result in results[:2]:  # the best trace written as it ran, the next one stacked from the steps' rows
            assert_trace_is_transformers(result.trace, original, prompt, result.token_ids, label)
        length = len(results[0].token_ids)
        assert results[0].score == pytest.approx(results[0].log_prob / length)  # transformers' length normalisation


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2", "gemma2"])
def test_beams_that_end_early_equal_generate(tmp_path, family):
    """Hypotheses ending at different steps on generation_config's end tokens: every hypothesis transformers
    returns, in its order, for several beam widths and length penalties (its finished hypotheses leave the beam for
    a list of the best K, as ours do for decoder-only models)."""
    folder = tmp_path / family
    original = build(folder, family)
    stop = generate(original, encode(folder, SENTENCES[1]))[2]  # a token the continuations reach
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, stop]}))
    model = convert(folder).model
    ended = False
    for text, beam, penalty in [(PROMPTS[0], 4, 1.0), (PROMPTS[1], 4, 0.0), (PROMPTS[2], 3, 2.0),
                                (SENTENCES[4], 5, 1.0), (SENTENCES[5], 2, -1.0), (SENTENCES[1], 4, 1.0)]:
        prompt = encode(folder, text)
        with torch.no_grad():
            expected = original.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12, num_beams=beam,
                                         num_return_sequences=beam, length_penalty=penalty, pad_token_id=EOS,
                                         eos_token_id=[EOS, stop])[:, len(prompt):].tolist()
        results = finish(beam_search(model, prompt, Capture(max_len=12), beam=beam, length_penalty=penalty))
        assert len(results) == beam
        for ids, result in zip(expected, results):  # transformers pads the shorter ones with its pad token
            assert ids[: len(result.token_ids)] == result.token_ids and set(ids[len(result.token_ids):]) <= {EOS}
        ended |= any(len(result.token_ids) < 12 for result in results)
    assert ended


def test_every_beam_hypothesis_starts_with_the_first_tokens_the_model_is_given(imported):
    family, original, checkpoint, folder = imported
    prompt, first = encode(folder, SENTENCES[0]), [42, 43]
    results = finish(beam_search(checkpoint.model, prompt, Capture(max_len=6), beam=3, first=first))
    with torch.no_grad():
        probabilities = torch.softmax(original(torch.tensor([prompt])).logits[0, -1].double(), dim=-1)
    assert all(result.token_ids[:2] == first for result in results)
    assert results[0].steps[0].probability == pytest.approx(float(probabilities[42]), abs=1e-5)  # the model's own


def test_forced_scores_are_the_teacher_forced_log_probabilities(imported):
    family, original, checkpoint, folder = imported
    label = checkpoint.target_tokenizer.token
    prompt, target = encode(folder, SENTENCES[1]), encode(folder, SENTENCES[6])[:6]
    steps = list(forced(checkpoint.model, prompt, target, Capture(label=label)))
    sequence = prompt + target + [EOS]
    with torch.no_grad():
        log_probs = torch.log_softmax(original(torch.tensor([sequence])).logits[0].double(), dim=-1)
    chosen = log_probs[len(prompt) - 1:-1].gather(1, torch.tensor(target + [EOS])[:, None])[:, 0]
    assert [step.token_id for step in steps] == target + [EOS]
    assert np.allclose([step.scores[0] for step in steps], chosen.cumsum(0).numpy(), atol=1e-4)
    assert np.allclose([step.probability for step in steps], chosen.exp().numpy(), atol=1e-5)
    result = finish(forced(checkpoint.model, prompt, target, Capture(label=label)))[0]
    assert result.prompt_ids == prompt
    assert_trace_is_transformers(result.trace, original, prompt, target + [EOS], label)
    by_steps = finish(forced_step_by_step(checkpoint.model, prompt, target, Capture(label=label)))[0]
    for ours, reference in zip(result.trace.attention["dec_self"], by_steps.trace.attention["dec_self"]):
        assert np.abs(ours - reference).max() < 1e-5
    for t, step in enumerate(steps):  # a step's rows are its row of the trace
        assert step.attention["dec_self"][0].shape == (1, 4, len(prompt) + t)


def test_recomputing_the_prefix_gives_the_cached_trace(imported):
    family, original, checkpoint, folder = imported
    prompt = encode(folder, SENTENCES[2])
    cached = finish(beam_search(checkpoint.model, prompt, Capture(max_len=8), beam=3))[0]
    again = finish(beam_search(checkpoint.model, prompt, Capture(max_len=8, use_cache=False), beam=3))[0]
    assert cached.token_ids == again.token_ids
    for ours, reference in zip(cached.trace.attention["dec_self"], again.trace.attention["dec_self"]):
        assert np.abs(ours - reference).max() < 1e-5


def test_head_ablation_decodes_as_transformers_without_that_head(imported, tmp_path):
    family, _, checkpoint, folder = imported
    original = build(tmp_path / "again", family)  # a copy to modify
    _zero_head_output(original, family, 1, 2)
    _zero_head_output(original, family, 2, 0)
    ablation = Ablation.of([("dec_self", 1, 2), ("dec_self", 2, 0)])
    prompt = encode(folder, SENTENCES[3])
    result = finish(greedy(checkpoint.model, prompt, Capture(max_len=STEPS, ablation=ablation)))[0]
    assert result.token_ids == generate(original, prompt)
    assert result.trace.ablated == (("dec_self", 1, 2), ("dec_self", 2, 0))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_end_tokens_generation_config_lists_end_the_continuation(tmp_path, family):
    folder = tmp_path / family
    original = build(folder, family)
    prompt = encode(folder, SENTENCES[1])
    stop = generate(original, prompt)[3]  # a token the continuation reaches
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, stop]}))
    model = convert(folder).model
    assert model.config.stop_ids == (stop,)
    expected = generate(original, prompt, eos_token_id=[EOS, stop])
    result = finish(greedy(model, prompt, Capture(max_len=STEPS)))[0]
    assert result.token_ids == expected and result.token_ids[-1] == stop and len(expected) <= 4
    assert result.steps[-1].finished.all()
    forced_steps = list(forced(model, prompt, expected[:-1] + [7]))
    assert [bool(step.finished[0]) for step in forced_steps][-3:] == [False, False, True]


def test_the_continuation_is_bounded_by_the_context(tmp_path):
    folder = tmp_path / "gpt2"
    build(folder, "gpt2", n_positions=16)
    model = convert(folder).model
    prompt = (encode(folder, SENTENCES[5]) * 3)[:13]
    result = finish(greedy(model, prompt, Capture()))[0]
    assert len(result.token_ids) == 3 and result.trace.attention["dec_self"][0].shape == (4, 15, 15)
    assert all(len(result.token_ids) <= 3 for result in finish(beam_search(model, prompt, Capture(), beam=2)))
    with pytest.raises(InputError, match="the target has 5 tokens; this model takes at most 3 after this prompt"):
        finish(forced(model, prompt, prompt[:4]))
    with pytest.raises(InputError, match="the prompt has 16 tokens; this model's context holds 16 positions"):
        finish(greedy(model, prompt + prompt[:3], Capture()))
    with torch.no_grad():  # a step past the learned table is one line, found on the host
        state, _ = model.start(torch.tensor([prompt + prompt[:2]]))
        model.step(torch.tensor([5]), state)
        with pytest.raises(InputError, match="reach position 17; this model has 16 positions"):
            model.step(torch.tensor([5]), state)


def test_the_translator_frames_the_prompt_and_gives_the_continuation(imported):
    family, original, checkpoint, folder = imported
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    translator = Translator(checkpoint, "cpu")
    assert translator.decoder_only
    source = translator.source(SENTENCES[0])
    assert source.ids == tokenizer(SENTENCES[0])["input_ids"]  # Llama's bos first, as transformers frames it
    result = finish(translator.decode(source, max_len=STEPS))[0]
    assert result.token_ids == generate(original, source.ids)
    assert result.text == tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()
    trace_bytes = sum(layer.nbytes for layer in result.trace.attention["dec_self"])
    assert translator.trace_size(source, max_len=len(result.token_ids)) == trace_bytes
    target = translator.target(SENTENCES[6])
    forced_result = finish(translator.decode(source, mode="forced", target_ids=target))[0]
    assert translator.trace_size(source, mode="forced", target_ids=target) == sum(
        layer.nbytes for layer in forced_result.trace.attention["dec_self"])
    with pytest.raises(InputError, match="context holds"):
        translator.source(" ".join(SENTENCES * 20))


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "llama"
    return folder, build(folder, "llama")


def test_attnviz_translate_prints_the_continuation(llama_folder, capsys, tmp_path, monkeypatch):
    folder, original = llama_folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    expected = [generate(original, tokenizer(text)["input_ids"], max_new_tokens=8) for text in PROMPTS[:2]]
    assert main(["translate", "-c", str(folder), "--max-len", "8", *PROMPTS[:2]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [terminal_text(tokenizer.decode(ids, skip_special_tokens=True).strip()) for ids in expected]
    assert main(["translate", "-c", str(folder), "--max-len", "8", "--json", PROMPTS[0]]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document[0]["token_ids"] == expected[0] and terminal_text(document[0]["output"]) == lines[0]
    assert len(document[0]["tokens"]) == len(expected[0])
    assert main(["translate", "-c", str(folder), "--max-len", "8", "--beam", "4", "--json", PROMPTS[0]]) == 0
    assert json.loads(capsys.readouterr().out)[0]["token_ids"] == generate(
        original, tokenizer(PROMPTS[0])["input_ids"], max_new_tokens=8, num_beams=4)


def test_attnviz_export_writes_the_whole_sequence(llama_folder, capsys, tmp_path, monkeypatch):
    folder, original = llama_folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "lm.npz"
    assert main(["export", "-c", str(folder), "--max-len", "6", PROMPTS[1], "-o", str(out)]) == 0, \
        capsys.readouterr().err
    prompt = encode(folder, PROMPTS[1])
    continuation = generate(original, prompt, max_new_tokens=6)
    with np.load(out) as arrays:
        assert "src_tokens" not in arrays.files and "tgt_tokens" not in arrays.files
        assert arrays["token_ids"].tolist() == prompt + continuation and int(arrays["prompt_len"]) == len(prompt)
        n = len(prompt) + len(continuation) - 1
        assert len(arrays["tokens"]) == n + 1 and arrays["dec_self_mask"].shape == (n, n)
        expected = theirs(original, arrays["token_ids"].tolist()[:n]).attentions
        for layer, reference in enumerate(expected):
            assert arrays[f"dec_self_L{layer}"].shape == (4, n, n)
            assert np.abs(arrays[f"dec_self_L{layer}"] - reference[0].numpy()).max() < 1e-5
        assert arrays["output_tokens"].tolist() == arrays["tokens"].tolist()[len(prompt):]


def test_attnviz_info_describes_the_model_and_the_corpus_commands_read_prompts(llama_folder, capsys, tmp_path,
                                                                              monkeypatch):
    folder, _ = llama_folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["info", "-c", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "3 layers of 4 heads, 2 key/value heads (each read by 2)" in out
    assert "128 positions, prompt and continuation together" in out and "source " not in out
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat\tsat on the mat\n", encoding="utf-8")
    for command in (["stats"], ["importance"], ["evaluate"], ["contributions"]):
        assert main([*command, "-c", str(folder), "--data", str(pairs)]) == 0, capsys.readouterr().err
        capsys.readouterr()
    assert main(["export", "-c", str(folder), "--contributions", "the cat", "-o", str(tmp_path / "c.npz")]) == 0
    with np.load(tmp_path / "c.npz") as saved:
        assert "alti_dec_self_L0" in saved and int(saved["prompt_len"]) == len(saved["token_ids"]) - len(
            saved["output_tokens"])


def test_a_step_reads_the_device_once(imported):
    """As for the other models (tests/test_decoding_transfers.py): after the first step, which also converts the
    prompt's attention, each step's one transfer is the only read of the device."""
    from models.inference.transfer import HostReads
    from tests.test_decoding_transfers import CPU_ONLY_READS, ScalarReads

    family, original, checkpoint, folder = imported
    prompt = encode(folder, SENTENCES[5])
    for steps in (greedy(checkpoint.model, prompt, Capture(max_len=8)),
                  beam_search(checkpoint.model, prompt, Capture(max_len=8), beam=4),
                  forced_step_by_step(checkpoint.model, prompt, [7] * 7)):
        next(steps)
        scalars, reads, count = ScalarReads(), HostReads(ignoring=CPU_ONLY_READS), 1
        with scalars, reads:
            for _ in steps:
                count += 1
        assert count > 1 and scalars.reads == [] and reads.reads == count - 1


def test_a_prompt_ending_in_the_end_token_is_all_real_where_pad_and_end_share_an_id(tmp_path):
    """GPT-2 has no padding token: its pad falls back to the end token (<|endoftext|>, also its bos). A prompt that
    ends in it (documents joined by the end token) is real tokens to the last, as transformers reads it: the greedy
    continuation, every head of the trace (the end tokens attended as keys), the teacher-forced logits and the
    Translator's framing of the typed end token equal transformers' on the whole prompt."""
    folder = tmp_path / "gpt2"
    original = build(folder, "gpt2")
    checkpoint = convert(folder)
    config, label = checkpoint.model.config, checkpoint.target_tokenizer.token
    assert config.pad_id == config.eos_id == EOS
    for prompt in (encode(folder, SENTENCES[0]) + [EOS], encode(folder, SENTENCES[1]) + [EOS, EOS]):
        result = finish(greedy(checkpoint.model, prompt, Capture(label=label, max_len=STEPS)))[0]
        assert result.token_ids == generate(original, prompt) and result.prompt_ids == prompt
        assert_trace_is_transformers(result.trace, original, prompt, result.token_ids, label)
        ids = prompt + result.token_ids[:4]
        with torch.no_grad():
            logits, _ = checkpoint.model(torch.tensor([prompt]), torch.tensor([result.token_ids[:4]]))
        assert (logits - theirs(original, ids).logits[:, len(prompt):]).abs().max() < 1e-4
    translator = Translator(checkpoint, "cpu")
    source = translator.source(SENTENCES[2] + "</s>")
    assert source.ids[-1] == EOS and source.ids[:-1] == encode(folder, SENTENCES[2])
    assert finish(translator.decode(source, max_len=STEPS))[0].token_ids == generate(original, source.ids)
