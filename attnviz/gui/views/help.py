"""Help inside the app: a one-page "What am I looking at?" and the keyboard shortcuts."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from ...state.method_definitions import definitions_html
from .style import HIGHLIGHT

EXPLANATION = f"""
<h2>What am I looking at?</h2>
<p>A sequence-to-sequence model reads a <b>source</b> sentence with its <b>encoder</b> and writes the output one
token at a time with its <b>decoder</b>. Attention is how each position decides which other positions to read
from: every row of a heatmap is one <i>query</i> position, every column a <i>key</i> position, and each row's
weights add up to 1.</p>
<h3>The three kinds</h3>
<ul>
<li><b>Encoder self-attention</b>: source tokens reading source tokens.</li>
<li><b>Decoder self-attention</b>: each decoder position reading the output so far. It may not look ahead: the
future is masked.</li>
<li><b>Cross-attention</b>: each decoder position reading the source — where the model "looks" while it writes
each output token. In GRU models this is the only attention there is.</li>
</ul>
<h3>Rows of the decoder</h3>
<p>Row <i>t</i> of a decoder heatmap is the decoder's <i>input</i> at step <i>t</i>: the first row is the start token
<code>&lt;s&gt;</code>, and it is the row that <i>predicts</i> the first output token. Tick “Rows → prediction” to label
rows as <code>&lt;s&gt; → El</code>.</p>
<h3>Marks in the token labels</h3>
<ul>
<li><code>▁</code> or <code>_</code> at the start of a token: a new word starts here (the model's
sentencepiece vocabulary splits words into pieces; a piece without it continues the word before).</li>
<li><code>&lt;s&gt;</code>: the start token, fed to the decoder before the first output token.</li>
<li><code>&lt;/s&gt;</code>: the end of the sentence; the decoder stops once it writes it.</li>
<li><code>␣</code>: a space, in a model that reads and writes single characters.</li>
<li><code>⟨…⟩</code>: characters the model's vocabulary does not have, shown as the text they stand for
(<code>⟨"⟩</code>); the model saw its unknown token there.</li>
</ul>
<p>Every label is shown in full: labels too wide for their cells are staggered or turned upright. When a long
input is zoomed out, only every few tokens are labelled; zoom in (mouse wheel) to see the rest.</p>
<h3>Masks</h3>
<p>Hatched cells are ones the model was <b>not allowed</b> to attend to: padding, and for decoder
self-attention the future. They are exactly zero — hatching keeps them from looking like “low attention”.
A red <span style='color:#c62828'>⚠</span> badge appears if a model ever puts weight on a masked cell.</p>
<h3>Layers, heads and aggregates</h3>
<p>Each layer has several <b>heads</b>, each with its own pattern (“Heads of this layer”; “All layers × heads”
shows them all). Instead of one head you can show the <b>mean</b> or the <b>max</b> over a layer's heads, or
<b>attention rollout</b>, which follows attention through the layers (with the residual connection counted as
half of it) to say which <i>input tokens</i> a position drew on. Means and rollouts spread their weight thin:
choose “map's own range” to stretch the colours over the values the map really has.</p>
<h3>Decoding</h3>
<p><b>Greedy</b> takes the likeliest token at each step. <b>Beam</b> keeps the K best partial outputs and shows
them all (the hypotheses and the beam tree); pick a hypothesis to see its own attention. <b>Forced</b> feeds
the target you type and shows how likely the model found each of its tokens. The step slider walks through the
decoding: the <span style='color:{HIGHLIGHT}'>outlined row</span> is the current step's query, the bars show that
step's cross-attention over the source, and the chart its most likely next tokens.</p>
<h3>Beyond attention weights</h3>
<p>The selector bar's <b>Show</b> box chooses what every map shows: the attention weights, or how much each input
token shaped each output by one of the methods below. The colour bar names the unit.</p>
""" + definitions_html()


def _dialog(parent: QWidget, title: str, text: str, size: tuple[int, int]) -> QDialog:
    dialog = QDialog(parent)
    dialog.setWindowTitle(title)
    browser = QTextBrowser()
    browser.setHtml(text)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(browser)
    layout.addWidget(buttons)
    dialog.resize(*size)
    return dialog


def explanation_dialog(parent: QWidget) -> QDialog:
    return _dialog(parent, "What am I looking at?", text=EXPLANATION, size=(640, 620))


def shortcuts_dialog(parent: QWidget, shortcuts: list[tuple[str, str]]) -> QDialog:
    rows = "".join(f"<tr><td><b>{html.escape(keys)}</b></td><td>{html.escape(name)}</td></tr>"
                   for name, keys in shortcuts)
    text = (f"<h3>Keyboard shortcuts</h3><table cellspacing=6>{rows}</table>"
            "<p>They work wherever the focus is, the sentence box included. Enter runs the sentence; the mouse wheel "
            "zooms the heatmap and a double-click shows all of it again.</p>")
    return _dialog(parent, "Keyboard shortcuts", text=text, size=(480, 520))
