"""Import of JoeyNMT 2.x model folders, against JoeyNMT itself (2.3.0, installed with --no-deps: see .ci/run).

One model is trained for 3 steps by JoeyNMT's own trainer; the others are built by JoeyNMT's own ``build_model``
from its own config dict with JoeyNMT's own vocabularies,
given seeded random weights, and saved as its trainer saves a model folder: ``config.yaml``, ``src_vocab.txt`` /
``trg_vocab.txt`` (``Vocabulary.to_file``), ``STEP.ckpt`` (a torch.save dict with ``model_state`` and the
trainer's other states) and ``best.ckpt`` linking to it. The converted model's logits must equal JoeyNMT's
forward, every head of every attention layer must equal what its MultiHeadedAttention modules computed (read
through forward hooks on their softmax), the cross-attention must equal what its decoder returns, and greedy
output must equal ``joeynmt.search.greedy``.

JoeyNMT's ``helpers`` import ``torch.utils.tensorboard`` for training logs (the ``tensorboard`` package, not
installed here): while ``joeynmt`` is imported that name is a placeholder module whose SummaryWriter writes
nothing, removed afterwards; no forward or search code uses it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnviz.cli import main
from models.errors import CheckpointError
from models.importers import convert, detect_format
from models.inference.translator import Translator
from tests.helpers import toolkit_imports

TENSORBOARD = "torch.utils.tensorboard"
JOEYNMT_INSTALL = "pip install --no-deps joeynmt==2.3.0 && pip install -e '.[test]' (see the README)"


def _import_joeynmt():
    placeholder = False
    try:
        __import__(TENSORBOARD)
    except ImportError:
        module = types.ModuleType(TENSORBOARD)

        class SummaryWriter:  # its trainer's log writer: writes nothing here
            def __init__(self, *args, **kwargs):
                pass

            def __getattr__(self, name):
                return lambda *args, **kwargs: None

        module.SummaryWriter = SummaryWriter
        sys.modules[TENSORBOARD] = module
        placeholder = True
    try:
        with toolkit_imports("JoeyNMT", JOEYNMT_INSTALL):
            from joeynmt.config import _check_special_symbols, load_config
            from joeynmt.helpers import make_model_dir
            from joeynmt.model import build_model
            from joeynmt.search import greedy
            from joeynmt.training import train
            from joeynmt.vocabulary import Vocabulary
    finally:
        if placeholder:
            sys.modules.pop(TENSORBOARD, None)
    return SimpleNamespace(build_model=build_model, greedy=greedy, Vocabulary=Vocabulary,
                           special_symbols=_check_special_symbols, load_config=load_config,
                           make_model_dir=make_model_dir, train=train)


JOEY = _import_joeynmt()
yaml = pytest.importorskip("yaml")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")

SRC_WORDS = "the a cat dog sees runs big small house red".split()
TGT_WORDS = "le la chat chien voit court grand petit maison rouge".split()


def _transformer(layer_norm, *, alpha=1.0, activation="relu", scale=True, heads=2, decoder_layer_norm="same"):
    """Both sides' settings; a layer_norm of None leaves the key out (JoeyNMT's default for that side)."""
    side = dict(type="transformer", num_layers=2, num_heads=heads, hidden_size=16, ff_size=32, dropout=0.1,
                alpha=alpha, activation=activation, embeddings=dict(embedding_dim=16, scale=scale, dropout=0.1))
    stacks = []
    for placement in (layer_norm, layer_norm if decoder_layer_norm == "same" else decoder_layer_norm):
        stacks.append(dict(side, embeddings=dict(side["embeddings"])))
        if placement is not None:
            stacks[-1]["layer_norm"] = placement
    return dict(encoder=stacks[0], decoder=stacks[1])


def _recurrent(rnn_type, attention, *, layers, embedding, input_feeding, init_hidden, encoder_hidden=8):
    encoder = dict(type="recurrent", rnn_type=rnn_type, hidden_size=encoder_hidden, num_layers=layers,
                   bidirectional=True,
                   dropout=0.1, embeddings=dict(embedding_dim=embedding, scale=False))
    decoder = dict(type="recurrent", rnn_type=rnn_type, hidden_size=16, num_layers=layers, attention=attention,
                   input_feeding=input_feeding, init_hidden=init_hidden, dropout=0.1, hidden_dropout=0.1,
                   embeddings=dict(embedding_dim=embedding, scale=False))
    return dict(encoder=encoder, decoder=decoder)


CASES = {
    # JoeyNMT's usual Transformer: pre-LN with a final norm per stack, scaled embeddings, separate vocabularies
    "pre": dict(model=_transformer("pre"), seed=1),
    # post-LN, residuals scaled by alpha, gelu, one vocabulary and embedding table tied to the output layer
    "post-tied": dict(model={**_transformer("post", alpha=0.7, activation="gelu", heads=4),
                             "tied_embeddings": True, "tied_softmax": True}, seed=2, shared=True),
    # a pre-LN encoder with a final norm, a post-LN decoder without, with its own head count and feed-forward width
    "pre-post": dict(model={"encoder": {**_transformer("pre")["encoder"], "num_heads": 2, "ff_size": 24},
                            "decoder": {**_transformer("post")["decoder"], "num_heads": 4, "ff_size": 40}}, seed=9),
    # JoeyNMT's own defaults, layer_norm named on neither side: a pre-LN encoder and a post-LN decoder, neither
    # with a final norm (JoeyNMT adds one only where layer_norm says pre)
    "unnamed": dict(model=_transformer(None), seed=10),
    # the encoder's left unnamed (pre-LN, no final norm) beside a pre-LN decoder with one
    "unnamed-pre": dict(model=_transformer(None, decoder_layer_norm="pre"), seed=15),
    # a post-LN encoder (no final norm) beside a pre-LN decoder with one
    "post-pre": dict(model=_transformer("post", decoder_layer_norm="pre", alpha=0.8), seed=12),
    # JoeyNMT's RNN defaults (GRU, Bahdanau attention, input feeding, a bridge) with 2 layers, narrow embeddings
    "gru-bahdanau": dict(model=_recurrent("gru", "bahdanau", layers=2, embedding=8, input_feeding=True,
                                          init_hidden="bridge"), seed=3),
    # an LSTM with Luong attention, no input feeding, started from the encoder's last state, all tied
    "lstm-luong": dict(model={**_recurrent("lstm", "luong", layers=1, embedding=16, input_feeding=False,
                                           init_hidden="last"), "tied_embeddings": True, "tied_softmax": True},
                       seed=4, shared=True),
    # a GRU with Luong attention started from zeros
    "gru-zero": dict(model=_recurrent("gru", "luong", layers=1, embedding=16, input_feeding=True,
                                      init_hidden="zero"), seed=5),
    # an encoder of 16 units per direction before a decoder of 16: its annotations twice as wide, JoeyNMT's
    # Luong attention projects them, its bridge and attentional layer read them
    "gru-luong-wide": dict(model=_recurrent("gru", "luong", layers=2, embedding=8, input_feeding=True,
                                            init_hidden="bridge", encoder_hidden=16), seed=6),
    # the same widths with Bahdanau attention, LSTM cells started from the forward half of the encoder's state
    "lstm-bahdanau-wide": dict(model=_recurrent("lstm", "bahdanau", layers=1, embedding=16, input_feeding=True,
                                                init_hidden="last", encoder_hidden=16), seed=7),
}
RECURRENT = ("gru-bahdanau", "lstm-luong", "gru-zero", "gru-luong-wide", "lstm-bahdanau-wide")
TRAINED = "pre-trainer"  # a pre-LN Transformer trained 3 steps by JoeyNMT's own trainer


def _special_symbols():
    return SimpleNamespace(**JOEY.special_symbols({}))


def _build(name, folder, case=None):
    """A JoeyNMT model built by its build_model with seeded random weights, saved as a model folder."""
    case = case or CASES[name]
    specials = _special_symbols()
    src_vocab = JOEY.Vocabulary(SRC_WORDS + TGT_WORDS if case.get("shared") else SRC_WORDS, specials)
    trg_vocab = src_vocab if case.get("shared") else JOEY.Vocabulary(TGT_WORDS, specials)
    model_cfg = {"initializer": "xavier_uniform", "bias_initializer": "normal", **case["model"]}
    torch.manual_seed(case["seed"])
    model = JOEY.build_model(model_cfg, src_vocab=src_vocab, trg_vocab=trg_vocab)
    with torch.no_grad():  # LayerNorms and biases away from their initial ones and zeros (ties kept: one parameter)
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.eval()
    folder.mkdir()
    src_vocab.to_file(folder / "src_vocab.txt")
    trg_vocab.to_file(folder / "trg_vocab.txt")
    config = {
        "name": name,
        "data": {"train": "train", "dev": "dev", "dataset_type": "plain",
                 "src": {"lang": "en", "level": "word", "lowercase": False, "max_length": 30,
                         "voc_file": str(folder / "src_vocab.txt")},
                 "trg": {"lang": "fr", "level": "word", "lowercase": False, "max_length": 30,
                         "voc_file": str(folder / "trg_vocab.txt")}},
        "training": {"model_dir": str(folder), "optimizer": "adam", "learning_rate": 0.001, "batch_size": 8},
        "model": model_cfg,
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    optimizer = torch.optim.Adam(model.parameters())
    state = {"model_state": model.state_dict(), "optimizer_state": optimizer.state_dict(), "scaler_state": None,
             "scheduler_state": None, "train_iter_state": torch.Generator().manual_seed(0).get_state(),
             "stats_state": {"epochs": 1, "steps": 3, "total_tokens": 120, "total_correct": 7,
                             "best_ckpt_score": 9.5, "best_ckpt_iter": 3}}
    torch.save(state, folder / "3.ckpt")
    (folder / "best.ckpt").symlink_to("3.ckpt")
    return model, src_vocab, trg_vocab


@contextlib.contextmanager
def joeynmt_context():
    """JoeyNMT's trainer seeds every random generator and adds log handlers: keep both local."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    generators = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)
        torch.set_rng_state(generators[0])
        random.setstate(generators[1])
        np.random.set_state(generators[2])


def _train(folder):
    """A pre-LN Transformer trained for one epoch (3 steps) by JoeyNMT's own trainer on a tiny corpus written
    here; its model folder is what the trainer leaves. The model is read back as JoeyNMT's prediction does."""
    rng = random.Random(3)
    src_lines, tgt_lines = [], []
    for _ in range(24):
        picks = [rng.randrange(len(SRC_WORDS)) for _ in range(rng.randint(2, 6))]
        src_lines.append(" ".join(SRC_WORDS[i] for i in picks))
        tgt_lines.append(" ".join(TGT_WORDS[i] for i in picks))
    for split in ("train", "dev"):
        (folder / f"{split}.en").write_text("\n".join(src_lines) + "\n", encoding="utf-8")
        (folder / f"{split}.fr").write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")
    model_dir = folder / "model"
    side = _transformer("pre")["encoder"]
    config = {
        "name": "tiny",
        "data": {"train": str(folder / "train"), "dev": str(folder / "dev"), "dataset_type": "plain",
                 "src": {"lang": "en", "level": "word", "voc_min_freq": 1, "max_length": 30},
                 "trg": {"lang": "fr", "level": "word", "voc_min_freq": 1, "max_length": 30}},
        "training": {"model_dir": str(model_dir), "optimizer": "adam", "learning_rate": 0.001, "batch_size": 8,
                     "batch_type": "sentence", "epochs": 1, "validation_freq": 3, "logging_freq": 1,
                     "scheduling": "noam", "learning_rate_warmup": 2, "learning_rate_factor": 0.05,
                     "use_cuda": False, "overwrite": True,
                     "num_workers": 0, "random_seed": 3, "eval_metrics": ["bleu"]},
        "testing": {"beam_size": 1},
        "model": {"initializer": "xavier_uniform", "bias_initializer": "normal", "encoder": side,
                  "decoder": dict(side)},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with joeynmt_context():
        cfg = JOEY.load_config(folder / "config.yaml")
        JOEY.make_model_dir(model_dir, overwrite=True)
        shutil.copy2(folder / "config.yaml", model_dir / "config.yaml")  # as its __main__ does
        torch.manual_seed(3)  # it builds the model before it seeds the generators itself
        JOEY.train(rank=0, world_size=None, cfg=cfg, skip_test=True)
    specials = _special_symbols()
    src_vocab, trg_vocab = (JOEY.Vocabulary((model_dir / name).read_text(encoding="utf-8").splitlines(), specials)
                            for name in ("src_vocab.txt", "trg_vocab.txt"))
    model = JOEY.build_model(cfg["model"], src_vocab=src_vocab, trg_vocab=trg_vocab)
    model.load_state_dict(torch.load(model_dir / "best.ckpt", weights_only=True)["model_state"])
    return model_dir, model.eval(), src_vocab, trg_vocab


@pytest.fixture(scope="module", params=[*CASES, TRAINED])
def built(request, tmp_path_factory):
    if request.param == TRAINED:
        folder, model, src_vocab, trg_vocab = _train(tmp_path_factory.mktemp("joey-trainer"))
        return SimpleNamespace(name=TRAINED, folder=folder, model=model, src_vocab=src_vocab, trg_vocab=trg_vocab)
    folder = tmp_path_factory.mktemp(f"joey-{request.param}") / "model"
    model, src_vocab, trg_vocab = _build(request.param, folder)
    return SimpleNamespace(name=request.param, folder=folder, model=model, src_vocab=src_vocab, trg_vocab=trg_vocab)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    folder = tmp_path_factory.mktemp("joey-plain") / "model"
    _build("pre", folder)
    return folder


def _batch(built, sources, targets):
    pad = built.src_vocab.pad_index
    src = torch.full((len(sources), max(map(len, sources)) + 1), pad)
    tgt = torch.full((len(targets), max(map(len, targets)) + 1), pad)
    for row, (words, outs) in enumerate(zip(sources, targets)):
        ids = [built.src_vocab.lookup(word) for word in words] + [built.src_vocab.eos_index]
        src[row, : len(ids)] = torch.tensor(ids)
        outs_ids = [built.trg_vocab.bos_index] + [built.trg_vocab.lookup(word) for word in outs]
        tgt[row, : len(outs_ids)] = torch.tensor(outs_ids)
    return src, tgt


def test_logits_and_every_head_equal_joeynmt(built):
    for given in (built.folder, built.folder / "best.ckpt", built.folder / "config.yaml"):
        assert detect_format(given) == "joeynmt", given
    checkpoint = convert(built.folder)
    if built.name in RECURRENT:
        _check_recurrent(built, checkpoint)
    else:
        _check_transformer(built, checkpoint)


@pytest.mark.parametrize("decoder_norm", [None, "pre", "post"], ids=["decoder-unnamed", "decoder-pre", "decoder-post"])
@pytest.mark.parametrize("encoder_norm", [None, "pre", "post"], ids=["encoder-unnamed", "encoder-pre", "encoder-post"])
def test_every_naming_of_layer_norm_imports_what_joeynmt_builds(tmp_path, encoder_norm, decoder_norm):
    """layer_norm named pre, post or not at all on each side: JoeyNMT's own modules say what it computes."""
    folder = tmp_path / "model"
    model, src_vocab, trg_vocab = _build("naming", folder, dict(
        model=_transformer(encoder_norm, decoder_layer_norm=decoder_norm), seed=20))
    built = SimpleNamespace(name="naming", folder=folder, model=model, src_vocab=src_vocab, trg_vocab=trg_vocab)
    _check_transformer(built, convert(folder))


def _check_transformer(built, checkpoint):
    config, model = checkpoint.config, built.model
    stacks = (model.encoder, model.decoder)  # each side's placement and final norm as JoeyNMT built them
    assert tuple(config.norm_position_of(side) for side in ("encoder", "decoder")) == tuple(
        stack.layers[0]._layer_norm_position for stack in stacks)
    assert tuple(config.final_norm_of(side) for side in ("encoder", "decoder")) == tuple(
        stack.layer_norm is not None for stack in stacks)
    assert config.share_embeddings == (model.src_embed is model.trg_embed)
    assert config.tie_output == (model.decoder.output_layer.weight is model.trg_embed.lut.weight)
    assert config.residual_scale == model.encoder.layers[0].alpha == model.decoder.layers[0].alpha
    sources = [["the", "cat", "sees", "a", "red", "house"], ["dog", "runs"]]
    targets = [["le", "chat", "voit", "la", "maison"], ["chien", "court"]]
    if built.name == "post-tied":
        sources[1] = ["chien", "the"]
    src, tgt = _batch(built, sources, targets)
    pad = built.src_vocab.pad_index
    src_mask, trg_mask = (src != pad)[:, None], (tgt != pad)[:, None]
    captured = {}

    def keep(key):
        def hook(module, inputs, output):  # the softmax of one MultiHeadedAttention: [B, H, Q, K]
            captured[key] = output
        return hook

    hooks = [module.softmax.register_forward_hook(keep(key)) for key, module in model.named_modules()
             if type(module).__name__ == "MultiHeadedAttention"]
    with torch.no_grad():
        memory, hidden, _, _ = model(return_type="encode", src=src, src_length=src_mask.sum(-1)[:, 0],
                                     src_mask=src_mask)
        expected, _, cross, _ = model(return_type="decode", trg_input=tgt, encoder_output=memory,
                                      encoder_hidden=hidden, src_mask=src_mask, unroll_steps=tgt.shape[1],
                                      trg_mask=trg_mask, return_attention=True)
        logits, intermediates = checkpoint.model(src, tgt, need_weights=True)
    for hook in hooks:
        hook.remove()
    real_src, real_tgt = src != pad, tgt != pad
    assert (logits - expected)[real_tgt].abs().max() < 1e-4
    ours = intermediates.attention
    assert len(captured) == config.encoder_layers + 2 * config.decoder_layers
    for layer in range(config.encoder_layers):
        diff = (captured[f"encoder.layers.{layer}.src_src_att"] - ours["enc_self"][layer]).abs().transpose(1, 2)
        assert diff[real_src].max() < 1e-5, layer
    for layer in range(config.decoder_layers):
        for kind, module in (("dec_self", "trg_trg_att"), ("cross", "src_trg_att")):
            theirs = captured[f"decoder.layers.{layer}.{module}"]
            diff = (theirs - ours[kind][layer]).abs().transpose(1, 2)
            assert theirs.shape[1] == config.heads_of("decoder") and diff[real_tgt].max() < 1e-5, (kind, layer)
    # What its decoder returns: the last layer's cross-attention averaged over the heads.
    assert (cross - ours["cross"][-1].mean(dim=1))[real_tgt].abs().max() < 1e-5


def _check_recurrent(built, checkpoint):
    config, case = checkpoint.config, CASES[built.name]["model"]
    assert config.arch == "rnn-luong" and config.hidden == 16 and config.bidirectional
    assert config.annotation_width == 2 * case["encoder"]["hidden_size"]
    assert (config.rnn_cell, config.luong_score, config.input_feeding, config.init_hidden) == (
        case["decoder"]["rnn_type"], "mlp" if case["decoder"]["attention"] == "bahdanau" else "general",
        case["decoder"]["input_feeding"], case["decoder"]["init_hidden"])
    sources = [["the", "cat", "sees", "a", "red", "house"], ["dog", "runs"]]  # longest first: JoeyNMT packs
    targets = [["le", "chat", "voit", "la", "maison"], ["chien", "court"]]
    src, tgt = _batch(built, sources, targets)
    pad = built.src_vocab.pad_index
    src_mask = (src != pad)[:, None]
    with torch.no_grad():
        memory, hidden, _, _ = built.model(return_type="encode", src=src, src_length=src_mask.sum(-1)[:, 0],
                                           src_mask=src_mask)
        expected, _, cross, _ = built.model(return_type="decode", trg_input=tgt, encoder_output=memory,
                                            encoder_hidden=hidden, src_mask=src_mask, unroll_steps=tgt.shape[1])
        logits, intermediates = checkpoint.model(src, tgt, need_weights=True)
    real_tgt = tgt != pad
    assert (logits - expected)[real_tgt].abs().max() < 1e-4
    ours = intermediates.attention
    assert set(ours) == {"cross"} and ours["cross"][0].shape[1] == 1  # one layer, one head: what it returns
    assert (cross - ours["cross"][0][:, 0])[real_tgt].abs().max() < 1e-5


def test_greedy_output_equals_joeynmt_search(built):
    sentences = ["the cat sees a red house", "dog runs", "a big dog sees the small cat", "red red red", "the"]
    translator = Translator(convert(built.folder / "best.ckpt"), device="cpu")
    tokenizer = translator.target_tokenizer
    outputs = set()
    for sentence in sentences:
        src, _ = _batch(built, [sentence.split()], [[]])
        src_mask = (src != built.src_vocab.pad_index)[:, None]
        with torch.no_grad():
            memory, hidden, _, _ = built.model(return_type="encode", src=src, src_length=src_mask.sum(-1)[:, 0],
                                               src_mask=src_mask)
            theirs, _, _ = JOEY.greedy(src_mask=src_mask, max_output_length=12, model=built.model,
                                       encoder_output=memory, encoder_hidden=hidden)
        expected = [int(token) for token in theirs[0]]
        if built.trg_vocab.eos_index in expected:
            expected = expected[: expected.index(built.trg_vocab.eos_index)]
        result = translator.translate(sentence, max_len=12)
        ids = [token for token in result.token_ids if token != tokenizer.eos_id]
        assert ids == expected, sentence
        outputs.add(tuple(ids))
    assert len(outputs) > 1  # a model that says something different per sentence


def test_the_cli_converts_and_info_names_it(plain, tmp_path, capsys):
    output = tmp_path / "joey.safetensors"
    assert main(["convert", str(plain), "-o", str(output)]) == 0
    assert main(["info", str(output)]) == 0
    shown = capsys.readouterr().out
    assert "joeynmt" in shown and "whitespace" in shown
    assert any(line.split() == ["src.level:", "word"] for line in shown.splitlines())  # provenance as key: value lines


def test_joeynmts_default_layout_converts_on_the_command_line(tmp_path):
    """layer_norm named on neither side: a pre-LN encoder and a post-LN decoder, neither with a final norm."""
    from models.storage.checkpoint import load_checkpoint

    folder = tmp_path / "model"
    _build("unnamed", folder)
    output = tmp_path / "joey.safetensors"
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    config = load_checkpoint(output).config
    assert [(config.norm_position_of(side), config.final_norm_of(side)) for side in ("encoder", "decoder")] == [
        ("pre", False), ("post", False)]


def _copy(folder, tmp_path, change_state=None, change_config=None):
    target = tmp_path / "variant"
    target.mkdir(parents=True)
    for name in ("src_vocab.txt", "trg_vocab.txt"):
        (target / name).write_bytes((folder / name).read_bytes())
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    if change_config:
        change_config(config)
    (target / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    state = torch.load(folder / "3.ckpt", weights_only=True)
    if change_state:
        change_state(state)
    torch.save(state, target / "best.ckpt")
    return target


def test_an_unused_weight_is_refused_naming_it(plain, tmp_path):
    variant = _copy(plain, tmp_path, change_state=lambda s: s["model_state"].update({"decoder.extra.weight":
                                                                                       torch.zeros(2)}))
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the JoeyNMT Transformer layout: "
                                              r"decoder.extra.weight$"):
        convert(variant)


MOSES_CORPUS = ["The cat's hat is red.", 'She said "hello" to the dog & the cat.', "It costs $5 -- or more?",
                "L'homme voit «la maison» : c'est grand !", "Le chien court vite, très vite."]
MOSES_TYPED = ['The cat\u2019s  hat is "red"!', "the dog & the cat ?", "L'homme court\u200b vite : c'est grand.",
               "A zebra sees the cat."]  # curly quote, two spaces, a zero-width space, unknown words


@pytest.mark.parametrize("level", ["word", "bpe"])
@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalize"])
def test_the_moses_pretokenizer_splits_and_joins_text_as_joeynmt(plain, tmp_path, level, normalize):
    """``tokenizer_cfg.pretokenizer: moses`` (with ``lowercase`` and, or not, ``normalize``), before JoeyNMT's word
    level or subword-nmt: typed text becomes the ids JoeyNMT's own pre_process, tokenizer and vocabulary give,
    and output ids read back as JoeyNMT's post_process writes them."""
    import io

    from joeynmt.tokenizers import build_tokenizer

    from models.storage.checkpoint import load_checkpoint

    data = {side: {"lang": lang, "level": level, "lowercase": True, "normalize": normalize,
                   "tokenizer_cfg": {"pretokenizer": "moses"}} for side, lang in (("src", "en"), ("trg", "fr"))}
    if level == "bpe":
        learn_bpe = pytest.importorskip("subword_nmt.learn_bpe")
        words = build_tokenizer({side: {**section, "level": "word", "tokenizer_cfg": {"pretokenizer": "moses"}}
                                 for side, section in data.items()})["en"]
        codes = io.StringIO()
        learn_bpe.learn_bpe(io.StringIO("\n".join(words.pre_process(line) for line in MOSES_CORPUS * 3) + "\n"), codes,
                            num_symbols=40)
        (tmp_path / "codes.txt").write_text(codes.getvalue(), encoding="utf-8")
        for section in data.values():
            section.update(tokenizer_type="subword-nmt", tokenizer_cfg={"pretokenizer": "moses", "num_merges": 40,
                                                                        "codes": str(tmp_path / "codes.txt")})
    tokenizer = build_tokenizer(data)["en"]
    pieces = sorted({piece for line in MOSES_CORPUS for piece in tokenizer(tokenizer.pre_process(line))})
    # Moses split "cat's" and escaped its apostrophe: a word, or subword-nmt's first piece of it
    assert ("&apos;s" if level == "word" else "&apos;@@") in pieces
    vocab = JOEY.Vocabulary(pieces, _special_symbols())
    tokenizer.set_vocab(vocab)  # as JoeyNMT's load_data does
    folder = _model_folder(plain, tmp_path, f"moses-{level}", vocab, data)
    if level == "bpe":
        shutil.copy(tmp_path / "codes.txt", folder / "codes.txt")
    output = tmp_path / "moses.safetensors"  # what a user runs: the converted file, saved and opened again
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    checkpoint = load_checkpoint(output)
    translator = Translator(checkpoint, device="cpu")
    for sentence in MOSES_CORPUS + MOSES_TYPED:
        expected = vocab.sentences_to_ids([tokenizer(tokenizer.pre_process(sentence))], bos=False, eos=True)[0][0]
        ours = translator.source(sentence).ids
        if vocab.unk_index in expected:  # where JoeyNMT's vocabulary lacks a typed character (’ without
            # normalize), attnviz first tries a variant it has (models/text/normalize.py): never more unknowns
            assert ours.count(vocab.unk_index) <= expected.count(vocab.unk_index), sentence
            continue
        assert ours == expected, sentence
        ids = [index for index in expected if index != vocab.eos_index]
        if vocab.unk_index not in ids:  # (an unknown word reads as <unk> there, as ⟨unk⟩ here)
            written = tokenizer.post_process(vocab.arrays_to_sentences(np.array([ids]))[0])
            assert checkpoint.source_tokenizer.decode(ids) == written, sentence  # English's Moses rules
    assert "Moses' tokenizer (en, lower-cased)" in checkpoint.provenance["imported_from"]["tokenization"]


@pytest.mark.parametrize("level", ["word", "char"])
@pytest.mark.parametrize("lowercase, normalize", [(True, False), (False, True), (True, True)])
def test_lowercase_and_normalize_prepare_typed_text_as_joeynmt(plain, tmp_path, level, lowercase, normalize):
    """``lowercase: true`` and ``normalize: true`` without Moses: typed text is lowered, and normalised as
    JoeyNMT's pre_process does (curly quotes straightened, ``red ?`` is ``red?``), before it is split (before,
    "The Cat" read as two unknown words of a lower-cased vocabulary)."""
    from joeynmt.tokenizers import build_tokenizer

    data = {side: {"lang": lang, "level": level, "lowercase": lowercase, "normalize": normalize}
            for side, lang in (("src", "en"), ("trg", "fr"))}
    tokenizer = build_tokenizer(data)["en"]
    corpus = ("the small cat runs", 'a red dog sees the "cat"?', "The Small CAT runs", 'A red Dog sees THE cat!')
    pieces = sorted({piece for line in corpus for piece in tokenizer(tokenizer.pre_process(line))})
    vocab = JOEY.Vocabulary(pieces, _special_symbols())
    tokenizer.set_vocab(vocab)
    translator = Translator(convert(_model_folder(plain, tmp_path, f"prepared-{level}", vocab, data)), device="cpu")
    typed = ["The Small CAT runs", "A red Dog sees THE cat"] if lowercase else []
    typed += ["a red dog sees the \u201ccat\u201d  ?", "A red Dog sees THE cat\u200b !"] if normalize else []
    for sentence in typed:
        expected = vocab.sentences_to_ids([tokenizer(tokenizer.pre_process(sentence))], bos=False, eos=True)[0][0]
        assert vocab.unk_index not in expected
        assert translator.source(sentence).ids == expected, sentence
    tokenization = translator.checkpoint.provenance["imported_from"]["tokenization"]
    assert ("lower-cased" in tokenization) == lowercase and ("normalised" in tokenization) == normalize


def test_moses_before_sentencepiece_is_refused_in_one_line(plain, tmp_path):
    vocab = JOEY.Vocabulary(["the", "cat"], _special_symbols())
    data = {side: {"lang": lang, "level": "bpe", "tokenizer_type": "sentencepiece",
                   "tokenizer_cfg": {"pretokenizer": "moses", "model_file": "spm.model"}}
            for side, lang in (("src", "en"), ("trg", "fr"))}
    folder = _model_folder(plain, tmp_path, "moses-spm", vocab, data)
    with pytest.raises(CheckpointError, match="pretokenizer 'moses' before sentencepiece is not supported; before "
                                              "words and subword-nmt it is"):
        convert(folder)


@pytest.mark.parametrize("where, key, value, named", [
    ("encoder", "activation", "tanh", r"activation 'tanh'"),
    ("decoder", "type", "recurrent", r"a transformer encoder with a recurrent decoder"),
    ("model", "unidirectional", None,
     r"a unidirectional recurrent encoder \(JoeyNMT 2.3's own encoder cannot run one\)"),
])
def test_an_unsupported_option_is_refused_in_one_line(plain, tmp_path, *, where, key, value, named):
    def change(config):
        if key == "unidirectional":  # its recurrent defaults, one direction
            config["model"] = _recurrent("gru", "bahdanau", layers=1, embedding=8, input_feeding=True,
                                         init_hidden="bridge")
            config["model"]["encoder"]["bidirectional"] = False
            return
        config["model"][where][key] = value
        if key == "activation":
            config["model"]["decoder"][key] = value
    variant = _copy(plain, tmp_path, change_config=change)
    with pytest.raises(CheckpointError, match=named + r" is not supported; this version imports Transformer "):
        convert(variant)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_a_layer_norm_joeynmt_cannot_build_is_refused_naming_it(plain, tmp_path, side):
    variant = _copy(plain, tmp_path, change_config=lambda config: config["model"][side].update(layer_norm="both"))
    with pytest.raises(CheckpointError, match=rf"model.{side}.layer_norm must be pre or post; got 'both'$"):
        convert(variant)


def test_a_hostile_pickle_in_the_same_layout_is_refused(plain, tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("pwned",))

    variant = _copy(plain, tmp_path)
    torch.save({"model_state": {}, "optimizer_state": Payload()}, variant / "best.ckpt")
    assert detect_format(variant) == "joeynmt"
    with pytest.raises(CheckpointError) as error:
        convert(variant)
    assert "\n" not in str(error.value) and "best.ckpt" in str(error.value)


def test_a_missing_config_or_sentencepiece_model_says_what_to_give(plain, tmp_path):
    variant = _copy(plain, tmp_path)
    (variant / "config.yaml").unlink()
    with pytest.raises(CheckpointError, match=r"no config.yaml beside it"):
        convert(variant / "best.ckpt")
    variant = _copy(plain, tmp_path / "spm", change_config=lambda c: c["data"]["src"].update(
        level="bpe", tokenizer_type="sentencepiece", tokenizer_cfg={"model_file": "/nowhere/spm.model"}))
    with pytest.raises(CheckpointError, match=r"data.src.tokenizer_cfg.model_file '/nowhere/spm.model' is not found; "
                                              r"copy the sentencepiece model into the model folder$"):
        convert(variant)


def test_a_sentencepiece_model_tokenises_as_joeynmt(plain, tmp_path):
    """``level: bpe`` with sentencepiece: source ids equal JoeyNMT's own tokenizer and vocabulary lookup."""
    spm = pytest.importorskip("sentencepiece")
    from joeynmt.tokenizers import build_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["the cat sees a red house", "the dog runs", "a big dog sees the small cat",
                                 "le chat voit la maison rouge", "le chien court"] * 4) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=28,
                                   model_type="unigram", character_coverage=1.0, unk_id=0, bos_id=-1, eos_id=-1,
                                   pad_id=-1, minloglevel=2)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    pieces = [processor.id_to_piece(index) for index in range(processor.get_piece_size())][1:]  # no spm <unk>
    vocab = JOEY.Vocabulary(pieces, _special_symbols())
    folder = tmp_path / "spm-model"
    folder.mkdir()
    (folder / "spm.model").write_bytes((tmp_path / "spm.model").read_bytes())
    model_cfg = yaml.safe_load((plain / "config.yaml").read_text(encoding="utf-8"))["model"]
    torch.manual_seed(7)
    model = JOEY.build_model(model_cfg, src_vocab=vocab, trg_vocab=vocab)
    vocab.to_file(folder / "src_vocab.txt")
    vocab.to_file(folder / "trg_vocab.txt")
    data = {side: {"lang": lang, "level": "bpe", "tokenizer_type": "sentencepiece",
                   "tokenizer_cfg": {"model_file": "/trained/elsewhere/spm.model"}}  # found by its name beside
            for side, lang in (("src", "en"), ("trg", "fr"))}
    (folder / "config.yaml").write_text(yaml.safe_dump({"data": data, "model": model_cfg}), encoding="utf-8")
    torch.save({"model_state": model.state_dict()}, folder / "5.ckpt")
    translator = Translator(convert(folder), device="cpu")
    joey_data = {side: dict(data[side], tokenizer_cfg={"model_file": str(folder / "spm.model")}) for side in data}
    tokenizer = build_tokenizer(joey_data)["en"]
    for sentence in ("the small cat runs", "a red dog sees le chat"):
        expected = vocab.sentences_to_ids([tokenizer(sentence)], bos=False, eos=True)[0][0]
        assert translator.source(sentence).ids == expected, sentence


def test_dropping_the_folder_on_the_window_opens_it_without_a_question(qtbot, window, plain):
    """File → Open Folder and drag-and-drop go through the same import: a JoeyNMT folder says everything."""
    from tests.test_gui_import import drop, opened

    drop(window, plain)
    qtbot.waitUntil(lambda: opened(window, plain.name), timeout=20_000)
    assert window.opening.import_dialog is None or not window.opening.import_dialog.isVisible()
    window.views.input_bar.text.setText("the cat sees a dog")
    window.views.input_bar.max_len.setValue(5)
    window.run()
    qtbot.waitUntil(lambda: window.session.trace is not None and window.session.trace.heads("cross") == 2,
                    timeout=20_000)
    assert window.session.trace.src_tokens == ["the", "cat", "sees", "a", "dog", "</s>"]


def test_the_converted_model_saves_and_loads_unchanged(built, tmp_path):
    from models.storage.checkpoint import load_checkpoint, save_checkpoint

    checkpoint = convert(built.folder)
    path = tmp_path / "joey.safetensors"
    save_checkpoint(path, checkpoint.model, checkpoint.source_tokenizer, checkpoint.target_tokenizer,
                    checkpoint.provenance)
    loaded = load_checkpoint(path)
    assert loaded.config == checkpoint.config
    assert loaded.provenance["imported_from"]["details"]["steps"] == 3
    src, tgt = _batch(built, [["the", "cat", "sees", "a", "red", "house"]], [["le", "chat"]])
    with torch.no_grad():
        assert torch.equal(loaded.model(src, tgt)[0], checkpoint.model(src, tgt)[0])


def test_missing_vocabulary_files_are_asked_for(plain, tmp_path):
    from models.importers import MissingSettingsError

    def drop_voc_files(config):
        for side in ("src", "trg"):
            config["data"][side].pop("voc_file")

    variant = _copy(plain, tmp_path, change_config=drop_voc_files)
    for name in ("src_vocab.txt", "trg_vocab.txt"):
        (variant / name).rename(tmp_path / name)
    with pytest.raises(MissingSettingsError, match=r"--src-vocab FILE \(src_vocab.txt of the model folder"):
        convert(variant)
    checkpoint = convert(variant, src_vocab=tmp_path / "src_vocab.txt", tgt_vocab=tmp_path / "trg_vocab.txt")
    assert checkpoint.source_tokenizer.vocabulary == (tmp_path / "src_vocab.txt").read_text().splitlines()


def _model_folder(plain, tmp_path, name, vocab, data):
    """A model folder like ``plain``'s whose vocabularies and data section are ``vocab`` and ``data``."""
    folder = tmp_path / name
    folder.mkdir()
    model_cfg = yaml.safe_load((plain / "config.yaml").read_text(encoding="utf-8"))["model"]
    torch.manual_seed(7)
    model = JOEY.build_model(model_cfg, src_vocab=vocab, trg_vocab=vocab)
    vocab.to_file(folder / "src_vocab.txt")
    vocab.to_file(folder / "trg_vocab.txt")
    (folder / "config.yaml").write_text(yaml.safe_dump({"data": data, "model": model_cfg}), encoding="utf-8")
    torch.save({"model_state": model.state_dict()}, folder / "5.ckpt")
    return folder


def test_the_char_level_tokenises_as_joeynmt(plain, tmp_path):
    """``level: char``: one token per character, spaces as ``▁``, as JoeyNMT's BasicTokenizer splits."""
    from joeynmt.tokenizers import build_tokenizer

    sentences = ("the small cat runs", "a red dog sees le chat")
    characters = sorted({c for sentence in sentences for c in sentence.replace(" ", "▁")} - {"x"})
    vocab = JOEY.Vocabulary(characters, _special_symbols())
    data = {side: {"lang": lang, "level": "char"} for side, lang in (("src", "en"), ("trg", "fr"))}
    folder = _model_folder(plain, tmp_path, "char-model", vocab, data)
    checkpoint = convert(folder)
    translator = Translator(checkpoint, device="cpu")
    tokenizer = build_tokenizer(data)["en"]
    for sentence in (*sentences, "a taxi"):  # "x" is not in the vocabulary: JoeyNMT's <unk>
        expected = vocab.sentences_to_ids([tokenizer(sentence)], bos=False, eos=True)[0][0]
        assert translator.source(sentence).ids == expected, sentence
    ids = checkpoint.target_tokenizer.encode("le chat")
    assert checkpoint.target_tokenizer.decode(ids) == "le chat"
    assert "char level" in checkpoint.provenance["imported_from"]["tokenization"]


def test_subword_nmt_codes_beside_the_config_split_text_as_joeynmt(plain, tmp_path):
    """``level: bpe`` with ``tokenizer_type: subword-nmt``: the codes the config names (found beside it) split
    typed text as JoeyNMT's own SubwordNMTTokenizer does."""
    import io

    learn_bpe = pytest.importorskip("subword_nmt.learn_bpe")
    from joeynmt.tokenizers import build_tokenizer

    corpus = "\n".join(["the cat sees a red house", "the dog runs", "a big dog sees the small cat",
                        "le chat voit la maison rouge", "le chien court"] * 4) + "\n"
    codes = io.StringIO()
    learn_bpe.learn_bpe(io.StringIO(corpus), codes, num_symbols=25)
    (tmp_path / "codes.txt").write_text(codes.getvalue(), encoding="utf-8")
    data = {side: {"lang": lang, "level": "bpe", "tokenizer_type": "subword-nmt",
                   "tokenizer_cfg": {"codes": str(tmp_path / "codes.txt"), "num_merges": 25}}
            for side, lang in (("src", "en"), ("trg", "fr"))}
    tokenizer = build_tokenizer(data)["en"]
    pieces = sorted({piece for line in corpus.splitlines() for piece in tokenizer(line)})
    assert any(piece.endswith("@@") for piece in pieces)
    vocab = JOEY.Vocabulary(pieces, _special_symbols())
    tokenizer.set_vocab(vocab)  # as JoeyNMT's load_data does: subword-nmt then splits pieces the vocabulary lacks
    saved = {side: dict(section, tokenizer_cfg={"codes": "/trained/elsewhere/codes.txt"})  # found by its name
             for side, section in data.items()}
    folder = _model_folder(plain, tmp_path, "bpe-model", vocab, saved)
    (folder / "codes.txt").write_bytes((tmp_path / "codes.txt").read_bytes())
    translator = Translator(convert(folder), device="cpu")
    merged_only = build_tokenizer(data)["en"]  # the same codes without the vocabulary
    split_back = 0
    for sentence in ("the small cat runs", "a red dog sees le chat", "le chien voit la maison",
                     "these cheap theses", "a hot chess set", "the houses see a cathedral"):  # unseen words
        expected = vocab.sentences_to_ids([tokenizer(sentence)], bos=False, eos=True)[0][0]
        assert translator.source(sentence).ids == expected, sentence
        split_back += len(tokenizer(sentence)) - len(merged_only(sentence))
    assert split_back > 0  # pieces the vocabulary lacks were split back (they read as <unk> before)
