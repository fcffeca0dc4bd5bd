"""Import of the PyTorch "Language Translation with nn.Transformer" tutorial model.

``Seq2SeqTransformer`` is written here from the tutorial's description (docs/checkpoint-formats.md#nn-transformer):
token embeddings ×√E, an interleaved sinusoid table ``[maxlen, 1, E]`` added seq-first, ``torch.nn.Transformer``
(seq-first, final norms on both stacks), a ``generator`` linear. Random weights; the original's per-head attention is
read through hooks, as the reference describes.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.inference.decoding import Capture, finish, greedy
from models.errors import CheckpointError
from models.importers import MissingSettingsError, convert, detect_format, inspect

pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor"),  # the tutorial's own settings warn
              pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")]

E, HEADS, FF, LAYERS = 16, 4, 32, 2
UNK, PAD, BOS, EOS = 0, 1, 2, 3
SRC_WORDS = ["ein", "mann", "hund", "läuft", "im", "park", "."]
TGT_WORDS = ["a", "man", "dog", "runs", "in", "the", "park", "."]


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, maxlen: int = 100):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        table = torch.zeros((maxlen, emb_size))
        table[:, 0::2] = torch.sin(pos * den)
        table[:, 1::2] = torch.cos(pos * den)
        self.register_buffer("pos_embedding", table.unsqueeze(-2))
        self.dropout = nn.Dropout(0.1)

    def forward(self, embedded):  # [S, B, E]
        return self.dropout(embedded + self.pos_embedding[: embedded.size(0)])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, norm_first: bool):
        super().__init__()
        self.transformer = nn.Transformer(d_model=E, nhead=HEADS, num_encoder_layers=LAYERS, num_decoder_layers=LAYERS,
                                          dim_feedforward=FF, dropout=0.1, norm_first=norm_first)
        self.generator = nn.Linear(E, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, E)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, E)
        self.positional_encoding = PositionalEncoding(E)

    def forward(self, src, tgt):
        """Seq-first ids ``[S, B]``, ``[T, B]`` → logits ``[T, B, V]``, masks as the tutorial's create_mask."""
        src_padding, tgt_padding = (src == PAD).T, (tgt == PAD).T
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[0])
        src_mask = torch.zeros(src.shape[0], src.shape[0], dtype=torch.bool)
        outs = self.transformer(self.positional_encoding(self.src_tok_emb(src)),
                                self.positional_encoding(self.tgt_tok_emb(tgt)), src_mask, tgt_mask, None,
                                src_padding, tgt_padding, src_padding)
        return self.generator(outs)

    def encode(self, src):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)),
                                        torch.zeros(src.shape[0], src.shape[0], dtype=torch.bool))

    def decode(self, tgt, memory):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[0]).bool()
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def tutorial_greedy(model, src, max_len):
    """The tutorial's greedy_decode: ``src`` ``[S, 1]``, stops at EOS or after max_len - 1 tokens."""
    memory = model.encode(src)
    ys = torch.full((1, 1), BOS, dtype=torch.long)
    for _ in range(max_len - 1):
        out = model.decode(ys, memory).transpose(0, 1)
        next_word = int(model.generator(out[:, -1]).argmax(dim=1))
        ys = torch.cat([ys, torch.full((1, 1), next_word, dtype=torch.long)], dim=0)
        if next_word == EOS:
            break
    return ys[1:, 0].tolist()


def write_vocab(path, words):
    path.write_text("\n".join(["<unk>", "<pad>", "<bos>", "<eos>", *words]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["post-ln", "pre-ln"])
def tutorial(request, tmp_path_factory):
    return build_tutorial(request.param, tmp_path_factory.mktemp("nn_transformer"))


def build_tutorial(norm_first: bool, folder):
    """The tutorial's model with seeded weights, saved with its vocabularies in ``folder``."""
    torch.manual_seed(1 + norm_first)
    original = Seq2SeqTransformer(4 + len(SRC_WORDS), 4 + len(TGT_WORDS), norm_first)
    with torch.no_grad():
        for parameter in original.parameters():  # non-trivial LayerNorm gains and biases too
            parameter.add_(torch.randn_like(parameter) * 0.3)
        original.generator.bias[PAD] = -20.0  # the tutorial decodes pad freely; ours never does
        original.generator.bias[EOS] += 1.0
    original.eval()
    torch.save(original.state_dict(), folder / "transformer.pt")
    return original, norm_first, folder / "transformer.pt", write_vocab(folder / "src.txt", SRC_WORDS), \
        write_vocab(folder / "tgt.txt", TGT_WORDS)


def imported(tutorial):
    original, norm_first, path, src_vocab, tgt_vocab = tutorial
    return convert(path, settings={"nhead": HEADS, "norm_first": norm_first}, src_vocab=src_vocab, tgt_vocab=tgt_vocab)


def random_batch(generator):
    src = torch.randint(4, 4 + len(SRC_WORDS), (3, 7), generator=generator)
    src[:, 0], src[0, 6], src[1, 4], src[1, 5:] = BOS, EOS, EOS, PAD
    tgt = torch.randint(4, 4 + len(TGT_WORDS), (3, 6), generator=generator)
    tgt[:, 0] = BOS
    return src, tgt


def attention_by_hooks(original, src, tgt):
    """Every nn.MultiheadAttention's per-head weights, in call order, forced out with hooks."""
    captured, handles = [], []

    def ask(module, args, kwargs):
        kwargs.update(need_weights=True, average_attn_weights=False)
        return args, kwargs

    def keep(module, args, kwargs, output):
        captured.append(output[1])

    for module in original.modules():
        if isinstance(module, nn.MultiheadAttention):
            handles.append(module.register_forward_pre_hook(ask, with_kwargs=True))
            handles.append(module.register_forward_hook(keep, with_kwargs=True))
    try:
        with torch.no_grad():
            original(src.T, tgt.T)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def test_detects_the_format_and_asks_for_what_the_file_lacks(tutorial):
    _, _, path, src_vocab, tgt_vocab = tutorial
    assert detect_format(path) == "nn-transformer"
    inspection = inspect(path)
    assert set(inspection.missing) == {"nhead", "norm_first"} and set(inspection.vocabularies) == {"src", "tgt"}
    assert inspection.inferred["emb_size"] == E and inspection.inferred["num_encoder_layers"] == LAYERS
    with pytest.raises(MissingSettingsError) as caught:
        convert(path, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    message = str(caught.value)
    assert "--set nhead=N (one of 1, 2, 4, 8, 16)" in message and "--set norm_first=true|false" in message
    assert "emb_size=16" in message and "\n" not in message


def test_logits_and_every_head_match_the_original(tutorial):
    original, norm_first, *_ = tutorial
    checkpoint = imported(tutorial)
    config = checkpoint.config
    assert (config.norm_position, config.final_norm, config.pre_norm_kv) == ("pre" if norm_first else "post",
                                                                            True, True)
    src, tgt = random_batch(torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = original(src.T, tgt.T).transpose(0, 1)
        logits, intermediates = checkpoint.model(src, tgt, need_weights=True)
    assert (logits - expected).abs().max() < 1e-4
    hooked = attention_by_hooks(original, src, tgt)
    ours = intermediates.attention["enc_self"] + [weights for layer in zip(intermediates.attention["dec_self"],
                                                                           intermediates.attention["cross"])
                                                  for weights in layer]
    assert len(hooked) == len(ours) == 3 * LAYERS
    for theirs, mine in zip(hooked, ours):
        assert theirs.shape == mine.shape and mine.shape[1] == HEADS
        assert (theirs - mine).abs().max() < 1e-5


def test_greedy_output_is_the_tutorials_and_the_trace_has_every_layer_and_head(tutorial):
    original, *_ = tutorial
    model = imported(tutorial).model
    generator = torch.Generator().manual_seed(11)
    lengths = []
    for _ in range(6):
        words = torch.randint(4, 4 + len(SRC_WORDS), (int(torch.randint(2, 7, (1,), generator=generator)),),
                              generator=generator).tolist()
        src = [BOS, *words, EOS]
        max_len = len(src) + 5
        with torch.no_grad():
            expected = tutorial_greedy(original, torch.tensor(src)[:, None], max_len)
        result = finish(greedy(model, src, Capture(max_len=max_len - 1)))[0]
        assert result.token_ids == expected
        lengths.append(len(expected))
        trace = result.trace
        steps = len(result.token_ids)
        for kind, query_len, key_len in (("enc_self", len(src), len(src)), ("dec_self", steps, steps),
                                         ("cross", steps, len(src))):
            assert len(trace.attention[kind]) == LAYERS
            assert all(layer.shape == (HEADS, query_len, key_len) for layer in trace.attention[kind])
    assert len(set(lengths)) > 1  # some outputs stopped at EOS, others ran to the limit


def test_the_converted_checkpoint_remembers_the_answers(tutorial):
    checkpoint = imported(tutorial)
    record = checkpoint.provenance["imported_from"]
    assert record["format"] == "nn-transformer" and record["supplied"]["nhead"] == HEADS
    assert "norm_first" in record["supplied"] and record["read_from_file"]["dim_feedforward"] == FF
    source = checkpoint.source_tokenizer
    assert source.encode("ein Mann läuft im Park .", unknown="replace")[0] == BOS  # framed like text_transform
    assert source.tokens(source.encode("ein hund")) == ["<bos>", "ein", "hund"]


def test_wrong_nhead_is_a_one_line_error(tutorial):
    _, _, path, src_vocab, tgt_vocab = tutorial
    with pytest.raises(Exception) as caught:
        convert(path, settings={"nhead": 3, "norm_first": False}, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    assert "nhead=3 does not divide emb_size=16" in str(caught.value)


def test_a_trusted_whole_pickled_model_says_nhead_and_norm_first_itself(tutorial, tmp_path):
    original, norm_first, _, src_vocab, tgt_vocab = tutorial
    path = tmp_path / "whole.pt"
    torch.save(original, path)
    with pytest.raises(CheckpointError,
                       match=r"needs arbitrary unpickling \(it contains tests\..*Seq2SeqTransformer\)"):
        inspect(path)
    inspection = inspect(path, trust=True)
    assert not inspection.missing and inspection.inferred["nhead"] == HEADS
    assert inspection.inferred["norm_first"] is norm_first and inspection.inferred["activation"] == "relu"
    checkpoint = convert(path, src_vocab=src_vocab, tgt_vocab=tgt_vocab, trust=True)
    src, tgt = random_batch(torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert (checkpoint.model(src, tgt)[0] - original(src.T, tgt.T).transpose(0, 1)).abs().max() < 1e-4


def test_a_half_precision_file_keeps_one_float32_copy_of_each_packed_projection(tutorial, tmp_path):
    """q, k and v of a layer are three parts of ``in_proj_weight``: read as float32 once, the three parameters are
    views of that one copy, and hold exactly the saved halves."""
    original, norm_first, _, src_vocab, tgt_vocab = tutorial
    path = tmp_path / "half.pt"
    torch.save({name: tensor.half() for name, tensor in original.state_dict().items()}, path)
    model = convert(path, settings={"nhead": HEADS, "norm_first": norm_first}, src_vocab=src_vocab,
                    tgt_vocab=tgt_vocab).model
    attention = model.encoder_layers[0].self_attention.attention
    parts = [attention.query.weight, attention.key.weight, attention.value.weight]
    assert len({part.untyped_storage().data_ptr() for part in parts}) == 1
    packed = original.transformer.encoder.layers[0].self_attn.in_proj_weight.detach().half().float()
    assert torch.equal(torch.cat(parts), packed)
