"""Encoder-only models (BERT, RoBERTa, DistilBERT) against transformers: tiny random-weight models built and saved by
transformers with a small tokenizer.json, converted by the hf-encoder importer, give transformers' hidden states, MLM
logits and every head's attention on a padded batch of two sentences; their masks are filled as transformers ranks
the predictions, through ``fill_masks`` and through ``attnviz translate``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from models.importers import convert, detect_format  # noqa: E402
from models.inference.fill_mask import fill_masks  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.storage.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from tests.hf_fixtures import saved_random_model, write_byte_level_bpe  # noqa: E402

SENTENCES = ["the capital of france is paris .", "the cat sat on the mat and the dog sat on the log .",
             "a small model reads a short sentence .", "paris is a city in france ; the mat is red .",
             "she reads the book that the cat wrote ."] * 4
TINY = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
            max_position_embeddings=40)
FAMILIES = ("bert", "roberta", "distilbert")
MASK = {"bert": "[MASK]", "roberta": "<mask>", "distilbert": "[MASK]"}


def write_wordpiece(folder: Path):
    """A WordPiece tokenizer.json as BERT's folders hold: lower-casing BERT normaliser, ``[CLS] $A [SEP]``."""
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


def tokenizer_for(folder: Path, family: str):
    if family == "roberta":
        return write_byte_level_bpe(folder, SENTENCES, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                    ["<s>", "$A", "</s>"])
    return write_wordpiece(folder)


def model_class(family: str, *, head: bool = True):
    names = {"bert": "Bert", "roberta": "Roberta", "distilbert": "DistilBert"}
    return getattr(transformers, f"{names[family]}{'ForMaskedLM' if head else 'Model'}")


def hf_config(family: str, vocab_size: int):
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab_size, dim=24, n_layers=2, n_heads=4, hidden_dim=32,
                                             max_position_embeddings=40, pad_token_id=0)
    if family == "roberta":
        return transformers.RobertaConfig(vocab_size=vocab_size, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                          **TINY)
    return transformers.BertConfig(vocab_size=vocab_size, pad_token_id=0, **TINY)


def build(folder: Path, family: str, *, head: bool = True, seed: int = 0):
    """A random-weight ``family`` model saved by transformers into ``folder`` with its tokenizer.json; returned as
    transformers reads it back (eager attention, eval mode)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_for(folder, family)
    config = hf_config(family, tokenizer.get_vocab_size())
    return saved_random_model(folder, model_class(family, head=head), config, seed=seed,
                              keep=("LayerNorm", "layer_norm"), spread=0.3, scale=1.5)


def encode(folder: Path, text: str) -> list[int]:
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids


def padded_batch(folder: Path, pad: int, texts: list[str]) -> torch.Tensor:
    rows = [encode(folder, text) for text in texts]
    width = max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def theirs(original, ids: torch.Tensor, pad: int):
    with torch.no_grad():
        return original(input_ids=ids, attention_mask=(ids != pad).long(), output_attentions=True,
                        output_hidden_states=True)


@pytest.fixture(scope="module", params=FAMILIES)
def family_folder(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    return request.param, folder, build(folder, request.param)


def test_hidden_states_logits_and_every_heads_attention_match_transformers(family_folder):
    family, folder, original = family_folder
    assert detect_format(folder) == "hf-encoder"
    checkpoint = convert(folder)
    model = checkpoint.model
    assert model.config.mlm_head and model.attention_shape() == {"enc_self": (2, 4)}
    ids = padded_batch(folder, model.pad_id, ["the capital of france is paris .", "the cat sat ."])
    assert (ids == model.pad_id).any(), "the batch must hold padding"
    expected = theirs(original, ids, model.pad_id)
    with torch.no_grad():
        hidden, _, _ = model.encode(ids, need_weights=False)
        logits, intermediates = model(ids, need_weights=True)
    assert torch.allclose(hidden, expected.hidden_states[-1], atol=1e-4)
    assert torch.allclose(logits, expected.logits, atol=1e-4)
    for layer, weights in enumerate(intermediates.attention["enc_self"]):
        reference = expected.attentions[layer]
        assert torch.allclose(weights, reference, atol=1e-5), f"layer {layer}"
        assert float(reference.std()) > 0.05, "the random weights must make attention far from uniform"
    real = ids != model.pad_id
    assert torch.equal(intermediates.masks["enc_self"][:, 0, 0], real)


def test_a_saved_checkpoint_gives_the_same_logits(family_folder, tmp_path):
    family, folder, original = family_folder
    checkpoint = convert(folder)
    saved = save_checkpoint(tmp_path / f"{family}.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                            checkpoint.target_tokenizer, checkpoint.provenance)
    loaded = load_checkpoint(saved)
    ids = padded_batch(folder, loaded.model.pad_id, ["the cat sat on the mat .", "paris ."])
    with torch.no_grad():
        logits, _ = loaded.model(ids)
    assert torch.allclose(logits, theirs(original, ids, loaded.model.pad_id).logits, atol=1e-4)


def test_masks_are_filled_as_transformers_ranks_them(family_folder):
    family, folder, original = family_folder
    translator = Translator(convert(folder), "cpu")
    text = f"the capital of {MASK[family]} is paris {MASK[family]}"
    source = translator.source(text)
    assert source.ids == encode(folder, text)  # framed by the post-processor, the masks read as their token
    result = fill_masks(translator, source, top_k=5)
    mask_id = translator.model.config.mask_id
    positions = [index for index, token in enumerate(source.ids) if token == mask_id]
    assert len(positions) == 2 and [p.position for p in result.predictions] == positions
    logits = theirs(original, torch.tensor([source.ids]), translator.model.pad_id).logits[0]
    for prediction in result.predictions:
        probabilities = torch.softmax(logits[prediction.position], dim=-1)
        assert prediction.top_ids == torch.argsort(probabilities, descending=True)[:5].tolist()
        assert np.allclose(prediction.top_probs, probabilities[prediction.top_ids].numpy(), atol=1e-5)
        assert prediction.top_tokens == [translator.target_tokenizer.token(i) for i in prediction.top_ids]
    filled = list(source.ids)
    for prediction in result.predictions:
        filled[prediction.position] = prediction.top_ids[0]
    assert result.text == translator.target_tokenizer.decode(filled) and result.note == ""
    trace = result.trace
    assert trace.kinds == ["enc_self"] and trace.tgt_tokens == [] and len(trace.src_tokens) == len(source.ids)
    assert trace.attention["enc_self"][0].shape == (4, len(source.ids), len(source.ids))
    assert trace.masks["enc_self"].all()


def test_bert_fill_mask_equals_the_transformers_pipeline(tmp_path):
    folder = tmp_path / "bert"
    original = build(folder, "bert")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), mask_token="[MASK]",
                                                cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                                unk_token="[UNK]")
    pipe = transformers.pipeline("fill-mask", model=original, tokenizer=fast, top_k=5, device="cpu")
    text = "the cat sat on the [MASK] ."
    expected = pipe(text)
    translator = Translator(convert(folder), "cpu")
    (prediction,) = fill_masks(translator, translator.source(text), top_k=5).predictions
    assert prediction.top_ids == [entry["token"] for entry in expected]
    assert np.allclose(prediction.top_probs, [entry["score"] for entry in expected], atol=1e-5)


def test_head_ablation_zeroes_a_heads_output(family_folder):
    from models.nn.ablation import Ablation, HeadGates

    family, folder, _ = family_folder
    model = convert(folder).model
    ids = padded_batch(folder, model.pad_id, ["the cat sat on the mat .", "paris is a city ."])
    ablation = Ablation.parse(["enc_self:0:1", "enc_self:1:*"])
    gates = HeadGates({("enc_self", 0): torch.tensor([[1.0, 0.0, 1.0, 1.0]]),
                       ("enc_self", 1): torch.zeros(1, 4)})
    with torch.no_grad():
        plain, _ = model(ids)
        ablated, intermediates = model(ids, need_weights=True, ablation=ablation)
        gated, _ = model(ids, need_weights=True, ablation=gates)
    assert not torch.allclose(plain, ablated, atol=1e-3)
    assert torch.allclose(ablated, gated, atol=1e-6)
    assert len(intermediates.attention["enc_self"]) == 2  # the ablated heads' weights are still traced


def test_the_cli_fills_masks_and_gives_the_top_k_as_json(family_folder, tmp_path, capsys):
    family, folder, _ = family_folder
    out = tmp_path / f"{family}.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    text = f"the capital of france is {MASK[family]} ."
    translator = Translator(load_checkpoint(out), "cpu")
    expected = fill_masks(translator, translator.source(text), top_k=5)
    assert main(["translate", "-c", str(out), text]) == 0
    assert capsys.readouterr().out == expected.text + "\n"
    assert main(["translate", "-c", str(out), "--json", text]) == 0
    (document,) = json.loads(capsys.readouterr().out)
    (mask,) = document["masks"]
    assert document["output"] == expected.text and mask["ids"] == expected.predictions[0].top_ids
    assert mask["position"] == expected.predictions[0].position and len(mask["tokens"]) == 5
    assert np.allclose(mask["probabilities"], expected.predictions[0].top_probs)


def test_a_sentence_without_a_mask_is_printed_with_a_note(family_folder, tmp_path, capsys):
    family, folder, _ = family_folder
    out = tmp_path / f"{family}.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["translate", "-c", str(out), "the cat sat on the mat ."]) == 0
    captured = capsys.readouterr()
    assert captured.out == "the cat sat on the mat .\n"
    assert f"attnviz: note: input 1: no token was masked: there is nothing to fill (a {MASK[family]}" in captured.err


@pytest.mark.parametrize("family", FAMILIES)
def test_bare_encoders_give_transformers_attention_and_no_predictions(family, tmp_path):
    folder = tmp_path / family
    original = build(folder, family, head=False)
    checkpoint = convert(folder)
    model = checkpoint.model
    assert not model.config.mlm_head and not model.has_predictions
    ids = padded_batch(folder, model.pad_id, ["the capital of france is paris .", "the cat ."])
    expected = theirs(original, ids, model.pad_id)
    with torch.no_grad():
        hidden, _, weights = model.encode(ids, need_weights=True)
    assert torch.allclose(hidden, expected.last_hidden_state, atol=1e-4)
    for layer, layer_weights in enumerate(weights):
        assert torch.allclose(layer_weights, expected.attentions[layer], atol=1e-5)
    translator = Translator(checkpoint, "cpu")
    result = fill_masks(translator, translator.source(f"the cat sat on the {MASK[family]} ."))
    assert result.predictions == [] and result.note.startswith("this model has no masked-language-model head")
    assert "\n" not in result.note and result.trace.kinds == ["enc_self"]
    with pytest.raises(Exception, match="this model has no masked-language-model head"):
        model(ids)


def test_export_writes_the_attention_and_each_masks_predictions(family_folder, tmp_path, capsys):
    family, folder, original = family_folder
    out = tmp_path / f"{family}.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    text = f"the cat sat on the {MASK[family]} ."
    npz = tmp_path / "fill.npz"
    assert main(["export", "-c", str(out), text, "-o", str(npz)]) == 0, capsys.readouterr().err
    translator = Translator(load_checkpoint(out), "cpu")
    expected = fill_masks(translator, translator.source(text), top_k=5)
    ids = encode(folder, text)
    reference = theirs(original, torch.tensor([ids]), translator.model.pad_id)
    with np.load(npz) as arrays:
        assert arrays["src_ids"].tolist() == ids and len(arrays["src_tokens"]) == len(ids)
        assert arrays["masked_positions"].tolist() == [ids.index(translator.model.config.mask_id)]
        assert arrays["fill_ids"].shape == (1, 5) and arrays["fill_ids"].tolist() == [expected.predictions[0].top_ids]
        assert str(arrays["translation"]) == expected.text and arrays["enc_self_mask"].all()
        for layer in range(2):
            assert np.allclose(arrays[f"enc_self_L{layer}"], reference.attentions[layer][0].numpy(), atol=1e-5)
        assert not any(name.startswith(("dec_self", "cross")) for name in arrays.files)
    csv = tmp_path / "head.csv"
    assert main(["export", "-c", str(out), text, "-o", str(csv), "--kind", "enc_self", "--layer", "1",
                 "--head", "2"]) == 0
    rows = csv.read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(ids) + 1
    assert main(["export", "-c", str(out), text, "-o", str(npz), "--target", "a cat"]) == 1
    assert "attnviz: error: an encoder-only model has no output to force" in capsys.readouterr().err


def test_characters_wordpiece_does_not_know_become_its_unknown_token_and_are_named(tmp_path):
    folder = tmp_path / "bert"
    build(folder, "bert")
    translator = Translator(convert(folder), "cpu")
    source = translator.source("the cat sat on the ☃ .")
    unknown = translator.source_tokenizer.unk_id
    assert translator.source_tokenizer.token(unknown) == "[UNK]" and unknown in source.ids
    assert source.unknown == ["☃"] and "☃" in source.unknown_notice()


def test_the_first_berts_names_and_their_next_sentence_head_are_read(tmp_path):
    """bert-base-uncased's files name LayerNorm parameters gamma and beta and keep the next-sentence head."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "bert"
    original = build(folder, "bert")
    state = load_file(folder / "model.safetensors")
    renamed = {key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): value
               for key, value in state.items()}
    assert sum(key.endswith(".gamma") for key in renamed) > 4
    renamed["cls.seq_relationship.weight"] = torch.randn(2, 24)
    renamed["cls.seq_relationship.bias"] = torch.randn(2)
    save_file(renamed, folder / "model.safetensors", metadata={"format": "pt"})
    model = convert(folder).model
    ids = padded_batch(folder, model.pad_id, ["the cat sat on the mat .", "paris ."])
    with torch.no_grad():
        logits, _ = model(ids)
    assert torch.allclose(logits, theirs(original, ids, model.pad_id).logits, atol=1e-4)


def test_render_draws_the_encoders_attention_and_the_views_read_its_trace(family_folder, tmp_path, capsys):
    from attnviz.state import viewmodel
    from attnviz.state.session import Selection

    family, folder, _ = family_folder
    out = tmp_path / f"{family}.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    text = f"the cat sat on the {MASK[family]} ."
    image = tmp_path / "layer1.png"
    assert main(["render", "-c", str(out), text, "--kind", "enc_self", "--layer", "1", "--head", "mean",
                 "-o", str(image)]) == 0, capsys.readouterr().err
    assert image.stat().st_size > 1000
    translator = Translator(load_checkpoint(out), "cpu")
    trace = fill_masks(translator, translator.source(text)).trace
    selection = Selection(kind="enc_self", layer=1, head="mean")
    assert viewmodel.selector_state(trace, selection).kinds == ["enc_self"]
    state = viewmodel.heatmap(trace, selection)
    assert np.allclose(state.matrix, trace.attention["enc_self"][1].mean(axis=0), atol=1e-7)


def test_a_sentence_longer_than_the_positions_is_cut_keeping_its_end_token(family_folder, capsys, tmp_path):
    family, folder, original = family_folder
    translator = Translator(convert(folder), "cpu")
    limit = translator.config.max_len
    text = " ".join(["the cat sat on the mat ."] * 12) + f" {MASK[family]}"
    full = encode(folder, text)
    assert len(full) > limit
    source = translator.source(text)
    assert source.truncated and len(source.ids) == limit
    assert source.ids == full[: limit - 1] + [translator.config.eos_id]  # as a tokenizer's truncation keeps it
    result = fill_masks(translator, source)
    assert result.predictions == [] and "no token was masked" in result.note  # the mask was cut off
    logits = theirs(original, torch.tensor([source.ids]), translator.model.pad_id).logits
    with torch.no_grad():
        ours, _ = translator.model(torch.tensor([source.ids]))
    assert torch.allclose(ours, logits, atol=1e-4)


def test_start_encodes_and_step_refuses(family_folder):
    from models.errors import InputError

    family, folder, original = family_folder
    model = convert(folder).model
    ids = padded_batch(folder, model.pad_id, ["the cat sat on the mat .", "paris ."])
    expected = theirs(original, ids, model.pad_id)
    with torch.no_grad():
        state, intermediates = model.start(ids)
        assert torch.allclose(state.memory, expected.hidden_states[-1], atol=1e-4)
        assert torch.equal(state.src_mask[:, 0, 0], ids != model.pad_id)
        for layer, weights in enumerate(intermediates.attention["enc_self"]):
            assert torch.allclose(weights, expected.attentions[layer], atol=1e-5)
        with pytest.raises(InputError, match="an encoder-only model does not decode"):
            model.step(ids[:, 0], state)
        with pytest.raises(InputError, match="an encoder-only model reads no target sentence"):
            model(ids, ids[:, :2])
