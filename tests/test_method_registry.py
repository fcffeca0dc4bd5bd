"""The contribution methods' registry walked (models/analysis/contributions.py ``CONTRIBUTION_METHODS``): every
method computes through its own entry on a demo, has a label and a unit, is offered by the window's Show box and
named by the command line, and a model that cannot give it is refused in one line, the same line everywhere."""

from __future__ import annotations

import pytest

from attnviz.cli import render
from attnviz.gui.work import show_choices
from attnviz.state.demos import demo_path
from attnviz.state.method_definitions import DEFINITIONS
from models.analysis.contributions import CONTRIBUTION_METHODS, ContributionError, ContributionMaps
from models.analysis.methods import contributions
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint

METHODS = [name for name in CONTRIBUTION_METHODS if name != "weights"]  # the weights are the trace itself


@pytest.fixture(scope="module")
def translators():
    return {name: Translator(load_checkpoint(demo_path(name)), "cpu")
            for name in ("en-es-transformer", "piglatin-gru-additive", "piglatin-gru-no-attention")}


def ids_of(translator: Translator, text: str) -> tuple[list[int], list[int]]:
    return translator.source(text).ids, translator.translate(text, max_len=12).token_ids


@pytest.mark.parametrize("name", METHODS)
def test_every_method_computes_through_its_entry_and_is_offered_where_it_applies(translators, name):
    method = CONTRIBUTION_METHODS[name]
    assert method.compute is not None and method.label and method.unit
    assert name in {definition.name for definition in DEFINITIONS}  # Help and docs/contributions.md say what it is
    assert name in " ".join(render.__doc__.split())  # `attnviz render --show` names it
    for demo, translator in translators.items():
        offered = {choice.name: choice.reason for choice in show_choices(translator)}
        reason = method.unavailable(translator.model)
        assert offered[name] == (reason or "")  # the window's Show box says the registry's own line
        src, out = ids_of(translator, "the lord is my shepherd" if "piglatin" in demo else "The Lord is my shepherd.")
        if reason is None:
            maps = contributions(name, translator.model, src, out, ig_steps=4)
            assert isinstance(maps, ContributionMaps) and maps.method == name
            assert set(maps.layers) <= set(method.kinds)
        else:
            assert "\n" not in reason and translator.model.config.arch in reason
            with pytest.raises(ContributionError) as refused:
                contributions(name, translator.model, src, out)
            assert str(refused.value) == reason


def test_the_transformer_demo_gives_every_method_and_an_unknown_name_is_one_line(translators):
    translator = translators["en-es-transformer"]
    assert all(CONTRIBUTION_METHODS[name].applies(translator.model) for name in METHODS)
    src, out = ids_of(translator, "The Lord is my shepherd.")
    with pytest.raises(ContributionError, match=r"unknown contribution method 'attention'; choose one of "
                                                r"value_norms, alti, value_zeroing, input_x_gradient, "
                                                r"integrated_gradients, alti_logit$"):
        contributions("attention", translator.model, src, out)
