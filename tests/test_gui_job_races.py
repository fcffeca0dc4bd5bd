"""Jobs of the window in the orders random use gives them, with the real window and worker on the bundled demos:
a contributions job asked for the model just replaced, model B without attention while a method is shown, export
while a result is on screen, and how many traces the window keeps after many runs."""

from __future__ import annotations

import gc
import weakref

from attnviz.state.demos import demo_path
from tests.test_gui import WAIT, run_text
from tests.test_gui_compare import compare, open_demo


def test_a_contributions_job_of_the_replaced_model_never_runs_on_the_new_one(qtbot, window):
    """The run finishes after another model's open was asked for: its contributions job (a newer id than the
    open's) is stopped, not run on the new model with the old run's token ids."""
    open_demo(qtbot, window, "en-es-transformer")
    window.views.selector.set_show_name("value_norms")
    answers = []
    window.worker.contributions_ready.connect(answers.append)
    old_model = window.session.model_opened_by
    bar = window.views.input_bar
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
    window.views.selector.set_show_name("input_x_gradient")
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    compare(qtbot, window, "piglatin-gru-no-attention")
    view = window.views.compare_view
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
    path, bar = tmp_path / "focus.png", window.views.input_bar
    bar.text.setText("Jesus wept.")
    window.run()  # the views still show the last run until this one finishes
    window.exporting.export_focus_image(str(path))
    assert "Export failed: a new run is under way; export once it has finished" in bar.result_text()
    qtbot.waitUntil(lambda: bool(window.session.results), timeout=WAIT)
    window.views.selector.set_show_name("value_zeroing")
    window.exporting.export_focus_image(str(path))
    assert "Export failed: nothing to export: Computing value zeroing" in bar.result_text(), bar.result_text()
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    window.exporting.export_focus_image(str(path))
    assert path.stat().st_size > 0 and window.statusBar().currentMessage() == f"Saved {path}"


def test_the_window_keeps_the_newest_runs_results_and_traced_passes_only(qtbot, window):
    """After runs with a method shown, beams, heads switched off, comparing and stopping: every result, trace and
    traced pass (a pass holds logits [T, vocab], each block's tensors and its model) of an older run or of the
    model B let go is freed; what stays is what the window shows."""
    open_demo(qtbot, window, "en-es-transformer")
    window.views.selector.set_show_name("value_norms")
    results, passes = [], []
    worker = window.worker
    worker.finished.connect(lambda _job, answer: results.extend(weakref.ref(result) for result in answer))
    worker.partner_finished.connect(lambda _job, answer: results.append(weakref.ref(answer)))
    worker.original.connect(lambda _job, answer: results.append(weakref.ref(answer)))

    def shown_everywhere():
        qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
        passes.extend((key, weakref.ref(kept)) for key, kept in worker.captured.items())

    for text in ("Jesus wept.", "And God said, let there be light.", "In the beginning was the word."):
        run_text(qtbot, window, text, mode="beam", beam=4, max_len=20)
        for hypothesis in range(len(window.session.results)):
            window.viewing.choose_hypothesis(hypothesis)
            shown_everywhere()
    window.ablation.toggle_head(0, 0)  # runs again, and with every head on
    qtbot.waitUntil(lambda: window.session.original is not None, timeout=WAIT)
    shown_everywhere()
    compare(qtbot, window, "en-es-transformer")
    # model B's own pass is made once B has run and its contributions were asked for
    qtbot.waitUntil(lambda: worker.partner is not None
                    and any(key[0] == id(worker.partner.model) for key in list(worker.captured)), timeout=WAIT)
    shown_everywhere()
    window.comparing.stop_comparing()
    run_text(qtbot, window, "Blessed are the meek.", mode="greedy", max_len=20)
    shown_everywhere()
    gc.collect()
    session = window.session
    newest = session.request.id
    kept = {id(result) for result in session.results} | {id(session.original)}
    assert {id(ref()) for ref in results if ref() is not None} <= kept
    alive = [key for key, ref in passes if ref() is not None]
    assert alive and all(key[1] == newest for key in alive), alive
    assert worker.partner is None and all(key[0] == id(worker.translator.model) for key in worker.captured)


def test_model_b_opened_while_the_input_is_empty_says_it_has_not_run(qtbot, window):
    """Model B opens and the window runs the input on both; an empty input runs nothing, so B's pane says what
    to do instead of "model B is running…" with the worker idle."""
    open_demo(qtbot, window, "piglatin-gru-additive")
    window.views.input_bar.text.setText("   ")
    window.comparing.compare_with(str(demo_path("piglatin-gru-scaled-dot")))
    qtbot.waitUntil(lambda: window.session.partner is not None, timeout=WAIT)
    window.viewing.step_selection("head", 1)
    assert window.views.compare_view.b.title.text() == "model B has not run this sentence: press Enter to run both"
    window.views.input_bar.text.setText("team")
    window.run()
    qtbot.waitUntil(lambda: window.session.partner_result is not None, timeout=WAIT)
    assert window.views.compare_view.b.title.text().startswith("<b>B</b>")


def test_model_bs_contributions_job_never_runs_on_the_next_model_b(qtbot, window):
    """While comparing, the run finishes after another model B was asked for: B's contributions job of that run
    (a newer id than the new B's open) stops instead of running on the new B with the old B's token ids."""
    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-scaled-dot")
    window.views.selector.set_show_name("value_norms")
    answers = []
    window.worker.contributions_ready.connect(answers.append)
    window.views.input_bar.text.setText("string")
    window.run()
    old_run = window.session.request.id
    window.comparing.compare_with(str(demo_path("piglatin-gru-transformer-decoder")))  # at once
    qtbot.waitUntil(lambda: window.session.partner.path.stem == "piglatin-gru-transformer-decoder"
                    and window.session.partner_result is not None, timeout=WAIT)
    qtbot.waitUntil(lambda: not window.contributions.computing(), timeout=WAIT)
    old = [answer for answer in answers if answer.job.request_id == old_run and answer.job.partner]
    assert old, "the finished run asked for model B's maps"
    assert all(answer.stopped is not None and answer.value is None for answer in old), [a.line for a in old]
    assert all(not answer.error for answer in answers), [answer.error for answer in answers]
