"""Integrated gradients (models/analysis/gradients.py) that say how good they are: each step's completeness error,
the node count adapted until every step is within 5 %, and the maps against a converged integral written here from
the formula (Sundararajan et al. 2017): IG_i = x_i · ∫₀¹ ∂ log p(y_t) / ∂x_i (αx) dα, the baseline the zero token
embeddings (positions kept)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.analysis.contributions import COMPLETENESS_TOLERANCE, ContributionError, decoder_input
from models.analysis.gradients import IG_MAX_STEPS, check_ig_steps, integrated_gradients
from tests.test_contributions import OUTPUT, SOURCE, demo, demo_pair, random_model

TEXT = "The cat sits on the mat."


def converged_ig(model, src: list[int], out: list[int], *, points: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """The IG maps ``[T, S]``, ``[T, T]`` by a midpoint sum of ``points`` equal segments, all α of a step as one
    batch: each copy's token embeddings (source and target) multiplied by its α in a forward hook."""
    alphas = (torch.arange(points, dtype=torch.float32) + 0.5) / points
    src_t = torch.tensor([src]).expand(points, -1)
    tgt_t = torch.tensor([decoder_input(model, out)]).expand(points, -1)
    source_maps, target_maps = [], []
    for step, token in enumerate(out):
        kept = {}

        def scaled(name):
            def hook(_module, _inputs, output):
                kept[f"{name}_x"] = output[0].detach()
                kept[name] = (output.detach() * alphas[:, None, None]).requires_grad_(True)
                return kept[name]
            return hook

        hooks = [model.src_embedding.tokens.register_forward_hook(scaled("s")),
                 model.tgt_embedding.tokens.register_forward_hook(scaled("t"))]
        try:
            logits, _ = model(src_t, tgt_t)
        finally:
            for hook in hooks:
                hook.remove()
        log_p = torch.log_softmax(logits[:, step].float(), dim=-1)[:, token].sum()
        grad_s, grad_t = torch.autograd.grad(log_p, (kept["s"], kept["t"]))
        source_maps.append((kept["s_x"] * grad_s.mean(dim=0)).norm(dim=-1).numpy())
        target_maps.append((kept["t_x"] * grad_t.mean(dim=0)).norm(dim=-1).numpy())
    return np.stack(source_maps), np.stack(target_maps)


def test_adapted_integrated_gradients_match_a_converged_integral_written_from_the_formula():
    model = random_model("transformer-postln")
    maps = integrated_gradients(model, SOURCE, OUTPUT)
    source, target = converged_ig(model, SOURCE, OUTPUT)
    scale = max(source.max(), target.max())
    assert np.abs(maps.source - source).max() <= 0.02 * scale
    assert np.abs(maps.target - target).max() <= 0.02 * scale
    assert maps.completeness.shape == (len(OUTPUT),) and maps.completeness.max() <= COMPLETENESS_TOLERANCE


def test_completeness_is_the_attributions_sum_against_the_log_probability_change():
    """With many nodes the error is smaller; with one node (the gradient at α = ½ times x) it is what the formula
    gives: |Σ x ⊙ ∇(x/2) − (log p(x) − log p(0))| / |log p(x) − log p(0)|."""
    model = random_model("transformer-preln")
    one = integrated_gradients(model, SOURCE, OUTPUT, steps=1)
    many = integrated_gradients(model, SOURCE, OUTPUT, steps=256)
    assert many.completeness.max() < one.completeness.max()
    assert (one.ig_steps == 1).all() and (many.ig_steps == 256).all()
    src, tgt_in = torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)])
    for step, token in enumerate(OUTPUT):
        kept, log_ps = {}, []
        for alpha in (0.0, 1.0, 0.5):
            def hook(_module, _inputs, output, name, alpha=alpha):
                kept[f"{name}_x"] = output.detach()
                kept[name] = (output.detach() * alpha).requires_grad_(True)
                return kept[name]
            hooks = [model.src_embedding.tokens.register_forward_hook(lambda m, i, o: hook(m, i, o, "s")),
                     model.tgt_embedding.tokens.register_forward_hook(lambda m, i, o: hook(m, i, o, "t"))]
            logits, _ = model(src, tgt_in)
            for handle in hooks:
                handle.remove()
            log_ps.append(torch.log_softmax(logits[0, step], -1)[token])
        grad_s, grad_t = torch.autograd.grad(log_ps[2], (kept["s"], kept["t"]))
        total = float((kept["s_x"] * grad_s).sum() + (kept["t_x"] * grad_t).sum())
        change = float((log_ps[1] - log_ps[0]).detach())
        assert one.completeness[step] == pytest.approx(abs(total - change) / abs(change), rel=1e-3, abs=1e-5)


def test_a_demo_is_complete_within_five_percent_once_adapted_where_sixteen_fixed_steps_miss():
    translator = demo("en-es-transformer-postln")
    src, out = demo_pair(translator, TEXT)
    fixed = integrated_gradients(translator.model, src, out, steps=16)
    adapted = integrated_gradients(translator.model, src, out)
    assert adapted.completeness.max() <= COMPLETENESS_TOLERANCE and adapted.incomplete == []
    assert fixed.completeness.max() > adapted.completeness.max() and fixed.incomplete
    assert adapted.ig_steps.max() > 16 and adapted.ig_steps.min() == 16  # only the steps that missed took more
    assert "within 5% at every step" in adapted.completeness_line()
    assert fixed.completeness_line(tokens=["t"] * len(out)).startswith("completeness missed at step")


@pytest.mark.parametrize("steps", [0, -3, IG_MAX_STEPS + 1, 10 ** 9])
def test_a_step_count_out_of_range_is_one_line(steps):
    with pytest.raises(ContributionError, match=rf"^integrated gradients take 1 to {IG_MAX_STEPS} steps; got"):
        check_ig_steps(steps)
