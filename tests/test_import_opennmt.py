"""Import of OpenNMT-py 3.x Transformer checkpoints, against OpenNMT-py itself (3.5.1, installed with
--no-deps: see .ci/run).

Each checkpoint is trained for a few steps by OpenNMT-py's own trainer (``onmt.bin.train``) on a tiny corpus
written here, and saved by its ModelSaver as ``model_step_N.pt``. The converted model's logits and every head
of every attention layer (read from OpenNMT-py's MultiHeadedAttention modules through forward hooks) must
equal OpenNMT-py's own forward, and greedy output must equal its own translator (``onmt.bin.translate``,
beam 1, argmax).

OpenNMT-py's package import loads every data transform it ships; four of them import libraries that serve
only data preparation (spacy, pyahocorasick, fasttext, rapidfuzz), not installed here. While ``onmt`` is
imported those names are empty placeholder modules, removed again afterwards; no code path used here
touches them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import types

import numpy as np
import pytest
import torch

from attnviz.cli import main
from models.errors import CheckpointError
from models.importers import convert, detect_format
from models.inference.translator import Translator
from tests.helpers import toolkit_imports

DATA_ONLY_LIBRARIES = ("spacy", "ahocorasick", "fasttext", "rapidfuzz")


def _import_onmt():
    placeholders = []
    for name in DATA_ONLY_LIBRARIES:
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)

            def missing(attribute, _name=name):
                if attribute.startswith("__"):
                    raise AttributeError(attribute)
                return types.ModuleType(f"{_name}.{attribute}")

            module.__getattr__ = missing
            sys.modules[name] = module
            placeholders.append(name)
    try:
        with toolkit_imports("OpenNMT-py", "pip install --no-deps OpenNMT-py==3.5.1 pyonmttok==1.38.1 "
                                           "configargparse==1.9.0 (see the README)"):
            import onmt
            from onmt.bin.train import train
            from onmt.bin.translate import translate
            from onmt.model_builder import load_test_model
            from onmt.opts import train_opts, translate_opts
            from onmt.utils.parse import ArgumentParser
    finally:
        for name in placeholders:
            sys.modules.pop(name, None)
    return types.SimpleNamespace(onmt=onmt, train=train, translate=translate, load_test_model=load_test_model,
                                 train_opts=train_opts, translate_opts=translate_opts, ArgumentParser=ArgumentParser)


ONMT = _import_onmt()
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")

SRC_WORDS = "the a cat dog sees runs big small house red".split()
TGT_WORDS = "le la chat chien voit court grand petit maison rouge".split()
STEPS = 3

CASES = {
    # OpenNMT-py 3.x defaults: separate vocabularies and embeddings, no q/k/v/FFN biases, interleaved positions
    "defaults": dict(heads=2, seed=1, param_init=0.0, param_init_glorot=True, learning_rate=0.01),
    # one vocabulary and embedding matrix, the generator tied to it, every bias, concatenated sinusoids, gelu
    "shared": dict(heads=4, share_vocab=True, share_embeddings=True, share_decoder_embeddings=True,
                   add_qkvbias=True, add_ffnbias=True, position_encoding_type="SinusoidalConcat",
                   pos_ffn_activation_fn="gelu", seed=2, param_init=0.0, param_init_glorot=True,
                   learning_rate=0.02, steps=20),
    # its RNN: a bidirectional 2-layer GRU encoder, a GRU decoder with input feeding and mlp attention,
    # embeddings narrower than the states, coverage attention (a weight no forward reads)
    "gru": dict(encoder_type="brnn", decoder_type="rnn", rnn_type="GRU", global_attention="mlp", input_feed=1,
                coverage_attn=True,
                position_encoding=False, word_vec_size=8, seed=8, param_init=0.3, param_init_glorot=False,
                learning_rate=0.01),
    # its RNN defaults (LSTM, general attention, input feeding) with a unidirectional encoder
    "lstm": dict(encoder_type="rnn", decoder_type="rnn", rnn_type="LSTM", global_attention="general", input_feed=1,
                 position_encoding=False, layers=1, enc_layers=1, dec_layers=1, seed=5, param_init=0.3,
                 param_init_glorot=False, learning_rate=0.01),
}
RNNS = {"gru": ("gru", True, "mlp", 2, 8), "lstm": ("lstm", False, "general", 1, 0)}


@contextlib.contextmanager
def onmt_context():
    """OpenNMT-py configures the root logger, seeds every random generator and loads with torch.load's old
    default: keep all three local."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    generators = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):  # its own file, written just now
            yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        torch.set_rng_state(generators[0])
        random.setstate(generators[1])
        np.random.set_state(generators[2])


def _yaml(value) -> str:
    return "true" if value is True else "false" if value is False else str(value)


_TRAINED: dict = {}


@pytest.fixture(scope="module", params=list(CASES))
def trained(request, tmp_path_factory):
    return request.param, _train(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The OpenNMT-py defaults' model, for the refusals."""
    return _train("defaults", tmp_path_factory)


def _train(name, tmp_path_factory):
    """A model trained for a few steps by OpenNMT-py's trainer and saved by its ModelSaver (once per case)."""
    if name in _TRAINED:
        return _TRAINED[name]
    options = dict(CASES[name])
    steps = options.pop("steps", STEPS)
    folder = tmp_path_factory.mktemp(f"onmt-{name}")
    rng = random.Random(3)
    src_lines, tgt_lines = [], []
    for _ in range(24):
        picks = [rng.randrange(len(SRC_WORDS)) for _ in range(rng.randint(2, 6))]
        src_lines.append(" ".join(SRC_WORDS[i] for i in picks))
        tgt_lines.append(" ".join(TGT_WORDS[i] for i in picks))
    (folder / "src.txt").write_text("\n".join(src_lines) + "\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")
    shared = options.get("share_vocab", False)
    src_vocab = SRC_WORDS + TGT_WORDS if shared else SRC_WORDS
    (folder / "src.vocab").write_text("".join(f"{w}\t{30 - i}\n" for i, w in enumerate(src_vocab)), encoding="utf-8")
    (folder / "tgt.vocab").write_text("".join(f"{w}\t{30 - i}\n" for i, w in enumerate(TGT_WORDS)), encoding="utf-8")
    settings = {**dict(
        save_model=folder / "model", save_checkpoint_steps=steps, train_steps=steps, batch_size=8,
        batch_type="sents", valid_steps=1000, num_workers=0, bucket_size=16, report_every=1,
        encoder_type="transformer", decoder_type="transformer", position_encoding=True, enc_layers=2, dec_layers=2,
        hidden_size=16, word_vec_size=16, transformer_ff=32, dropout="[0.1]", attention_dropout="[0.1]",
        optim="adam", src_vocab=folder / "src.vocab",
        tgt_vocab=folder / "tgt.vocab", transforms="[filtertoolong]", src_seq_length=50, tgt_seq_length=50),
        **options}
    lines = ["data:", "    corpus_1:", f"        path_src: {folder / 'src.txt'}",
             f"        path_tgt: {folder / 'tgt.txt'}"] + [f"{key}: {_yaml(value)}" for key, value in settings.items()]
    (folder / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    parser = ONMT.ArgumentParser(description="train.py")
    ONMT.train_opts(parser)
    opt, _ = parser.parse_known_args(["-config", str(folder / "config.yaml")])
    with onmt_context():
        ONMT.train(opt)
    path = folder / f"model_step_{steps}.pt"
    assert path.is_file()
    _TRAINED[name] = path
    return path


def _onmt_model(path):
    parser = ONMT.ArgumentParser()
    ONMT.translate_opts(parser)
    opt = parser.parse_args(["-model", str(path), "-src", "unused", "-gpu", "-1"])
    with onmt_context():
        vocabs, model, _ = ONMT.load_test_model(opt)
    return vocabs, model.eval()


def test_logits_and_every_head_equal_opennmt(trained):
    name, path = trained
    assert detect_format(path) == "opennmt"
    checkpoint = convert(path)
    config = checkpoint.config
    vocabs, model = _onmt_model(path)
    if name in RNNS:
        assert config.arch == "rnn-luong" and config.hidden == 16
        assert (config.rnn_cell, config.bidirectional, config.luong_score, config.decoder_layers,
                config.embedding_size) == RNNS[name]
    else:
        assert config.share_embeddings == config.tie_output == (name == "shared")
        assert config.positions == ("fairseq" if name == "shared" else "interleaved")
        assert config.attention_bias == (name == "shared") and config.pre_norm_kv and config.final_norm
    src_vocab, tgt_vocab = vocabs["src"], vocabs["tgt"]
    pad = tgt_vocab["<blank>"]
    sources = [["the", "cat", "sees", "a", "red", "house"], ["dog", "runs"]]
    targets = [["<s>", "le", "chat", "voit", "la", "maison"], ["<s>", "chien", "court"]]
    src = torch.full((2, 6), pad)
    tgt = torch.full((2, 6), pad)
    for row, (words, outs) in enumerate(zip(sources, targets)):
        src[row, : len(words)] = torch.tensor(src_vocab(words))
        tgt[row, : len(outs)] = torch.tensor(tgt_vocab(outs))
    lengths = torch.tensor([6, 2])
    captured = {}

    def keep(key):
        def hook(module, inputs, output):  # output: (context, attention [B, H, Q, K])
            captured[key] = output[1]
        return hook

    hooks = [module.register_forward_hook(keep(key)) for key, module in model.named_modules()
             if type(module).__name__ == "MultiHeadedAttention"]
    with torch.no_grad():
        dec_in = torch.cat([tgt, tgt[:, :1]], dim=1)[..., None]  # its forward drops the last target token
        dec_out, attns = model(src[..., None], dec_in, lengths)
        expected = model.generator(dec_out)
        logits, intermediates = checkpoint.model(src, tgt, need_weights=True)
    for hook in hooks:
        hook.remove()
    real_src = src != pad
    real_tgt = tgt != pad
    assert (logits - expected)[real_tgt].abs().max() < 1e-4
    ours = intermediates.attention
    if name in RNNS:  # its one attention, returned as attns['std'] [T, B, S]: ours is one layer of one head
        assert not captured and set(ours) == {"cross"} and ours["cross"][0].shape[1] == 1
        assert (attns["std"].transpose(0, 1) - ours["cross"][0][:, 0])[real_tgt].abs().max() < 1e-5
        return
    assert len(captured) == config.encoder_layers + 2 * config.decoder_layers
    for layer in range(config.encoder_layers):
        theirs = captured[f"encoder.transformer.{layer}.self_attn"]  # [B, H, S, S]
        diff = (theirs - ours["enc_self"][layer]).abs().transpose(1, 2)  # [B, S, H, S]: rows of real queries
        assert diff[real_src].max() < 1e-5
    for layer in range(config.decoder_layers):
        for kind, module in (("dec_self", "self_attn"), ("cross", "context_attn")):
            theirs = captured[f"decoder.transformer_layers.{layer}.{module}"]  # [B, H, T, K]
            diff = (theirs - ours[kind][layer]).abs().transpose(1, 2)
            assert theirs.shape[1] == config.heads and diff[real_tgt].max() < 1e-5, (kind, layer)
    # What OpenNMT-py itself returns (-attn_debug): the last layer's cross-attention, head 0.
    assert (attns["std"] - ours["cross"][-1][:, 0])[real_tgt].abs().max() < 1e-5


def test_greedy_output_equals_the_opennmt_translator(trained, tmp_path):
    name, path = trained
    sentences = ["the cat sees a red house", "dog runs", "a big dog sees the small cat", "red red red"]
    (tmp_path / "src.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    parser = ONMT.ArgumentParser()
    ONMT.translate_opts(parser)
    opt = parser.parse_args(["-model", str(path), "-src", str(tmp_path / "src.txt"), "-output",
                             str(tmp_path / "pred.txt"), "-gpu", "-1", "-beam_size", "1", "-random_sampling_topk",
                             "1", "-max_length", "12", "-batch_size", "4", "-batch_type", "sents"])
    ONMT.ArgumentParser.validate_translate_opts(opt)
    with onmt_context():
        ONMT.translate(opt)
    expected = (tmp_path / "pred.txt").read_text(encoding="utf-8").splitlines()
    translator = Translator(convert(path), device="cpu")
    tokenizer = translator.target_tokenizer
    for sentence, theirs in zip(sentences, expected, strict=True):
        result = translator.translate(sentence, max_len=12)
        ids = [token for token in result.token_ids if token != tokenizer.eos_id]
        assert [tokenizer.vocabulary[token] for token in ids] == theirs.split(), sentence
    assert len({line for line in expected}) > 1  # a model that says something different per sentence


def test_the_cli_converts_and_info_names_the_transforms(trained, tmp_path, capsys):
    name, path = trained
    output = tmp_path / "onmt.safetensors"
    assert main(["convert", str(path), "-o", str(output)]) == 0
    assert main(["info", str(output)]) == 0
    shown = capsys.readouterr().out
    assert "opennmt" in shown and "filtertoolong" in shown and "whitespace" in shown


def test_the_safetensors_save_format_is_read(plain, tmp_path):
    """``-save_format safetensors``: its ModelSaver writes vocab, opt and optim to the .pt and every weight,
    the generator's included, to a .safetensors file beside it."""
    from onmt.models.model_saver import ModelSaver

    vocabs, model = _onmt_model(plain)
    options = torch.load(plain, weights_only=False)["opt"]
    saver = ModelSaver(str(tmp_path / "run"), model, options, vocabs, torch.optim.Adam(model.parameters()),
                       keep_checkpoint=-1, save_format="safetensors", device_id=-1)
    with onmt_context():
        saver.save(7)
    path = tmp_path / "run_step_7.pt"
    assert (tmp_path / "run_step_7.safetensors").is_file() and "model" not in torch.load(path, weights_only=False)
    assert detect_format(path) == "opennmt"
    converted, reference = convert(path).model.state_dict(), convert(plain).model.state_dict()
    assert converted.keys() == reference.keys()
    assert all(torch.equal(converted[key], reference[key]) for key in reference)
    weights = tmp_path / "run_step_7.safetensors"  # given instead of the .pt, it stands for it
    assert detect_format(weights) == "opennmt" and convert(weights).provenance["imported_from"]["file"] == str(path)
    weights.unlink()
    with pytest.raises(CheckpointError, match=r"holds no weights \(-save_format safetensors keeps them beside it, "
                                              r"in run_step_7.safetensors, which is missing\)$"):
        convert(path)


def test_dropping_it_on_the_window_opens_it_without_a_question(qtbot, window, plain):
    """File → Open and drag-and-drop go through the same import: an OpenNMT-py file says everything."""
    from tests.test_gui_import import drop, opened

    drop(window, plain)
    qtbot.waitUntil(lambda: opened(window, plain.name), timeout=20_000)
    assert window.opening.import_dialog is None or not window.opening.import_dialog.isVisible()
    window.views.input_bar.text.setText("the cat sees a dog")
    window.views.input_bar.max_len.setValue(5)
    window.run()
    qtbot.waitUntil(lambda: window.session.trace is not None and window.session.trace.heads("cross") == 2,
                    timeout=20_000)
    assert window.session.trace.src_tokens == ["the", "cat", "sees", "a", "dog"]


def _saved_variant(path, tmp_path, change):
    checkpoint = torch.load(path, weights_only=False)
    change(checkpoint)
    variant = tmp_path / "variant.pt"
    torch.save(checkpoint, variant)
    return variant


def test_an_unused_weight_is_refused_naming_it(plain, tmp_path):
    path = plain
    extra = _saved_variant(path, tmp_path, lambda c: c["model"].update({"decoder.extra.weight": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the opennmt layout: "
                                              r"decoder.extra.weight$"):
        convert(extra)


@pytest.mark.parametrize("option, value, named", [
    ("max_relative_positions", 16, r"max_relative_positions 16 \(relative \(Shaw et al.\) positions\)"),
    ("max_relative_positions", -1, r"max_relative_positions -1 \(rotary positions\)"),
    ("self_attn_type", "average", r"self_attn_type 'average' \(average attention\)"),
    ("layer_norm", "rms", r"layer_norm 'rms' \(a norm other than LayerNorm\)"),
    ("encoder_type", "brnn", r"encoder_type brnn / decoder_type transformer"),
])
def test_an_unsupported_option_is_refused_in_one_line(plain, tmp_path, option, value, named):
    path = plain
    variant = _saved_variant(path, tmp_path, lambda c: setattr(c["opt"], option, value))
    with pytest.raises(CheckpointError, match=named + r" is not supported; this version imports encoder_type/"
                                                      r"decoder_type transformer") as error:
        convert(variant)
    assert "\n" not in str(error.value)


def test_an_rnn_without_input_feeding_is_refused_naming_what_is_supported(plain, tmp_path):
    """A real OpenNMT-py RNN without input feeding (its StdRNNDecoder), built by its own builder."""
    from onmt.inputters.inputter import dict_to_vocabs, vocabs_to_dict
    from onmt.model_builder import build_base_model

    path = plain
    checkpoint = torch.load(path, weights_only=False)
    opt = argparse.Namespace(**vars(checkpoint["opt"]))
    opt.encoder_type, opt.decoder_type, opt.rnn_type, opt.global_attention = "brnn", "rnn", "LSTM", "general"
    opt.brnn, opt.position_encoding, opt.input_feed = True, False, 0
    opt.share_embeddings = opt.share_decoder_embeddings = False
    with onmt_context():
        vocabs = dict_to_vocabs(checkpoint["vocab"])
        model = build_base_model(opt, vocabs)
    assert type(model.decoder).__name__ == "StdRNNDecoder"
    state = model.state_dict()
    rnn = tmp_path / "rnn_step_1.pt"
    torch.save({"model": {k: v for k, v in state.items() if "generator" not in k},
                "generator": model.generator.state_dict(), "vocab": vocabs_to_dict(vocabs), "opt": opt, "optim": {}},
               rnn)
    with pytest.raises(CheckpointError, match=r"input_feed 0 \(a decoder without input feeding\) is not supported; "
                                              r"this version imports encoder_type/decoder_type transformer .* and "
                                              r"encoder_type rnn/brnn with decoder_type rnn: rnn_type LSTM/GRU, "
                                              r"global_attention dot/general/mlp, input feeding$"):
        convert(rnn)


class CreatesAFile:
    """What a hostile checkpoint does: unpickling it calls ``open(target, "w")``."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return open, (self.target, "w")


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
def test_a_hostile_pickle_in_the_opennmt_layout_is_refused(plain, tmp_path, capsys, trust):
    path = plain
    target = tmp_path / "pwned"
    hostile = _saved_variant(path, tmp_path, lambda c: c.update(opt=CreatesAFile(target)))
    with pytest.raises(CheckpointError, match=r"refused: unpickling it would call (io|builtins).open, .*nothing from "
                                              r"it was run"):
        convert(hostile, trust=trust)
    output = tmp_path / "out.safetensors"
    assert main(["convert", str(hostile), "-o", str(output), *(["--trust"] if trust else [])]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "refused" in err and "Traceback" not in err
    assert not target.exists() and not output.exists()
