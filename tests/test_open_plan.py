"""The plan of a multi-step opening (attnviz/state/open_plan.py), without Qt: which events keep it, what each asks
for, and which end it."""

from pathlib import Path

from attnviz.state.open_plan import AWAITING_RUN, DONE, DROPPED, OPENING, OpenPlan
from attnviz.state.session import RunSettings, Selection
from attnviz.state.session_file import Look, SavedSession


def saved_session(tmp_path, *, compare: Path | None = None) -> SavedSession:
    return SavedSession(checkpoint=tmp_path / "a.safetensors", run=RunSettings(text="hola"),
                        selection=Selection(kind="encoder", layer=1, head=2, step=3), look=Look(), compare=compare)


def test_a_session_opens_its_model_then_its_partner_then_selects_once_its_run_arrives(tmp_path):
    plan = OpenPlan.for_session(saved_session(tmp_path, compare=tmp_path / "b.safetensors"))
    plan.another_model_opened(tmp_path / "a.safetensors")  # the plan's own open
    assert plan.stage == OPENING and plan.run_arrived() is None  # a run of the model before is not its run
    assert plan.model_loaded(tmp_path / "." / "a.safetensors") and plan.partner == tmp_path / "b.safetensors"
    assert plan.stage == AWAITING_RUN and plan.active
    assert plan.run_arrived() == Selection(kind="encoder", layer=1, head=2, step=3)
    assert plan.stage == DONE and not plan.active and plan.run_arrived() is None  # once


def test_a_demo_pair_is_done_once_model_a_is_in(tmp_path):
    plan = OpenPlan.for_pair(tmp_path / "a.pt", tmp_path / "b.pt")
    assert plan.model_loaded(tmp_path / "a.pt") and plan.partner == tmp_path / "b.pt"
    assert plan.stage == DONE and plan.run_arrived() is None


def test_another_model_opened_or_loaded_ends_the_plan(tmp_path):
    opened = OpenPlan.for_session(saved_session(tmp_path))
    opened.another_model_opened(tmp_path / "other.pt")
    assert opened.stage == DROPPED and not opened.model_loaded(tmp_path / "a.safetensors")
    loaded = OpenPlan.for_pair(tmp_path / "a.pt", tmp_path / "b.pt")
    assert not loaded.model_loaded(tmp_path / "other.pt") and loaded.stage == DROPPED
    waiting = OpenPlan.for_session(saved_session(tmp_path))
    assert waiting.model_loaded(tmp_path / "a.safetensors")
    waiting.another_model_opened(tmp_path / "a.safetensors")  # once A is in, even A again: its run is not the saved one
    assert waiting.stage == DROPPED and waiting.run_arrived() is None


def test_a_failed_open_ends_the_plan(tmp_path):
    plan = OpenPlan.for_session(saved_session(tmp_path, compare=tmp_path / "b.pt"))
    plan.model_failed()
    assert not plan.active and not plan.model_loaded(tmp_path / "a.safetensors") and plan.run_arrived() is None
