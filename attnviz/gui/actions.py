"""Every menu entry and shortcut as one table of data, built into the menus by one function; Help → Keyboard
shortcuts lists the same table.

``handler`` names what an entry calls, as a dotted path on the window ("opening.open_dialog": the Opening
feature's slot; "views.focus.reset_zoom": a view's), called with ``args``. ``name`` keeps the action in the window's
``actions`` (checked or enabled by a feature). An entry without a ``menu`` belongs to the window alone: the
presenting keys, which act only while presenting (elsewhere the bare arrow keys and Esc belong to the widgets).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

StandardKey = QKeySequence.StandardKey
SEPARATOR = "-"


@dataclass(frozen=True)
class Entry:
    menu: str  # "File", "File/Export", …: where it sits; "" for the window's own keys
    label: str  # SEPARATOR: a line; a ``submenu`` entry: the submenu's title
    handler: str = ""
    shortcut: str | StandardKey | None = None
    tip: str = ""
    args: tuple = ()
    checkable: bool = False
    enabled: bool = True
    name: str = ""
    submenu: bool = False  # an empty submenu a feature fills (Open Recent, Demos)
    existing: bool = False  # ``handler`` names an action a view already made (Reveal rows)


def entry(menu: str, label: str, handler: str = "", **details) -> Entry:
    return Entry(menu, label, handler, **details)


def separator(menu: str) -> Entry:
    return Entry(menu, SEPARATOR)


ACTIONS = (
    entry("File", "&Open…", "opening.open_dialog", shortcut=StandardKey.Open,
          tip="Open an attnviz checkpoint, or one trained with other code (converted on opening)"),
    entry("File", "Open &Folder…", "opening.open_folder_dialog",
          tip="Open a snapshot series (train --snapshots N) or a checkpoint folder (a Hugging Face Marian, BART, "
              "mBART, NLLB, Pegasus, BlenderbotSmall, FSMT or T5 model, the seq2seq tutorial's files)"),
    entry("File", "Save Model &As…", "opening.save_model_as", shortcut="Ctrl+Shift+S",
          tip="Save the open model as an attnviz checkpoint (an imported model keeps your answers)"),
    entry("File", "Open &Recent", name="recent", submenu=True),
    separator("File"),
    entry("File", "Open Sessio&n…", "sessions.open_session_dialog", shortcut="Ctrl+Shift+O",
          tip="Reopen a saved view: the model, the sentence, the decoding and the selected head"),
    entry("File", "Save Sess&ion As…", "sessions.save_session", shortcut="Ctrl+Alt+S",
          tip="Save this view (model, sentence, decoding, head, colours) as a small .attnviz file"),
    entry("File", "&Demos", name="demos", submenu=True),
    separator("File"),
    entry("File", "Compare &With", name="compare_with", submenu=True,
          tip="Open a second model beside this one (a demo, a recent file, or any checkpoint): the same sentence "
              "runs on both, one selection drives both, and B − A is shown where their tokens agree"),
    entry("File", "Stop &Comparing", "comparing.stop_comparing", tip="Back to one model", enabled=False,
          name="stop_compare"),
    entry("File", "&Force B to A's Output", "comparing.force_b_to_a", enabled=False, name="force_b",
          tip="Run again forced to model A's output: A keeps its output, B is decoded along it, and B − A is "
              "shown wherever the source tokens agree"),
    separator("File"),
    entry("File/&Export", "Heatmap as &image…", "exporting.export_focus_image", shortcut=StandardKey.Save,
          tip="The focus view as PNG (2×) or SVG"),
    entry("File/&Export", "&Copy image", "exporting.copy_focus_image", shortcut="Ctrl+Shift+C",
          tip="The focus view to the clipboard, for pasting into slides"),
    entry("File/&Export", "All &heads of this layer as image…", "exporting.export_grid_image"),
    entry("File/&Export", "&Neuron view as image…", "exporting.export_neuron_image",
          tip="The Neuron view's head and query token: q, k, q ⊙ k, the scores and the softmax"),
    entry("File/&Export", "Attention &data (NPZ)…", "exporting.export_npz"),
    entry("File/&Export", "This heatmap as &CSV…", "exporting.export_csv"),
    separator("File"),
    entry("File", "&Quit", "close", shortcut=StandardKey.Quit),
    entry("View", "Next layer", "viewing.step_selection", args=("layer", 1), shortcut="Ctrl+Down"),
    entry("View", "Previous layer", "viewing.step_selection", args=("layer", -1), shortcut="Ctrl+Up"),
    entry("View", "Next head", "viewing.step_selection", args=("head", 1), shortcut="Ctrl+Right"),
    entry("View", "Previous head", "viewing.step_selection", args=("head", -1), shortcut="Ctrl+Left"),
    entry("View", "Next step", "viewing.step_selection", args=("step", 1), shortcut="Alt+Right"),
    entry("View", "Previous step", "viewing.step_selection", args=("step", -1), shortcut="Alt+Left"),
    entry("View", "First step", "viewing.first_step", shortcut="Alt+Home"),
    entry("View", "Last step", "viewing.last_step", shortcut="Alt+End"),
    entry("View", "Next training step", "viewing.step_snapshot", args=(1,), shortcut="Ctrl+Shift+Right",
          tip="A snapshot series: the next snapshot of the training run"),
    entry("View", "Previous training step", "viewing.step_snapshot", args=(-1,), shortcut="Ctrl+Shift+Left",
          tip="A snapshot series: the previous snapshot of the training run"),
    entry("View", "Toggle masks", "views.selector.toggle_masks", shortcut="Ctrl+M"),
    entry("View", "Reveal rows", "views.selector.reveal_rows", existing=True),
    entry("View", "Reset zoom", "views.focus.reset_zoom", shortcut="Ctrl+0",
          tip="Show the whole heatmap again (or double-click it)"),
    entry("View", "&Present", "presenting.toggle", shortcut="F11", checkable=True, name="present",
          tip="Full screen, large text, the decoding beside the heatmap; ← → walk the steps, ↑ ↓ the layers, Esc ends"),
    separator("View"),
    entry("View", "&Neuron", "neuron.open",
          tip="How the selected head computes a query's weights: q, k, q ⊙ k, scale, bias and softmax"),
    entry("View", "L&ens", "lens.open",
          tip="The logit lens (what each decoder layer predicts at each step) and DecoderLens (each encoder layer)"),
    entry("View", "Pa&tching", "patching.open", name="patching",
          tip="Which positions and heads carry the difference between the source and an edited copy of it "
              "(activation patching)"),
    entry("View", "Corpus head &statistics…", "stats.open",
          tip="What every head does over a PAIRS.tsv corpus, and where each head is most and least typical"),
    entry("View", "Head &importance…", "importance.open",
          tip="How much the score on a PAIRS.tsv corpus drops when each head is switched off alone"),
    entry("View", "Reset &layout", "reset_layout", name="reset_layout",
          tip="The window's size and panels as at the first launch (the saved layout is replaced at quit)"),
    entry("View", "Model", "views.model_dock.toggleViewAction", existing=True),
    entry("View", "Decoding", "views.decoding_dock.toggleViewAction", existing=True),
    entry("Help", "&What am I looking at?", "explain", shortcut="F1",
          tip="Attention kinds, masks, aggregates, decoding steps and beams, on one page"),
    entry("Help", "&Keyboard shortcuts", "show_shortcuts"),
    entry("Help", "&About attnviz", "about"),
    entry("", "Next step while presenting", "viewing.step_selection", args=("step", 1), shortcut="Right",
          enabled=False, name="presenting"),
    entry("", "Previous step while presenting", "viewing.step_selection", args=("step", -1), shortcut="Left",
          enabled=False, name="presenting"),
    entry("", "Next layer while presenting", "viewing.step_selection", args=("layer", 1), shortcut="Down",
          enabled=False, name="presenting"),
    entry("", "Previous layer while presenting", "viewing.step_selection", args=("layer", -1), shortcut="Up",
          enabled=False, name="presenting"),
    entry("", "End presenting", "presenting.set_presenting", args=(False,), shortcut="Escape", enabled=False,
          name="presenting"),
)


def handler(window: QMainWindow, item: Entry):
    return operator.attrgetter(item.handler)(window)


def make_action(parent, text: str, slot, *, shortcut=None, tip: str = "") -> QAction:
    action = QAction(text, parent)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    action.setToolTip(tip or text)
    action.setStatusTip(tip)
    action.triggered.connect(slot)
    return action


def _action(window: QMainWindow, item: Entry) -> QAction:
    if item.existing:
        found = handler(window, item)
        return found() if callable(found) else found
    slot, args = handler(window, item), item.args
    action = make_action(window, item.label, lambda *_: slot(*args), shortcut=item.shortcut, tip=item.tip)
    action.setCheckable(item.checkable)
    action.setEnabled(item.enabled)
    return action


def build_menus(window: QMainWindow, table: tuple[Entry, ...] = ACTIONS) -> dict[str, object]:
    """The menu bar from ``table``; returns the named entries: an action, a submenu, or (for a name that several
    entries share) the list of their actions."""
    menus: dict[str, QMenu] = {}
    named: dict[str, object] = {}

    def menu_for(path: str) -> QMenu:
        if path not in menus:
            parent, _, title = path.rpartition("/")
            menus[path] = menu_for(parent).addMenu(title) if parent else window.menuBar().addMenu(f"&{title}")
        return menus[path]

    for item in table:
        if item.label == SEPARATOR:
            menu_for(item.menu).addSeparator()
            continue
        made = menu_for(item.menu).addMenu(item.label) if item.submenu else _action(window, item)
        if not item.menu:
            made.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            window.addAction(made)
        elif not item.submenu:
            menu_for(item.menu).addAction(made)
        if item.name and not item.menu:
            named.setdefault(item.name, []).append(made)
        elif item.name:
            named[item.name] = made
    return named


def shortcut_list(table: tuple[Entry, ...] = ACTIONS) -> list[tuple[str, str]]:
    """(what it does, its keys) for every entry with a shortcut, in the table's order."""
    native = QKeySequence.SequenceFormat.NativeText
    keys = [(item.label.replace("&", ""), QKeySequence(item.shortcut)) for item in table if item.shortcut is not None]
    return [(label, key.toString(native)) for label, key in keys if not key.isEmpty()]  # a platform may have none


def window_keys(table: tuple[Entry, ...] = ACTIONS) -> set[str]:
    """The View menu's keys: the window's navigation, which wins over a line edit's own use of them."""
    return {QKeySequence(item.shortcut).toString() for item in table if item.menu == "View" and item.shortcut}
