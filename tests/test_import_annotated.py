"""Import of harvardnlp/annotated-transformer models, written here from the reference's description
(docs/checkpoint-formats.md#annotated): pre-LN sublayer connections, its own LayerNorm (unbiased std,
eps added to the std), ``linears.0-3`` attention, embeddings ×√d, a ``pe`` buffer, a log-softmax generator."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.inference.decoding import Capture, finish, greedy
from models.errors import CheckpointError
from models.importers import MissingSettingsError, convert, detect_format

D, HEADS, FF, LAYERS = 16, 4, 32, 2
BOS, EOS, PAD = 0, 1, 2
WORDS = ["ein", "mann", "a", "man", "läuft", "runs", "."]


class LayerNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.a_2, self.b_2, self.eps = nn.Parameter(torch.ones(size)), nn.Parameter(torch.zeros(size)), eps

    def forward(self, x):
        return self.a_2 * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(D)

    def forward(self, x, sublayer):
        return x + sublayer(self.norm(x))


class MultiHeadedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.linears = nn.ModuleList(copy.deepcopy(nn.Linear(D, D)) for _ in range(4))

    def forward(self, query, key, value, mask):
        batch, d_k = query.size(0), D // HEADS
        q, k, v = [lin(x).view(batch, -1, HEADS, d_k).transpose(1, 2)
                   for lin, x in zip(self.linears, (query, key, value))]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
        weights = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9).softmax(dim=-1)
        x = torch.matmul(weights, v).transpose(1, 2).contiguous().view(batch, -1, D)
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(D, FF), nn.Linear(FF, D)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())


class Layer(nn.Module):
    def __init__(self, cross):
        super().__init__()
        self.self_attn, self.feed_forward = MultiHeadedAttention(), PositionwiseFeedForward()
        if cross:
            self.src_attn = MultiHeadedAttention()
        self.sublayer = nn.ModuleList(SublayerConnection() for _ in range(3 if cross else 2))


class Stack(nn.Module):
    def __init__(self, cross):
        super().__init__()
        self.layers, self.norm = nn.ModuleList(Layer(cross) for _ in range(LAYERS)), LayerNorm(D)


class Embeddings(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, D)

    def forward(self, x):
        return self.lut(x) * math.sqrt(D)


class PositionalEncoding(nn.Module):
    def __init__(self, max_len=100):
        super().__init__()
        pe = torch.zeros(max_len, D)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2) * -(math.log(10000.0) / D))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)].requires_grad_(False)


class Generator(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.proj = nn.Linear(D, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


class EncoderDecoder(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.encoder, self.decoder = Stack(cross=False), Stack(cross=True)
        self.src_embed = nn.Sequential(Embeddings(vocab), PositionalEncoding())
        self.tgt_embed = nn.Sequential(Embeddings(vocab), PositionalEncoding())
        self.generator = Generator(vocab)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        for layer in self.encoder.layers:
            x = layer.sublayer[0](x, lambda x, layer=layer: layer.self_attn(x, x, x, src_mask))
            x = layer.sublayer[1](x, layer.feed_forward)
        return self.encoder.norm(x)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        for layer in self.decoder.layers:
            x = layer.sublayer[0](x, lambda x, layer=layer: layer.self_attn(x, x, x, tgt_mask))
            x = layer.sublayer[1](x, lambda x, layer=layer: layer.src_attn(x, memory, memory, src_mask))
            x = layer.sublayer[2](x, layer.feed_forward)
        return self.decoder.norm(x)


def masks(src, tgt):
    subsequent = torch.triu(torch.ones(1, tgt.size(1), tgt.size(1)), diagonal=1) == 0
    return (src != PAD).unsqueeze(-2), (tgt != PAD).unsqueeze(-2) & subsequent


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    return build_annotated(tmp_path_factory.mktemp("annotated"))


def build_annotated(folder):
    """The notebook's model with seeded weights far from the init, saved with its vocabulary in ``folder``."""
    torch.manual_seed(4)
    model = EncoderDecoder(4 + len(WORDS)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
        model.generator.proj.bias[PAD] = -20.0  # the notebook decodes padding freely; ours never does
    torch.save(model.state_dict(), folder / "multi30k_model_final.pt")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["<s>", "</s>", "<blank>", "<unk>", *WORDS]) + "\n", encoding="utf-8")
    return model, folder / "multi30k_model_final.pt", vocab


def test_logits_equal_the_original(annotated):
    model, path, vocab = annotated
    assert detect_format(path) == "annotated"
    with pytest.raises(MissingSettingsError, match=r"--set h=N \(one of 1, 2, 4, 8, 16\)"):
        convert(path, src_vocab=vocab, tgt_vocab=vocab)
    checkpoint = convert(path, settings={"h": HEADS}, src_vocab=vocab, tgt_vocab=vocab)
    assert checkpoint.config.norm_kind == "unbiased_std" and checkpoint.config.pre_norm_kv
    generator = torch.Generator().manual_seed(6)
    src = torch.randint(4, 4 + len(WORDS), (3, 8), generator=generator)
    src[:, 0], src[0, -1], src[1, 5], src[1, 6:] = BOS, EOS, EOS, PAD
    tgt = torch.randint(4, 4 + len(WORDS), (3, 6), generator=generator)
    tgt[:, 0] = BOS
    src_mask, tgt_mask = masks(src, tgt)
    with torch.no_grad():
        hidden = model.decode(model.encode(src, src_mask), src_mask, tgt, tgt_mask)
        logits, _ = checkpoint.model(src, tgt)
    assert (logits - model.generator.proj(hidden)).abs().max() < 1e-4
    assert (logits.log_softmax(-1) - model.generator(hidden)).abs().max() < 1e-4


def test_greedy_output_is_the_originals(annotated):
    model, path, vocab = annotated
    ours = convert(path, settings={"h": HEADS}, src_vocab=vocab, tgt_vocab=vocab).model
    src = torch.tensor([[BOS, 4, 5, 8, 10, EOS]])
    src_mask = (src != PAD).unsqueeze(-2)
    ys = torch.tensor([[BOS]])
    with torch.no_grad():  # the notebook's greedy_decode, stopping at </s> like ours
        memory = model.encode(src, src_mask)
        for _ in range(8):
            out = model.decode(memory, src_mask, ys, masks(src, ys)[1][:1])
            next_word = int(model.generator(out[:, -1]).argmax(dim=1))
            ys = torch.cat([ys, torch.tensor([[next_word]])], dim=1)
            if next_word == EOS:
                break
    assert finish(greedy(ours, src[0].tolist(), Capture(max_len=8)))[0].token_ids == ys[0, 1:].tolist()


def test_an_extra_weight_is_refused_by_name(annotated, tmp_path):
    model, _, vocab = annotated
    path = tmp_path / "extra.pt"
    torch.save({**model.state_dict(), "decoder.extra.weight": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the annotated layout: "
                                              r"decoder.extra.weight$"):
        convert(path, settings={"h": HEADS}, src_vocab=vocab, tgt_vocab=vocab)
