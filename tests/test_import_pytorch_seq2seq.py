"""Import of the PyTorch seq2seq tutorial's EncoderRNN + AttnDecoderRNN (Bahdanau attention).

The two modules are written here from the tutorial's description (docs/checkpoint-formats.md#pytorch-seq2seq), with
random weights, and saved in the layouts users save them in.
"""

from __future__ import annotations

import json
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.errors import CheckpointError
from models.importers import convert, detect_format, inspect
from models.inference.translator import Translator

HIDDEN, SOS, EOS = 12, 0, 1
SRC_WORDS = ["je", "suis", "content", "il", "est", "grand", "!"]
TGT_WORDS = ["i", "am", "happy", "he", "is", "tall", "!", "?"]


class EncoderRNN(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids):
        return self.gru(self.dropout(self.embedding(ids)))  # outputs [B, S, H], hidden [1, B, H]


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys))).squeeze(2).unsqueeze(1)  # [B, 1, S]
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights, keys), weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size: int, output_size: int):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(0.1)

    def forward_step(self, ids, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(ids))  # [B, 1, H]
        context, weights = self.attention(hidden.permute(1, 0, 2), encoder_outputs)
        output, hidden = self.gru(torch.cat((embedded, context), dim=2), hidden)
        return self.out(output), hidden, weights

    def teacher_forced(self, encoder_outputs, encoder_hidden, target):
        """Raw logits ``[B, T, V]`` and attention ``[B, T, S]`` with the target fed after SOS."""
        ids = torch.full((target.shape[0], 1), SOS, dtype=torch.long)
        hidden, logits, attentions = encoder_hidden, [], []
        for step in range(target.shape[1]):
            output, hidden, weights = self.forward_step(ids, hidden, encoder_outputs)
            logits.append(output)
            attentions.append(weights)
            ids = target[:, step].unsqueeze(1)
        return torch.cat(logits, dim=1), torch.cat(attentions, dim=1)


def write_vocab(path, words):
    path.write_text("\n".join(["SOS", "EOS", *words]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    torch.manual_seed(3)
    encoder = EncoderRNN(2 + len(SRC_WORDS), HIDDEN).eval()
    decoder = AttnDecoderRNN(HIDDEN, 2 + len(TGT_WORDS)).eval()
    with torch.no_grad():
        for parameter in [*encoder.parameters(), *decoder.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.3)
    folder = tmp_path_factory.mktemp("seq2seq")
    return (encoder, decoder, folder, write_vocab(folder / "fra.txt", SRC_WORDS),
            write_vocab(folder / "eng.txt", TGT_WORDS))


@pytest.fixture(params=["two-files", "one-dict", "flat", "whole-modules"])
def saved(request, tutorial):
    """The layouts the importer reads; "whole-modules" also carries the Lang objects and needs trust."""
    encoder, decoder, folder, src_vocab, tgt_vocab = tutorial
    place = folder / request.param
    place.mkdir(exist_ok=True)
    trust = False
    if request.param == "two-files":
        torch.save(encoder.state_dict(), place / "encoder.pt")
        torch.save(decoder.state_dict(), place / "decoder.pt")
        path = place
    elif request.param == "one-dict":
        path = place / "checkpoint.pt"
        torch.save({"epoch": 3, "encoder_state_dict": encoder.state_dict(),
                    "decoder_state_dict": decoder.state_dict()}, path)
    elif request.param == "flat":
        path = place / "seq2seq.pt"
        torch.save(nn.ModuleDict({"encoder": encoder, "decoder": decoder}).state_dict(), path)
    else:
        path, trust = place / "whole.pt", True
        torch.save({"encoder": encoder, "decoder": decoder, "input_lang": Lang(SRC_WORDS),
                    "output_lang": Lang(TGT_WORDS)}, path)
        src_vocab = tgt_vocab = None
    return path, src_vocab, tgt_vocab, trust


class Lang:
    def __init__(self, words):
        self.index2word = {0: "SOS", 1: "EOS", **{index + 2: word for index, word in enumerate(words)}}
        self.word2index = {word: index for index, word in self.index2word.items()}


def test_every_layout_converts_to_the_same_exact_math(tutorial, saved):
    encoder, decoder, *_ = tutorial
    path, src_vocab, tgt_vocab, trust = saved
    assert detect_format(path, trust=trust) == "pytorch-seq2seq"
    checkpoint = convert(path, src_vocab=src_vocab, tgt_vocab=tgt_vocab, trust=trust)
    config = checkpoint.config
    assert (config.arch, config.additive_activation, config.attention_query) == ("gru-additive", "tanh", "hidden")
    generator = torch.Generator().manual_seed(4)
    src = torch.randint(2, 2 + len(SRC_WORDS), (4, 6), generator=generator)
    src[:, -1] = EOS
    target = torch.randint(2, 2 + len(TGT_WORDS), (4, 5), generator=generator)
    target[:, -1] = EOS
    with torch.no_grad():
        outputs, hidden = encoder(src)
        expected, expected_attention = decoder.teacher_forced(outputs, hidden, target)
        tgt_in = torch.cat([torch.full((4, 1), SOS), target[:, :-1]], dim=1)
        logits, intermediates = checkpoint.model(src, tgt_in, need_weights=True)
    assert (logits - expected).abs().max() < 1e-4
    assert (intermediates.attention["cross"][0][:, 0] - expected_attention).abs().max() < 1e-5


def test_text_goes_through_the_tutorials_normalisation(tutorial, saved):
    path, src_vocab, tgt_vocab, trust = saved
    checkpoint = convert(path, src_vocab=src_vocab, tgt_vocab=tgt_vocab, trust=trust)
    tokenizer = checkpoint.source_tokenizer
    assert tokenizer.tokens(tokenizer.encode("Je suis  CONTENT!")) == ["je", "suis", "content", "!"]
    translator = Translator(checkpoint, "cpu")
    result = translator.translate("il est grand !", need_weights=True)
    assert len(result.token_ids) <= 10  # MAX_LENGTH, as the tutorial decodes
    assert result.trace.attention["cross"][0].shape == (1, len(result.token_ids), 5)  # 4 words + EOS


def test_the_file_lacks_vocabularies_and_says_so(tutorial):
    encoder, decoder, folder, *_ = tutorial
    path = folder / "no-vocab.pt"
    torch.save({"encoder": encoder.state_dict(), "decoder": decoder.state_dict()}, path)
    inspection = inspect(path)
    assert inspection.inferred == {"input_size": 9, "hidden_size": HIDDEN, "output_size": 10}
    with pytest.raises(CheckpointError, match=r"--src-vocab FILE .*--tgt-vocab FILE .*hidden_size=12"):
        convert(path)


def test_whole_pickled_modules_need_trust(tutorial, tmp_path):
    encoder, decoder, *_ = tutorial
    path = tmp_path / "whole.pt"
    torch.save({"encoder": encoder, "decoder": decoder}, path)
    with pytest.raises(CheckpointError, match=r"needs arbitrary unpickling \(it contains tests\..*--trust"):
        convert(path)


def test_a_vocabulary_of_the_wrong_size_is_named(tutorial, tmp_path):
    encoder, decoder, folder, src_vocab, _ = tutorial
    path = tmp_path / "checkpoint.pt"
    torch.save({"encoder": encoder.state_dict(), "decoder": decoder.state_dict()}, path)
    short = tmp_path / "short.txt"
    short.write_text("SOS\nEOS\ni\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"the target vocabulary \(.*short.txt\) has 3 tokens; the model's "
                                              r"target embedding has 10 rows"):
        convert(path, src_vocab=src_vocab, tgt_vocab=short)


def test_vocabularies_from_a_pickled_lang_or_json(tutorial, tmp_path):
    encoder, decoder, *_ = tutorial
    path = tmp_path / "checkpoint.pt"
    torch.save({"encoder": encoder.state_dict(), "decoder": decoder.state_dict()}, path)
    lang = tmp_path / "input_lang.pkl"
    lang.write_bytes(pickle.dumps(Lang(SRC_WORDS)))
    words = tmp_path / "output_lang.json"
    words.write_text(json.dumps(Lang(TGT_WORDS).word2index), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"input_lang.pkl: needs arbitrary unpickling \(it contains .*Lang\)"):
        convert(path, src_vocab=lang, tgt_vocab=words)
    checkpoint = convert(path, src_vocab=lang, tgt_vocab=words, trust=True)
    assert checkpoint.source_tokenizer.vocabulary == ["SOS", "EOS", *SRC_WORDS]
    assert checkpoint.target_tokenizer.vocabulary == ["SOS", "EOS", *TGT_WORDS]


@pytest.mark.parametrize("layout", ["two-files", "flat"])
def test_an_extra_weight_is_refused_by_name(tutorial, tmp_path, layout):
    encoder, decoder, _, src_vocab, tgt_vocab = tutorial
    extra = {"extra.weight": torch.zeros(2)}
    if layout == "two-files":
        torch.save(encoder.state_dict(), tmp_path / "encoder.pt")
        torch.save({**decoder.state_dict(), **extra}, tmp_path / "decoder.pt")
        path, named = tmp_path, "decoder.extra.weight"
    else:
        path, named = tmp_path / "seq2seq.pt", "extra.weight"
        torch.save({**nn.ModuleDict({"encoder": encoder, "decoder": decoder}).state_dict(), **extra}, path)
    with pytest.raises(CheckpointError, match=rf"unexpected weights, not part of the pytorch-seq2seq layout: {named}$"):
        convert(path, format="pytorch-seq2seq", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
