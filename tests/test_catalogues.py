"""The catalogues that name each concept once (models/analysis/catalogue.py, models/importers/formats.py,
models/inference/modes.py): they load without torch, and what the window, the CLI and the computing registries
offer is exactly what they name."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from attnviz.cli import COMMANDS, build_parser
from attnviz.state import stats_view
from attnviz.state.contributions import show_choice
from attnviz.state.demos import demo_path, demo_reference_pairs
from models.analysis import catalogue
from models.analysis.catalogue import IMPORTANCE_METHODS, IMPORTANCE_METRICS, importance_method
from models.analysis.importance import ImportanceError
from models.analysis.importance_methods import importance_steps
from models.analysis.steps import drive
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint


def test_the_catalogues_load_without_torch():
    program = ("import sys, json\n"
               "import models.analysis.catalogue, models.importers.formats, models.inference.modes\n"
               "import attnviz.state.contributions, attnviz.state.stats_view\n"
               "from models.importers import FORMAT_NAMES\n"
               "print(json.dumps({'torch': 'torch' in sys.modules, 'formats': list(FORMAT_NAMES)}))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    assert answer["torch"] is False
    from models.importers import FORMATS  # the registry, loading every importer (and torch)

    assert answer["formats"] == list(FORMATS) and all(FORMATS[name].NAME == name for name in FORMATS)


def test_a_show_choice_is_the_catalogues_method_with_the_models_reason():
    from models.analysis.contributions import CONTRIBUTION_METHODS

    assert list(CONTRIBUTION_METHODS) == list(catalogue.CONTRIBUTION_METHODS)
    for name, method in catalogue.CONTRIBUTION_METHODS.items():
        choice = show_choice(CONTRIBUTION_METHODS[name], "a reason")
        assert choice.reason == "a reason"
        assert {field.name: getattr(choice, field.name) for field in dataclasses.fields(method)} == \
            dataclasses.asdict(method)


def _importance_options() -> dict[str, argparse.Action]:
    parser = build_parser()
    command = next(action for action in parser._subparsers._group_actions if action.choices)
    return {option: action for action in command.choices["importance"]._actions for option in action.option_strings}


def test_the_cli_and_the_panel_offer_the_catalogues_importance_methods():
    options = _importance_options()
    metrics, estimates = options["--metric"].choices, options["--method"].choices
    assert tuple(metrics) == tuple(IMPORTANCE_METRICS) and tuple(estimates) == catalogue.IMPORTANCE_ESTIMATES
    found = {importance_method(estimate, metric) for estimate in estimates for metric in metrics} - {None}
    assert {method.name for method in found} == set(IMPORTANCE_METHODS)  # every pair reaches a method, and each
    assert importance_method("gradient", "chrf") is None  # a decoded score has no gradient: the CLI refuses it
    assert importance_method(options["--method"].default, options["--metric"].default).name == "nll"
    assert stats_view.IMPORTANCE_METHODS == {name: method.label for name, method in IMPORTANCE_METHODS.items()}
    synopsis = " ".join(COMMANDS["importance"].__doc__.split("\n\n")[0].split())  # --help's literal, held equal
    assert f"--metric {'|'.join(metrics)}" in synopsis and f"--method {'|'.join(estimates)}" in synopsis


@pytest.mark.parametrize("name", list(IMPORTANCE_METHODS))
def test_the_dispatcher_computes_every_importance_method_by_its_name(name):
    checkpoint = demo_path("piglatin-gru-additive")
    translator = Translator(load_checkpoint(checkpoint), "cpu")
    importance = drive(importance_steps(translator, demo_reference_pairs(checkpoint)[:2], name, max_len=12))
    assert importance_method(importance.method, importance.metric).name == name  # what the panel says it shows
    assert set(importance.scores) == {"cross"} and importance.scores["cross"].shape == (1, 1)


def test_the_dispatcher_refuses_an_unknown_method_in_one_line():
    translator = Translator(load_checkpoint(demo_path("piglatin-gru-additive")), "cpu")
    with pytest.raises(ImportanceError, match=r"^unknown importance method 'entropy'; choose one of "
                                              r"nll, gradient, decode$"):
        importance_steps(translator, [("a", "away")], "entropy")
