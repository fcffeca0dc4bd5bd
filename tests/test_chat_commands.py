"""``--chat``/``--system`` on every command that reads a prompt (export, render, lens, patch, as translate): the prompt
is laid out by the model's chat template as transformers' ``apply_chat_template(add_generation_prompt=True)`` lays
it out, so what ``translate --chat`` ran can be exported, drawn, lensed and patched; on a tiny random-weight Qwen2
model with the ChatML template. The corpus commands read pairs files and take no ``--chat``."""

from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from attnviz.cli import main  # noqa: E402
from tests.test_chat_prompts import CHAT_TOKENS, SYSTEM, chat_folder, theirs_ids  # noqa: E402
from tests.test_chat_templates import QWEN2  # noqa: E402
from tests.test_decoder_only import SENTENCES, build  # noqa: E402

NO_TEMPLATE = "attnviz: error: this model has no chat template (only a chat-tuned language model's folder brings one)"
NO_CHAT = "attnviz: error: --system is the system message of a chat prompt: add --chat"


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return chat_folder(tmp_path_factory.mktemp("chat") / "qwen2", QWEN2, CHAT_TOKENS)


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory):
    """The same shape without a chat template."""
    folder = tmp_path_factory.mktemp("plain") / "plain"
    build(folder, "qwen2")
    out = folder.parent / "plain.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    return out


def translated(capsys, checkpoint, text: str, *options: str) -> dict:
    capsys.readouterr()
    assert main(["translate", "-c", str(checkpoint), "--chat", "--json", *options, text]) == 0
    return json.loads(capsys.readouterr().out)[0]


def test_export_chat_writes_the_prompt_and_continuation_translate_chat_ran(chat_model, tmp_path, capsys):
    """The NPZ's prompt is transformers' chat ids (with and without a system message), its continuation translate
    --chat's, and the query/key vectors of --vectors cover that same sequence."""
    original, tokenizer, out, folder = chat_model
    text = SENTENCES[0]
    for number, system in enumerate((None, SYSTEM)):
        options = ["--max-len", "4"] + (["--system", system] if system else [])
        npz = tmp_path / f"chat{number}.npz"
        assert main(["export", "-c", str(out), "--chat", "--vectors", *options, text, "-o", str(npz)]) == 0
        expected = theirs_ids(tokenizer, text, system)
        with np.load(npz) as written:
            prompt_len, ids = int(written["prompt_len"]), written["token_ids"].tolist()
            fed = written["dec_self_L0"].shape[-1]
            vectors = written["key_dec_self_L0"].shape[1]
        assert prompt_len == len(expected) > len(tokenizer(text).input_ids)
        assert ids[:prompt_len] == expected
        assert ids[prompt_len:] == translated(capsys, out, text, *options)["token_ids"]
        assert vectors == fed == len(ids) - 1


def test_lens_chat_reads_the_chat_prompt(chat_model, capsys):
    """The lens covers translate --chat's continuation, and its last layer's probabilities are the transformers
    model's on the chat prompt followed by that continuation."""
    original, tokenizer, out, folder = chat_model
    text = SENTENCES[1]
    continuation = translated(capsys, out, text, "--system", SYSTEM)
    assert main(["lens", "-c", str(out), "--chat", "--system", SYSTEM, "--json", text]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["tokens"] == continuation["tokens"]
    prompt = theirs_ids(tokenizer, text, SYSTEM)
    with torch.no_grad():
        logits = original(torch.tensor([prompt + continuation["token_ids"]])).logits[0].double()
    probabilities = torch.softmax(logits, dim=-1)
    theirs = [float(probabilities[len(prompt) - 1 + step, token]) for step, token in
              enumerate(continuation["token_ids"])]
    ours = [step[-1]["p"] for step in document["decoder"]]
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_patch_chat_patches_the_two_chat_prompts(chat_model, capsys):
    original, tokenizer, out, folder = chat_model
    clean, corrupt = "the cat sat on the mat", "the car sat on the mat"  # the same number of tokens
    assert main(["patch", "-c", str(out), "--chat", "--json", "--target", "the cat", "--clean", clean,
                 "--corrupt", corrupt]) == 0
    document = json.loads(capsys.readouterr().out)
    prompt = theirs_ids(tokenizer, clean)
    assert document["prompt_len"] == len(prompt) == len(theirs_ids(tokenizer, corrupt))
    assert len(document["clean"]["tokens"]) == len(prompt)
    assert document["clean"]["tokens"][-1] == document["corrupt"]["tokens"][-1] == "↵"  # the assistant's turn opens
    assert all(len(row) == len(document["decoder_tokens"]) > len(prompt) for row in document["decoder"])


def test_render_chat_draws_the_chat_run(chat_model, plain_model, tmp_path, capsys):
    """render --chat draws another picture than the bare prompt's, also a contributions method's map; compared with
    a model that has no chat template, the line says which model lacks it."""
    original, tokenizer, out, folder = chat_model
    text = SENTENCES[2]
    common = ["-c", str(out), "--kind", "dec_self", "--layer", "0", "--head", "0", "--max-len", "3", text]
    pictures = [tmp_path / "chat.png", tmp_path / "bare.png", tmp_path / "norms.png"]
    assert main(["render", *common, "--chat", "-o", str(pictures[0])]) == 0
    assert main(["render", *common, "-o", str(pictures[1])]) == 0
    assert main(["render", *common, "--chat", "--show", "value_norms", "-o", str(pictures[2])]) == 0
    assert pictures[0].read_bytes() != pictures[1].read_bytes()
    assert all(picture.stat().st_size > 0 for picture in pictures)
    assert main(["render", *common, "--chat", "--show", "value_norms", "-o", str(tmp_path / "norms.svg")]) == 0
    assert (tmp_path / "norms.svg").read_text() == value_norms_figure(chat_model, text, tmp_path / "expected.svg")
    capsys.readouterr()
    assert main(["render", *common, "--chat", "--compare", str(plain_model), "-o", str(tmp_path / "b.png")]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [NO_TEMPLATE.replace("error: ", "error: --compare plain: ")]


def value_norms_figure(chat_model, text: str, output) -> str:
    """The value norms figure of the model's greedy 3 tokens after transformers' chat ids for ``text``, drawn as the
    window exports a contributions map."""
    from attnviz.cli.render import caption
    from attnviz.gui.rendering import render_trace
    from attnviz.state.contributions import show_choice
    from models import load_checkpoint
    from models.analysis.contributions import CONTRIBUTION_METHODS
    from models.analysis.methods import contributions
    from models.inference.decoding import finish
    from models.inference.translator import Translator

    original, tokenizer, out, folder = chat_model
    translator = Translator(load_checkpoint(out))
    prompt = theirs_ids(tokenizer, text)
    result = finish(translator.decode(translator.chat_source(text), max_len=3))[0]
    assert result.prompt_ids == prompt
    maps = contributions("value_norms", translator.model, prompt, output_ids=result.token_ids)
    render_trace(result.trace, "dec_self", 0, 0, output, size=(900, 700), caption=caption(text, (out.stem, result)),
                 contribution=(maps, show_choice(CONTRIBUTION_METHODS["value_norms"]), ""))
    return output.read_text()


@pytest.mark.parametrize("command", [
    ["export", "-o", "OUT.npz"], ["render", "--kind", "dec_self", "-o", "OUT.png"], ["lens"],
    ["patch", "--clean", "the cat", "--corrupt", "the car"]])
def test_chat_without_a_template_and_system_without_chat_are_one_line(plain_model, chat_model, tmp_path, capsys,
                                                                     command):
    name, *options = command
    options = [str(tmp_path / option) if option.startswith("OUT.") else option for option in options]
    text = [] if name == "patch" else ["hello"]
    capsys.readouterr()
    assert main([name, "-c", str(plain_model), "--chat", *options, *text]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [NO_TEMPLATE]
    assert main([name, "-c", str(chat_model[2]), "--system", "be brief", *options, *text]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [NO_CHAT]
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_corpus_commands_take_no_chat_option(chat_model, capsys):
    """evaluate, importance, contributions and stats encode a pairs file's prompts as plain text:
    --chat is not theirs (a usage error)."""
    for name in ("evaluate", "importance", "contributions", "stats"):
        with pytest.raises(SystemExit) as exit:
            main([name, "-c", str(chat_model[2]), "--chat"])
        assert exit.value.code == 2
        assert "unrecognized arguments: --chat" in capsys.readouterr().err
