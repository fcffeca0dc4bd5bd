"""`attnviz lens` as scripts use it: the JSON document's shape and numbers (the same as the lens computed directly),
the readable table, and one line for each bad input."""

from __future__ import annotations

import json

import numpy as np

from models.analysis.lens import NO_ENCODER, NOT_TRANSFORMER, decoder_lens, logit_lens
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from tests.test_cli import assert_error, cli

DEMO = "en-es-transformer"
SENTENCE = "where is the house of my friend"


def test_the_json_document_has_a_reading_per_step_and_layer_and_one_per_encoder_layer(capsys):
    code, out, err = cli(capsys, "lens", "-c", DEMO, SENTENCE, "--top", "3", "--json")
    assert code == 0 and err == ""
    document = json.loads(out)
    translator = Translator(load_checkpoint(f"resources/checkpoints/{DEMO}.safetensors"))
    result = translator.translate(SENTENCE)
    source = translator.source(SENTENCE)
    layers = translator.model.attention_shape()
    assert document["tokens"] == result.tokens and document["steps"] == list(range(1, len(result.tokens) + 1))
    assert len(document["decoder"]) == len(result.tokens)
    lens = logit_lens(translator.model, source.ids, result.token_ids, top_k=3)
    for step, readings in enumerate(document["decoder"]):
        assert [reading["layer"] for reading in readings] == list(range(layers["dec_self"][0] + 1))
        for layer, reading in enumerate(readings):
            assert set(reading) == {"layer", "p", "rank", "top"} and len(reading["top"]) == 3
            assert abs(reading["p"] - lens.probs[layer, step]) < 1e-6 and reading["rank"] == lens.ranks[layer, step]
            assert [token for token, _ in reading["top"]] == [translator.target_tokenizer.token(int(i))
                                                             for i in lens.top_ids[layer, step]]
    assert document["decoder"][-1][-1]["rank"] == 0
    assert np.isclose(document["decoder"][0][-1]["p"], result.steps[0].probabilities[0], atol=1e-6)
    encoder = document["encoder"]
    assert [entry["layer"] for entry in encoder] == list(range(layers["enc_self"][0] + 1))
    assert all(set(entry) == {"layer", "output", "nll"} for entry in encoder)
    assert encoder[-1]["output"] == result.text
    readings = decoder_lens(translator.model, source.ids, result.token_ids)
    assert [entry["nll"] for entry in encoder] == [reading.nll for reading in readings]


def test_a_beam_hypothesis_and_one_step(capsys):
    code, out, _ = cli(capsys, "lens", "-c", DEMO, SENTENCE, "--beam", "3", "--hypothesis", "2", "--step", "2",
                       "--json")
    assert code == 0
    document = json.loads(out)
    assert document["steps"] == [2] and len(document["decoder"]) == 1
    translator = Translator(load_checkpoint(f"resources/checkpoints/{DEMO}.safetensors"))
    from models.inference.decoding import finish

    second = finish(translator.decode(translator.source(SENTENCE), mode="beam", beam=3, need_weights=False))[1]
    assert document["tokens"] == second.tokens


def test_a_decoder_only_model_has_a_lens_over_its_continuation_and_no_decoder_lens(capsys):
    code, out, _ = cli(capsys, "lens", "-c", "piglatin-decoder-only", "hello", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["encoder"] is None and len(document["decoder"]) == len(document["tokens"])
    code, out, _ = cli(capsys, "lens", "-c", "piglatin-decoder-only", "hello")
    assert code == 0 and NO_ENCODER in out.splitlines()


def test_the_table_lists_every_step_and_every_encoder_layer(capsys):
    code, out, err = cli(capsys, "lens", "-c", DEMO, SENTENCE, "--target", "dónde está la casa")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "output: dónde está la casa"
    header = lines[2].split()
    assert header == ["step", "token", "L0", "L1", "L2", "L3"]
    decoder_lens_at = next(i for i, line in enumerate(lines) if line.startswith("DecoderLens"))
    assert lines[decoder_lens_at + 1].split() == ["layer", "NLL", "output"]
    assert [line.split()[0] for line in lines[decoder_lens_at + 2:]] == ["0", "1", "2", "3"]


def test_bad_input_is_one_line(capsys):
    code, _, err = cli(capsys, "lens", "-c", DEMO, "hello", "--step", "40")
    assert_error(code, err, "step 40 is beyond the output, which has 1 step")
    code, _, err = cli(capsys, "lens", "-c", DEMO, "hello", "--beam", "2", "--hypothesis", "3")
    assert_error(code, err, "--hypothesis 3 is beyond the beam's 2 hypotheses")
    code, _, err = cli(capsys, "lens", "-c", "piglatin-gru-additive", "hello")
    assert_error(code, err, NOT_TRANSFORMER)
    code, _, err = cli(capsys, "lens", "-c", DEMO, "   ")
    assert code == 1 and len(err.strip().splitlines()) == 1
