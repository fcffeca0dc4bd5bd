"""Import of jadore801120/attention-is-all-you-need-pytorch checkpoints, v2 (pre-LN) and v3 (post-LN).

The model is written here from the reference's description (docs/checkpoint-formats.md#jadore):
w_qs/w_ks/w_vs/fc without biases, LayerNorm eps 1e-6 inside each sublayer, the stack ``layer_norm``
after the last layer (v2) or on embedding + positions (v3), the interleaved ``pos_table`` buffer,
``masked_fill(mask == 0, -1e9)``, tied embeddings and projection with their logit/embedding scaling.
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.errors import CheckpointError
from models.importers import MissingSettingsError, convert, detect_format

D_MODEL, D_INNER, LAYERS, N_POSITION = 16, 24, 2, 40
UNK, PAD, BOS, EOS = 0, 1, 2, 3
WORDS = ["a", "man", "dog", "runs", "ein", "mann", "hund", "läuft", "."]


def pos_table(n_position: int, d_hid: int) -> torch.Tensor:
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / d_hid) for j in range(d_hid)]
                       for pos in range(n_position)])
    angles[:, 0::2], angles[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return torch.FloatTensor(angles).unsqueeze(0)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_k, d_v, post):
        super().__init__()
        self.n_head, self.d_k, self.d_v, self.post = n_head, d_k, d_v, post
        self.w_qs = nn.Linear(D_MODEL, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(D_MODEL, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(D_MODEL, n_head * d_v, bias=False)
        self.fc = nn.Linear(n_head * d_v, D_MODEL, bias=False)
        self.layer_norm = nn.LayerNorm(D_MODEL, eps=1e-6)

    def forward(self, q, k, v, mask):
        batch, q_len, k_len = q.shape[0], q.shape[1], k.shape[1]
        residual = q
        if not self.post:
            q = self.layer_norm(q)
        q = self.w_qs(q).view(batch, q_len, self.n_head, self.d_k).transpose(1, 2)
        k = self.w_ks(k).view(batch, k_len, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_vs(v).view(batch, k_len, self.n_head, self.d_v).transpose(1, 2)
        attn = torch.matmul(q / self.d_k ** 0.5, k.transpose(2, 3)).masked_fill(mask.unsqueeze(1) == 0, -1e9)
        attn = F.softmax(attn, dim=-1)
        out = self.fc(torch.matmul(attn, v).transpose(1, 2).contiguous().view(batch, q_len, -1)) + residual
        return (self.layer_norm(out) if self.post else out), attn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, post):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(D_MODEL, D_INNER), nn.Linear(D_INNER, D_MODEL)
        self.layer_norm, self.post = nn.LayerNorm(D_MODEL, eps=1e-6), post

    def forward(self, x):
        residual = x
        if not self.post:
            x = self.layer_norm(x)
        x = self.w_2(F.relu(self.w_1(x))) + residual
        return self.layer_norm(x) if self.post else x


class Layer(nn.Module):
    def __init__(self, options, post, cross):
        super().__init__()
        self.slf_attn = MultiHeadAttention(options.n_head, options.d_k, options.d_v, post)
        if cross:
            self.enc_attn = MultiHeadAttention(options.n_head, options.d_k, options.d_v, post)
        self.pos_ffn = PositionwiseFeedForward(post)


class Stack(nn.Module):
    def __init__(self, options, post, side):
        super().__init__()
        self.side, self.post = side, post
        self.add_module("src_word_emb" if side == "encoder" else "trg_word_emb", nn.Embedding(len(WORDS) + 4, D_MODEL))
        self.position_enc = nn.Module()
        self.position_enc.register_buffer("pos_table", pos_table(N_POSITION, D_MODEL))
        self.layer_stack = nn.ModuleList(Layer(options, post, side == "decoder") for _ in range(LAYERS))
        self.layer_norm = nn.LayerNorm(D_MODEL, eps=1e-6)
        self.scale_emb = post and options.proj_share_weight and getattr(options, "scale_emb_or_prj", "") == "emb"

    def embed(self, ids):
        x = (self.src_word_emb if self.side == "encoder" else self.trg_word_emb)(ids)
        x = x * D_MODEL ** 0.5 if self.scale_emb else x
        x = x + self.position_enc.pos_table[:, : ids.shape[1]]
        return self.layer_norm(x) if self.post else x


class Transformer(nn.Module):
    def __init__(self, options, post):
        super().__init__()
        self.encoder, self.decoder = Stack(options, post, "encoder"), Stack(options, post, "decoder")
        self.trg_word_prj = nn.Linear(D_MODEL, len(WORDS) + 4, bias=False)
        if options.proj_share_weight:
            self.trg_word_prj.weight = self.decoder.trg_word_emb.weight
        if options.embs_share_weight:
            self.encoder.src_word_emb.weight = self.decoder.trg_word_emb.weight
        scale_prj = options.proj_share_weight and (not post or getattr(options, "scale_emb_or_prj", "prj") == "prj")
        self.logit_scale = D_MODEL ** -0.5 if scale_prj else 1.0
        self.post = post

    def forward(self, src, trg):
        src_mask = (src != PAD).unsqueeze(-2)
        subsequent = (1 - torch.triu(torch.ones(1, trg.shape[1], trg.shape[1]), diagonal=1)).bool()
        trg_mask = (trg != PAD).unsqueeze(-2) & subsequent
        x = self.encoder.embed(src)
        for layer in self.encoder.layer_stack:
            x = layer.pos_ffn(layer.slf_attn(x, x, x, src_mask)[0])
        memory = x if self.post else self.encoder.layer_norm(x)
        y = self.decoder.embed(trg)
        for layer in self.decoder.layer_stack:
            y = layer.slf_attn(y, y, y, trg_mask)[0]
            y = layer.pos_ffn(layer.enc_attn(y, memory, memory, src_mask)[0])
        y = y if self.post else self.decoder.layer_norm(y)
        return self.trg_word_prj(y) * self.logit_scale


CASES = {
    # name: (post-LN?, settings the checkpoint's train.py saved, --set given at conversion)
    "v2-shared": (False, dict(n_head=4, d_k=4, d_v=4, proj_share_weight=True, embs_share_weight=True), {"norm": "pre"}),
    "v2-dk-above-dv": (False, dict(n_head=2, d_k=6, d_v=5, proj_share_weight=False, embs_share_weight=False),
                       {"norm": "pre"}),
    "v3-prj": (True, dict(n_head=4, d_k=4, d_v=4, proj_share_weight=True, embs_share_weight=True,
                          scale_emb_or_prj="prj"), {}),
    "v3-emb-dv-above-dk": (True, dict(n_head=2, d_k=3, d_v=7, proj_share_weight=True, embs_share_weight=False,
                                      scale_emb_or_prj="emb", output_dir="out"), {}),
}


@pytest.fixture(scope="module", params=list(CASES))
def jadore(request, tmp_path_factory):
    return build_jadore(request.param, tmp_path_factory.mktemp("jadore"))


def build_jadore(case: str, folder):
    """A ``CASES`` model with seeded weights far from the init, saved with its vocabulary in ``folder``."""
    post, options, given = CASES[case]
    options = argparse.Namespace(d_model=D_MODEL, d_inner_hid=D_INNER, n_layers=LAYERS, src_pad_idx=PAD,
                                 trg_pad_idx=PAD, dropout=0.1, **options)
    torch.manual_seed(7)
    model = Transformer(options, post).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    torch.save({"epoch": 9, "settings": options, "model": model.state_dict()}, folder / "model.chkpt")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["<unk>", "<blank>", "<s>", "</s>", *WORDS]) + "\n", encoding="utf-8")
    return model, folder / "model.chkpt", vocab, given, post


def test_logits_equal_the_original(jadore):
    model, path, vocab, given, post = jadore
    assert detect_format(path) == "jadore"
    checkpoint = convert(path, settings=given, src_vocab=vocab, tgt_vocab=vocab)
    assert checkpoint.config.norm_position == ("post" if post else "pre")
    assert checkpoint.provenance["imported_from"]["details"]["version"].startswith("v3" if post else "v2")
    generator = torch.Generator().manual_seed(2)
    src = torch.randint(4, 4 + len(WORDS), (3, 8), generator=generator)
    src[:, 0], src[0, -1], src[1, 5], src[1, 6:] = BOS, EOS, EOS, PAD
    trg = torch.randint(4, 4 + len(WORDS), (3, 6), generator=generator)
    trg[:, 0] = BOS
    with torch.no_grad():
        expected = model(src, trg)
        logits, _ = checkpoint.model(src, trg)
    assert (logits - expected).abs().max() < 1e-4


def test_an_ambiguous_version_must_be_named(jadore):
    model, path, vocab, given, post = jadore
    if given:  # the v2 files: their settings cannot tell v2 from v3
        with pytest.raises(MissingSettingsError, match=r"--set norm=pre\|post .*n_head=\d"):
            convert(path, src_vocab=vocab, tgt_vocab=vocab)
    else:  # v3 files say so themselves
        assert convert(path, src_vocab=vocab, tgt_vocab=vocab).config.norm_position == "post"


def test_missing_and_extra_weights_are_named(jadore, tmp_path):
    model, path, vocab, given, post = jadore
    checkpoint = torch.load(path, weights_only=False)
    del checkpoint["model"]["decoder.layer_stack.1.pos_ffn.w_2.bias"]
    checkpoint["model"]["decoder.extra.weight"] = torch.zeros(2)
    broken = tmp_path / "broken.chkpt"
    torch.save(checkpoint, broken)
    with pytest.raises(CheckpointError, match=r"missing weights for the jadore layout: "
                                              r"decoder.layer_stack.1.pos_ffn.w_2.bias$"):
        convert(broken, settings=given, src_vocab=vocab, tgt_vocab=vocab)
    checkpoint["model"]["decoder.layer_stack.1.pos_ffn.w_2.bias"] = torch.zeros(D_MODEL)
    torch.save(checkpoint, broken)
    with pytest.raises(CheckpointError,
                       match=r"unexpected weights, not part of the jadore layout: decoder.extra.weight$"):
        convert(broken, settings=given, src_vocab=vocab, tgt_vocab=vocab)


class Vocab:
    """Stands for torchtext's legacy Vocab inside jadore's ``-data_pkl`` file."""

    def __init__(self, itos):
        self.itos, self.stoi = list(itos), {token: index for index, token in enumerate(itos)}


class Field:
    def __init__(self, itos):
        self.vocab, self.lower = Vocab(itos), True


def test_the_data_pkl_gives_the_vocabularies_when_trusted(jadore, tmp_path):
    model, path, vocab, given, post = jadore
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    data = tmp_path / "m30k_deen_shr.pkl"
    with open(data, "wb") as handle:
        pickle.dump({"settings": argparse.Namespace(max_len=100),
                     "vocab": {"src": Field(tokens), "trg": Field(tokens)}}, handle)
    with pytest.raises(CheckpointError,
                       match=r"needs arbitrary unpickling \(it contains tests\.test_import_jadore\.Field"):
        convert(path, settings=given, src_vocab=data, tgt_vocab=data)
    checkpoint = convert(path, settings=given, src_vocab=data, tgt_vocab=data, trust=True)
    assert checkpoint.source_tokenizer.vocabulary == checkpoint.target_tokenizer.vocabulary == tokens
    assert checkpoint.source_tokenizer.tokens(checkpoint.source_tokenizer.encode("A man runs .")) == \
        ["<s>", "a", "man", "runs", "."]
