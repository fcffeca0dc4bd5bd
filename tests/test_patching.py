"""Activation patching and attribution patching (models/analysis/patching.py) against patched runs written out here
with forward hooks on the model's own modules: a residual position replaced at a layer's input (or the last layer's
output), a head's output replaced in the input of its attention's output projection. Exactness on tiny random models
in float64 (1e-5), on the demos in float32; AtP against a finite difference of the metric along the patch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models import build_model, make_config
from models.analysis.catalogue import PATCH_NLL
from models.analysis.patching import PatchingError, activation_patching, default_step, patch_one, spearman
from models.inference.decoding import finish
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from attnviz.state.demos import demo_path

VOCAB = 24
CLEAN = [5, 9, 7, 11, 6, 3]
CORRUPT = [5, 9, 13, 11, 6, 3]
OUTPUT = [8, 12, 4, 10, 3]


def tiny(arch: str = "transformer-preln", seed: int = 0, **sizes):
    torch.manual_seed(seed)
    if arch == "decoder-only":
        config = make_config(arch, VOCAB, VOCAB, d_model=16, heads=2, layers=2, max_len=32, dropout=0.0, **sizes)
    else:
        config = make_config(arch, VOCAB, VOCAB, d_model=16, heads=2, encoder_layers=2, decoder_layers=2, max_len=32,
                             dropout=0.0, **sizes)
    return build_model(config).double().eval()


def stack(model, side: str):
    if hasattr(model, "encoder_layers"):
        return model.encoder_layers if side == "encoder" else model.decoder_layers
    return model.layers


def head_projection(model, kind: str, layer: int):
    """The output projection that combines ``kind`` layer ``layer``'s heads."""
    if not hasattr(model, "encoder_layers"):
        return model.layers[layer].attention.output
    block = model.encoder_layers[layer] if kind == "enc_self" else model.decoder_layers[layer]
    return (block.cross_attention if kind == "cross" else block.self_attention).attention.output


def inputs(model, run: str):
    """(source, decoder input) of the clean or corrupted run forced on OUTPUT."""
    src = CLEAN if run == "clean" else CORRUPT
    if hasattr(model, "encoder_layers"):
        return torch.tensor([src]), torch.tensor([[model.config.bos_id] + OUTPUT[:-1]])
    return torch.tensor([[]], dtype=torch.long), torch.tensor([src + OUTPUT[:-1]])


def first_position(model) -> int:
    return 0 if hasattr(model, "encoder_layers") else len(CLEAN) - 1


def residual_hook(model, side: str, layer: int, edit):
    """A hook through which ``edit(x)`` sees (and may replace) the residual stream entering ``layer`` of ``side``
    (the last layer's output for ``layer`` = layers)."""
    layers = stack(model, side)
    if layer < len(layers):
        return layers[layer].register_forward_pre_hook(lambda _m, args: (edit(args[0]), *args[1:]))
    return layers[-1].register_forward_hook(lambda _m, _a, out: (edit(out[0]), *out[1:]))


def head_hook(model, kind: str, layer: int, head: int, edit):
    size = model.config.d_model // model.config.heads

    def hook(_module, args):
        combined = args[0].clone()
        combined[..., head * size:(head + 1) * size] = edit(combined[..., head * size:(head + 1) * size])
        return (combined,)
    return head_projection(model, kind, layer).register_forward_pre_hook(hook)


def forced_logits(model, run: str, hooks=()) -> torch.Tensor:
    try:
        with torch.no_grad():
            logits, _ = model(*inputs(model, run))
    finally:
        for handle in hooks:
            handle.remove()
    return logits[0, first_position(model):] if not hasattr(model, "encoder_layers") else logits[0]


def noted(model, run: str, register) -> torch.Tensor:
    """What a hook registered by ``register(edit)`` sees in the ``run``."""
    seen = []
    forced_logits(model, run, [register(lambda x: seen.append(x.clone()) or x)])
    return seen[0]


def logit_metric(logits, step: int, result) -> float:
    return float(logits[step, result.clean_token] - logits[step, result.corrupt_token])


ARCHS = ["transformer-preln", "transformer-postln", "decoder-only"]


@pytest.mark.parametrize("arch", ARCHS)
def test_patching_the_whole_last_layer_gives_the_clean_metric_and_nothing_the_corrupted(arch):
    model = tiny(arch)
    step = 2
    result = activation_patching(model, CLEAN, CORRUPT, OUTPUT, step=step)
    clean, corrupt = forced_logits(model, "clean"), forced_logits(model, "corrupt")
    assert result.clean == pytest.approx(logit_metric(clean, step, result), abs=1e-10)
    assert result.corrupt == pytest.approx(logit_metric(corrupt, step, result), abs=1e-10)
    assert result.corrupt_token == int(corrupt[step].argsort(descending=True)[
        1 if int(corrupt[step].argmax()) == OUTPUT[step] else 0])
    if arch != "decoder-only":
        assert result.exact.encoder_all[-1] == pytest.approx(result.clean, abs=1e-5)
    position = first_position(model) + step  # the position whose output is read: its last layer is the clean run's
    assert result.exact.decoder[-1, position] == pytest.approx(result.clean, abs=1e-5)
    # patching nothing: a patched position after the step changes nothing, and a batch row without a patch is the
    # corrupted run (patch_one with a position after the step)
    assert np.all(result.exact.decoder[:, position + 1:] == result.corrupt)
    assert patch_one(model, CLEAN, CORRUPT, OUTPUT, table="decoder", layer=0, index=position, step=step,
                     corrupt_token=result.corrupt_token) == pytest.approx(result.exact.decoder[0, position], abs=1e-12)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_cell_equals_a_run_patched_by_hand(arch):
    """Each residual (layer, position) and each head: the corrupted run with that activation replaced by the clean
    run's, through hooks on the model's modules."""
    model = tiny(arch, seed=3)
    step = 3
    result = activation_patching(model, CLEAN, CORRUPT, OUTPUT, step=step)
    sides = ["decoder"] if arch == "decoder-only" else ["encoder", "decoder"]
    for side in sides:
        table = getattr(result.exact, side)
        for layer in range(len(stack(model, side)) + 1):
            clean_x = noted(model, "clean", lambda edit: residual_hook(model, side, layer, edit))  # noqa: B023
            for position in range(table.shape[1]):
                def patch(x, position=position):
                    x = x.clone()
                    x[:, position] = clean_x[:, position]
                    return x
                logits = forced_logits(model, "corrupt", [residual_hook(model, side, layer, patch)])
                assert table[layer, position] == pytest.approx(logit_metric(logits, step, result), abs=1e-5), \
                    (side, layer, position)
            if side == "encoder":
                logits = forced_logits(model, "corrupt", [residual_hook(model, side, layer, lambda x: clean_x)])  # noqa
                assert result.exact.encoder_all[layer] == pytest.approx(logit_metric(logits, step, result), abs=1e-5)
    for kind, table in result.exact.heads.items():
        for layer in range(table.shape[0]):
            for head in range(table.shape[1]):
                clean_head = noted(model, "clean", lambda edit: head_hook(model, kind, layer, head, edit))  # noqa: B023
                logits = forced_logits(model, "corrupt", [head_hook(model, kind, layer, head, lambda _: clean_head)])  # noqa
                assert table[layer, head] == pytest.approx(logit_metric(logits, step, result), abs=1e-5)


@pytest.mark.parametrize("arch, epsilon, tolerance", [("transformer-preln", 1e-6, 1e-5),
                                                     ("transformer-postln", 1e-6, 1e-5), ("decoder-only", 1e-2, 1e-4)])
def test_attribution_patching_is_the_first_order_change(arch, epsilon, tolerance):
    """AtP − m(corrupt) = (m(corrupt + ε·Δ) − m(corrupt − ε·Δ)) / 2ε as ε → 0, for residual positions and heads.
    (A decoder-only model's RMS norms compute in float32 whatever the model's type, which rounds a step of 1e-6
    away: its ε is 1e-2, where the central difference's error is still below 1e-4.)"""
    model = tiny(arch, seed=5)
    step = 2
    result = activation_patching(model, CLEAN, CORRUPT, OUTPUT, step=step)
    side = "decoder" if arch == "decoder-only" else "encoder"
    cases = [(getattr(result.atp, side)[layer, position], lambda edit, layer=layer: residual_hook(
        model, side, layer, edit), position) for layer in range(3) for position in (1, 2, 4)]
    for kind, table in result.atp.heads.items():
        cases += [(table[layer, head], lambda edit, kind=kind, layer=layer, head=head: head_hook(
            model, kind, layer, head, edit), None) for layer in range(2) for head in range(2)]
    slopes = []
    for estimate, register, position in cases:
        clean_act, corrupt_act = noted(model, "clean", register), noted(model, "corrupt", register)

        def nudge(x, sign, clean_act=clean_act, corrupt_act=corrupt_act, position=position):
            x = x.clone()
            where = slice(None) if position is None else position
            x[:, where] = corrupt_act[:, where] + sign * epsilon * (clean_act[:, where] - corrupt_act[:, where])
            return x
        up, down = (logit_metric(forced_logits(model, "corrupt", [register(lambda x, s=sign: nudge(x, s))]), step,
                                 result) for sign in (1, -1))
        slope = (up - down) / (2 * epsilon)
        assert estimate - result.corrupt == pytest.approx(slope, abs=tolerance * max(1.0, abs(slope)))
        slopes.append(slope)
    assert sum(abs(slope) > 1e-4 for slope in slopes) >= 6  # real changes, not zeros


def test_the_nll_metric_and_its_estimate():
    model = tiny(seed=7)
    result = activation_patching(model, CLEAN, CORRUPT, OUTPUT, metric=PATCH_NLL)
    nll = lambda logits: float(-logits.log_softmax(-1)[torch.arange(len(OUTPUT)), OUTPUT].sum())  # noqa: E731
    assert result.clean == pytest.approx(nll(forced_logits(model, "clean")), abs=1e-10)
    assert result.corrupt == pytest.approx(nll(forced_logits(model, "corrupt")), abs=1e-10)
    assert result.exact.encoder_all[-1] == pytest.approx(result.clean, abs=1e-5)
    assert result.step is None and result.exact.decoder.shape == (3, len(OUTPUT))
    normalised = result.normalised(result.exact)
    assert normalised.encoder_all[-1] == pytest.approx(1.0, abs=1e-6)


def test_batched_equals_one_at_a_time_on_the_demo():
    translator = Translator(load_checkpoint(demo_path("en-es-transformer"), "cpu"), "cpu")
    clean = translator.source("The Lord is my shepherd.").ids
    corrupt = translator.source("The Lord is my father.").ids
    output = finish(translator.decode(translator.source("The Lord is my shepherd."), need_weights=False))[0].token_ids
    other = finish(translator.decode(translator.source("The Lord is my father."), need_weights=False))[0].token_ids
    step = default_step(output, other)
    assert output[:step] == other[:step] and output[step] != other[step]
    model = translator.model
    result = activation_patching(model, clean, corrupt, output, step=step)
    assert result.corrupt_token == other[step]  # the corrupted run's own token where the outputs part
    assert result.exact.encoder_all[-1] == pytest.approx(result.clean, abs=1e-5)
    one = lambda table, layer, index: patch_one(model, clean, corrupt, output, table=table, layer=layer,  # noqa: E731
                                                index=index, step=step, corrupt_token=result.corrupt_token)
    for layer, position in [(0, 4), (2, 1), (3, 4)]:
        assert result.exact.encoder[layer, position] == pytest.approx(one("encoder", layer, position), abs=1e-4)
    assert result.exact.decoder[2, step] == pytest.approx(one("decoder", 2, step), abs=1e-4)
    for kind in ("enc_self", "dec_self", "cross"):
        assert result.exact.heads[kind][1, 2] == pytest.approx(one(kind, 1, 2), abs=1e-4)
    assert result.spearman["all"] > 0.5  # AtP ranks the probes much as exact patching does


def test_spearman_is_the_rank_correlation_with_mean_ranks_for_ties():
    a, b = np.array([1.0, 2.0, 2.0, 5.0]), np.array([0.1, 0.4, 0.3, 0.2])
    ranks_a, ranks_b = np.array([1, 2.5, 2.5, 4]), np.array([1, 4, 3, 2])
    expected = np.cov(ranks_a, ranks_b, bias=True)[0, 1] / (ranks_a.std() * ranks_b.std())
    assert spearman(a, b) == pytest.approx(expected)
    assert spearman(np.ones(3), b[:3]) is None


def test_bad_input_is_one_line():
    model = tiny()
    with pytest.raises(PatchingError, match="same number of tokens.*clean source has 6, the corrupted 5"):
        activation_patching(model, CLEAN, CORRUPT[:-1], OUTPUT)
    with pytest.raises(PatchingError, match="step 5 is beyond the output: it has steps 0 to 4"):
        activation_patching(model, CLEAN, CORRUPT, OUTPUT, step=5)
    gru = load_checkpoint(demo_path("piglatin-gru-additive"), "cpu").model
    with pytest.raises(PatchingError, match=r"recurrent \(GRU\) layers"):
        activation_patching(gru, [5, 6, 3], [5, 7, 3], [4, 3])
