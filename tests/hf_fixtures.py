"""The Hugging Face models the importer tests convert: tiny ``transformers`` models with seeded random weights far from
their initialisation, written with ``save_pretrained`` as the library writes them and read back as the reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from tests.helpers import assert_same_forward

# The sizes of the tiny encoder-decoders of the BART family (BART, mBART, M2M100, Pegasus, BlenderbotSmall, FSMT).
TINY_SEQ2SEQ = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=40)


def saved_random_model(folder: Path, model_class, config, *, seed: int = 0, keep: tuple[str, ...] = ("layer_norm",),
                       spread: float = 0.3, scale: float = 2.0, end_bias: tuple[int, float] | None = None,
                       prepare: Callable[[torch.nn.Module], None] | None = None,
                       adjust: Callable[[torch.nn.Module], None] | None = None):
    """A ``model_class(config)`` seeded with ``seed``, its weights moved far from the 0.02-std init so that its outputs
    depend on the input: every parameter whose name holds none of ``keep`` gets noise of std ``spread`` and is then
    multiplied by ``scale``. ``end_bias`` (token id, bump): the final logits' bias drawn from N(0, 0.5) and that
    token's raised, so that some outputs end early and some run to the limit. ``prepare`` and ``adjust`` change the
    model (without gradients) before and after that. Saved into ``folder`` with ``save_pretrained`` and read back with
    eager attention (which returns every head's weights), in eval mode."""
    torch.manual_seed(seed)
    model = model_class(config)
    with torch.no_grad():
        if prepare is not None:
            prepare(model)
        for name, parameter in model.named_parameters():
            if not any(part in name for part in keep):
                parameter.add_(torch.randn_like(parameter) * spread).mul_(scale)
        if end_bias is not None:
            token, bump = end_bias
            model.final_logits_bias.normal_(0.0, 0.5)
            model.final_logits_bias[0, token] += bump
        if adjust is not None:
            adjust(model)
    model.save_pretrained(folder)
    return model_class.from_pretrained(str(folder), attn_implementation="eager").eval()


def assert_converted_forward_equal(checkpoint, original, sources: Sequence[Sequence[int]], *, pad: int,
                                   start: Sequence[int], lowest: int, vocab: int | None = None,
                                   saved: Path | None = None, heads: dict[str, int] | None = None) -> None:
    """The converted ``checkpoint``'s model gives ``original``'s logits and every head's weights on ``sources``
    (padded with ``pad``) and a seeded random forced target of 6 tokens (ids from ``lowest`` to ``vocab``, default
    the original's vocabulary, starting with ``start``); so does the same checkpoint saved to ``saved`` and read
    again, where given. ``heads``: each kind's heads where the sides differ."""
    width = max(map(len, sources))
    src = torch.tensor([list(ids) + [pad] * (width - len(ids)) for ids in sources])
    tgt = torch.randint(lowest, vocab or original.config.vocab_size, (len(sources), 6),
                        generator=torch.Generator().manual_seed(3))
    tgt[:, :len(start)] = torch.tensor(start)
    models = [checkpoint.model]
    if saved is not None:
        models.append(load_checkpoint(save_checkpoint(saved, checkpoint.model, checkpoint.source_tokenizer,
                                                      checkpoint.target_tokenizer, checkpoint.provenance)).model)
    with torch.no_grad():
        expected = original(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt,
                            output_attentions=True, use_cache=False)
        for model in models:
            logits, intermediates = model(src, tgt, need_weights=True)
            assert_same_forward(expected, logits, intermediates, **({} if heads is None else {"heads": heads}))


def write_byte_level_bpe(folder: Path, sentences: Sequence[str], specials: Sequence[str], single: Sequence[str]):
    """A byte-level BPE ``tokenizer.json`` (as BART, mBART and NLLB folders hold) trained on ``sentences`` with the
    ``specials`` first, framing a source as the template ``single`` says (``$A`` the text); written into ``folder``
    and returned."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(sentences, trainer)
    framing = [(token, tokenizer.token_to_id(token)) for token in single if token != "$A"]
    tokenizer.post_processor = processors.TemplateProcessing(single=list(single), special_tokens=framing)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer
