"""Jobs of the window in the orders random use gives them, with the real window and worker on the bundled demos:
a contributions job asked for the model just replaced, model B without attention while a method is shown, export
while a result is on screen, and how many traces the window keeps after many runs."""

from __future__ import annotations

from attnviz.state.demos import demo_path
from tests.test_gui import WAIT
from tests.test_gui_compare import compare, open_demo


def test_a_contributions_job_of_the_replaced_model_never_runs_on_the_new_one(qtbot, window):
    """The run finishes after another model's open was asked for: its contributions job (a newer id than the
    open's) is stopped, not run on the new model with the old run's token ids."""
    open_demo(qtbot, window, "en-es-transformer")
    window.selector.set_show_name("value_norms")
    answers = []
    window.worker.contributions_ready.connect(answers.append)
    old_model = window.session.model_opened_by
    bar = window.input_bar
    bar.debounce.stop()
    bar.text.setText("Jesus wept.")
    window.run()
    old_run = window.session.request.id
    window.open_path(str(demo_path("piglatin-gru-transformer-decoder")))  # at once: the run is still decoding
    qtbot.waitUntil(lambda: window.session.model.path.stem == "piglatin-gru-transformer-decoder"
                    and bool(window.session.results), timeout=WAIT)
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    old = [answer for answer in answers if answer.job.request_id == old_run]
    assert old, "the finished run asked for its maps"
    assert all(answer.stopped is not None and answer.value is None for answer in old), [a.line for a in old]
    assert {answer.stopped.reason for answer in old} == {"another model was opened"}
    assert all(not answer.error for answer in answers), [answer.error for answer in answers]
    assert window.session.model_opened_by != old_model
    assert window.worker.jobs.held("model") == window.session.model_opened_by


def test_model_b_without_attention_says_what_it_lacks_while_a_method_is_shown(qtbot, window):
    """Input × gradient on the en-es demo, compared with a GRU without attention: B's pane says what B lacks,
    the worker is idle, and refreshing again raises nothing."""
    open_demo(qtbot, window, "en-es-transformer")
    window.selector.set_show_name("input_x_gradient")
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    compare(qtbot, window, "piglatin-gru-no-attention")
    view = window.compare_view
    qtbot.waitUntil(lambda: "Computing" not in view.b.title.text(), timeout=WAIT)
    said = view.b.title.text()
    assert "model B" in said and "no attention" in said, said
    window.viewing.step_selection("layer", 1)  # View → Next layer: refreshes again
    window.viewing.refresh(rebuild=True)
    assert "no attention" in view.b.title.text() and not window.contributions.computing()


def test_export_says_why_it_has_nothing_while_a_result_is_on_screen(qtbot, window, tmp_path):
    """Export's "run a sentence first" only before any run: while a new run is under way (the last one still
    on screen) or a method computes, it says so; once the map is there, it writes it."""
    open_demo(qtbot, window, "en-es-transformer")
    path, bar = tmp_path / "focus.png", window.input_bar
    bar.text.setText("Jesus wept.")
    window.run()  # the views still show the last run until this one finishes
    window.exporting.export_focus_image(str(path))
    assert "Export failed: a new run is under way; export once it has finished" in bar.result_text()
    qtbot.waitUntil(lambda: bool(window.session.results), timeout=WAIT)
    window.selector.set_show_name("value_zeroing")
    window.exporting.export_focus_image(str(path))
    assert "Export failed: nothing to export: Computing value zeroing" in bar.result_text(), bar.result_text()
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    window.exporting.export_focus_image(str(path))
    assert path.stat().st_size > 0 and window.statusBar().currentMessage() == f"Saved {path}"
