"""``attnviz translate --chat``: a chat-tuned model's prompt laid out by its chat template and encoded as
transformers' ``apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`` encodes it (the
tokenizer's own frame, Llama's ``<s>``, is not added: the template writes what it needs), and its greedy
continuation equal to ``generate`` on those ids; on a tiny random-weight Qwen2 model with the ChatML template."""

from __future__ import annotations

import json

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from models import load_checkpoint  # noqa: E402
from models.importers import convert  # noqa: E402
from models.inference.decoding import finish  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from tests.test_chat_templates import LLAMA3, QWEN2  # noqa: E402
from tests.test_decoder_only import BOS, EOS, SENTENCES, build  # noqa: E402
from tests.test_decoder_only_decoding import generate  # noqa: E402

SYSTEM = "You are a helpful assistant."
CHAT_TOKENS = ["<|im_start|>", "<|im_end|>"]


def chat_folder(folder, template: str, tokens: list[str]):
    """(transformers model, its tokenizer, our converted checkpoint file, folder): a Qwen2-shaped model whose
    tokenizer.json frames a text with ``<s>`` (so adding it twice would show), knows the template's ``tokens`` and
    has the chat ``template``."""
    original = build(folder, "qwen2")
    backend = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    backend.add_special_tokens(tokens)  # ids from 300, inside the embedding (its few unused ids)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>", pad_token="<pad>", chat_template=template)
    tokenizer.save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    out = folder.parent / f"{folder.name}.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    return original, tokenizer, out, folder


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A ChatML (Qwen2) chat model: its template writes no ``<s>``."""
    return chat_folder(tmp_path_factory.mktemp("chat") / "qwen2", QWEN2, CHAT_TOKENS)


def theirs_ids(tokenizer, text: str, system: str | None = None) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def test_chat_prompt_ids_and_greedy_continuation_equal_transformers(chat_model, capsys):
    original, tokenizer, out, folder = chat_model
    translator = Translator(load_checkpoint(out))
    for text, system in ((SENTENCES[0], None), (SENTENCES[1], SYSTEM)):
        expected = theirs_ids(tokenizer, text, system)
        assert BOS not in expected and tokenizer(text).input_ids[0] == BOS  # the frame would have added it
        ours = translator.source(translator.chat_prompt(text, system), framed=False).ids
        assert ours == expected
        assert main(["translate", "-c", str(out), "--chat", "--json", "--max-len", "8", text]
                    + (["--system", system] if system else [])) == 0
        document = json.loads(capsys.readouterr().out)
        assert document[0]["token_ids"] == generate(original, expected, max_new_tokens=8)


def test_a_template_that_writes_the_bos_has_it_once(tmp_path):
    """Llama 3's template starts with ``bos_token``: the prompt holds it once, as transformers' ids do."""
    original, tokenizer, out, folder = chat_folder(tmp_path / "llama3", LLAMA3,
                                                   ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
    translator = Translator(load_checkpoint(out))
    for text, system in ((SENTENCES[0], None), (SENTENCES[4], SYSTEM)):
        expected = theirs_ids(tokenizer, text, system)
        assert expected[0] == BOS and expected.count(BOS) == 1
        assert translator.chat_source(text, system).ids == expected
        continuation = finish(translator.decode(translator.chat_source(text, system), max_len=6, need_weights=False))
        assert continuation[0].token_ids == generate(original, expected, max_new_tokens=6)


def test_a_model_opened_from_its_folder_brings_the_folders_template(chat_model):
    original, tokenizer, out, folder = chat_model
    translator = Translator(convert(folder))
    text = SENTENCES[2]
    assert translator.source(translator.chat_prompt(text), framed=False).ids == theirs_ids(tokenizer, text)


def test_without_a_chat_template_chat_is_one_line(tmp_path, capsys):
    folder = tmp_path / "plain"
    build(folder, "qwen2")
    out = tmp_path / "plain.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["translate", "-c", str(out), "--chat", "hello"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "attnviz: error: input 1: this model has no chat template (only a chat-tuned language model's folder brings "
        "one)"]
    assert main(["translate", "-c", str(out), "--system", "be brief", "hello"]) == 1
    assert capsys.readouterr().err.strip() == ("attnviz: error: --system is the system message of a chat prompt: "
                                               "add --chat")


def test_the_end_of_an_assistant_turn_is_not_the_models_end_token_here(chat_model):
    """The prompt's last token opens the assistant's turn (``assistant\\n``): the continuation starts there."""
    original, tokenizer, out, folder = chat_model
    translator = Translator(load_checkpoint(out))
    rendered = translator.chat_prompt("hi")
    assert rendered.endswith("<|im_start|>assistant\n") and EOS not in theirs_ids(tokenizer, "hi")


def test_the_window_offers_the_chat_template_for_a_model_that_has_one(qtbot, qsettings, chat_model, tmp_path):
    """The input bar's "Chat template" option is there for a model with a template, off at first, and the prompt the
    worker then encodes for a run (``prompt_source``) is transformers' chat ids; for a model without one it is
    hidden and off."""
    from attnviz.gui.app import create_window
    from attnviz.gui.work import prompt_source

    original, tokenizer, out, folder = chat_model
    plain = tmp_path / "plain"
    build(plain, "qwen2")
    plain_out = tmp_path / "plain.safetensors"
    assert main(["convert", str(plain), "-o", str(plain_out)]) == 0
    window = create_window(str(out), "cpu", qsettings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=20_000)
    bar = window.views.input_bar
    assert bar.chat.isVisible() and not bar.chat.isChecked()
    text = SENTENCES[3]
    bar.text.setText(text)
    bar.debounce.stop()
    assert prompt_source(window.worker.translator, bar.run_settings()).ids == tokenizer(text).input_ids  # <s> first
    bar.chat.setChecked(True)
    bar.debounce.stop()
    assert bar.run_settings().chat
    assert prompt_source(window.worker.translator, bar.run_settings()).ids == theirs_ids(tokenizer, text)
    window.open_path(str(plain_out))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == plain_out,
                    timeout=20_000)
    assert not bar.chat.isVisible() and not bar.run_settings().chat
    window.close()


def test_the_panes_and_contributions_of_a_chat_run_read_the_prompt_it_ran_on(qtbot, qsettings, chat_model):
    """With "Chat template" ticked the run's prompt is the template's layout; the Neuron pane's vectors, the Lens'
    readings and the contributions of its result read that same prompt (they re-encoded the bare text: fewer prompt
    tokens, other weights, another output distribution)."""
    import numpy as np

    from attnviz.gui.app import create_window
    from tests.test_gui import run_text

    original, tokenizer, out, folder = chat_model
    window = create_window(str(out), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1000, 650)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=20_000)
    window.views.input_bar.chat.setChecked(True)
    run_text(qtbot, window, SENTENCES[3], max_len=5)
    result = window.session.result
    qtbot.waitUntil(lambda: window.session.trace is not None, timeout=20_000)
    assert result.prompt_ids == theirs_ids(tokenizer, SENTENCES[3])
    prompt, run_weights = len(result.prompt_ids), window.session.trace.attention["dec_self"][0]
    window.neuron.open()
    window.lens.open()
    window.contributions.choose("value_norms")
    answered = lambda feature: any(not isinstance(value, str) for value in feature.answers.values())  # noqa: E731
    qtbot.waitUntil(lambda: answered(window.neuron) and answered(window.lens) and answered(window.contributions),
                    timeout=30_000)
    vectors = next(value for value in window.neuron.answers.values() if not isinstance(value, str))
    layer = vectors.layers["dec_self"][0]
    assert layer.weights.shape == run_weights.shape  # [heads, prompt + output, prompt + output]
    np.testing.assert_allclose(layer.weights, run_weights, atol=1e-5)
    readings = next(value for value in window.lens.answers.values() if not isinstance(value, str))
    chosen = np.array([step.probabilities[row] for step, row in zip(result.steps, result.rows)])
    np.testing.assert_allclose(readings.probs[-1], chosen, atol=1e-4)  # the last layer is the model's output
    maps = next(value for value in window.contributions.answers.values() if not isinstance(value, str))
    assert maps.layers["dec_self"][0].shape[-1] == run_weights.shape[-1] > prompt
    least = window.minimumSizeHint()  # with its "Chat template" box and the panes' tabs it fits 1000 × 650
    assert least.width() <= 1000 and least.height() <= 650, least
    window.close()
