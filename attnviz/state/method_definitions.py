"""What each contribution method computes, in words: one definition per method of the registry
(models/analysis/catalogue.py ``CONTRIBUTION_METHODS``), shown by Help → "What am I looking at?" and written
as the table of docs/contributions.md (a test keeps the two the same). Plain text; no Qt, no torch."""

from __future__ import annotations

import html
from dataclasses import dataclass

from models.analysis.catalogue import (
    ALTI, ALTI_LOGIT, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS, VALUE_NORMS, VALUE_ZEROING, WEIGHTS,
)


@dataclass(frozen=True)
class MethodDefinition:
    """``name``: the registry's; ``title``: its label and paper; ``attributed``: what gets a score; ``measure``:
    how the score is computed (the norm); ``baseline``: what it is compared with, and the steps; ``departures``:
    where attnviz departs from the paper's published code."""

    name: str
    title: str
    attributed: str
    measure: str
    baseline: str
    departures: str


DEFINITIONS = (
    MethodDefinition(
        WEIGHTS, "attention weights",
        attributed="each key position, per head: α_ij, the softmax weight query i puts on key j",
        measure="the weight itself; each row sums to 1",
        baseline="none: one forward pass",
        departures="none (the toolkits' own weights, bit-identical to transformers on converted models)"),
    MethodDefinition(
        VALUE_NORMS, "value-weighted norms (Kobayashi et al. 2020)",
        attributed="each key token, per head: α_ij f_h(x_j), with f_h(x) = (x W_V + b_V)_h W_O,h — the value "
                   "bias is included, the output projection's bias is not (it is no token's)",
        measure="L2 norm over the model dimension, ‖α_ij f_h(x_j)‖, in the model's units (not normalised)",
        baseline="none: read from the traced forward pass",
        departures="none for Transformer blocks; a recurrent decoder's one head is α_ij ‖v_j‖ over what its "
                   "context adds up (the annotations or their value projection), which the paper does not cover"),
    MethodDefinition(
        ALTI, "ALTI+ (Ferrando et al. 2022)",
        attributed="each input token of every attention block: the block's output y_i, biases included, is "
                   "split into T_i(x_j) = Σ_h α_ij f_h(x_j) (value bias included) plus the residual x_i — on its "
                   "own token in self-attention, the target side's own share in cross-attention; a post-LN "
                   "block's norm is linear once its input's mean and scale are fixed; the biases (output "
                   "projection, norm) are in y_i and in no token's term",
        measure="L1 closeness max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), each row normalised to sum to 1; rolled out "
                "through the model (the encoder's blocks multiply; each decoder layer mixes the target rows by "
                "self-attention and takes the source through the encoder's rollout by cross-attention, keeping "
                "the residual's share); feed-forward blocks mix no tokens",
        baseline="none: read from the traced forward pass",
        departures="a post-LN norm scales by its real factor, rsqrt(var + eps) as nn.LayerNorm computes it (RMS "
                   "or unbiased-std norms as the model computes them), where the authors' code scales by "
                   "1/std(z + eps) with the unbiased std; a row where no token's closeness is positive (0/0 in "
                   "their code) goes whole to the token of largest closeness"),
    MethodDefinition(
        VALUE_ZEROING, "value zeroing (Mohebbi et al. 2023)",
        attributed="each key token's value vector, zeroed in every head of one attention",
        measure="the cosine distance 1 − cos(y_i, y_i without x_j's value) of the whole layer's output (after "
                "its feed-forward block; in a decoder layer after self-attention, cross-attention and "
                "feed-forward), each row normalised to sum to 1",
        baseline="the layer's own output, nothing zeroed; the layer runs again from its input once per key",
        departures="a row whose every change is at rounding level (‖Δy_i‖ ≤ 8 ε ‖y_i‖, ε of the dtype) is 0 "
                   "and flagged, not rounding noise normalised into shares; the decoder's self- and "
                   "cross-attention are zeroed the same way as the paper's encoder layers"),
    MethodDefinition(
        INPUT_X_GRADIENT, "input × gradient",
        attributed="the token embeddings x as the table gives them, before the embedding scale and the "
                   "positions are added (x ⊙ ∇x is the same for the scaled vector): the source tokens and the "
                   "target prefix (the decoder's inputs)",
        measure="L2 norm over the embedding of x ⊙ ∇_x log p(y_t), for every output step t; with a contrast token "
                "y′ (Yin & Neubig 2022), of x ⊙ ∇_x (logit(y_t) − logit(y′))",
        baseline="none: one gradient at x",
        departures="each token's score is the L2 norm of its per-dimension attribution (Captum gives the vector; "
                   "Yin & Neubig sum it, x · ∇x)"),
    MethodDefinition(
        INTEGRATED_GRADIENTS, "integrated gradients (Sundararajan et al. 2017)",
        attributed="the same token embeddings as input × gradient",
        measure="L2 norm over the embedding of x ⊙ the mean gradient of log p(y_t) (with a contrast token y′: "
                "of logit(y_t) − logit(y′)) along the straight path from the baseline to x",
        baseline="the token embeddings zeroed, the positions kept; Gauss–Legendre nodes, 16 per output step, "
                 "doubled up to 128 for a step whose completeness error (the attributions' sum against "
                 "log p(x) − log p(baseline)) is over 5 % of that change (at least 1e-3 nats); --ig-steps N fixes "
                 "the count",
        departures="each token's score is the L2 norm of its per-dimension attribution; Gauss–Legendre "
                   "quadrature where the paper sums a Riemann approximation; each step's completeness error is "
                   "kept, and the steps still over 5 % are named in the window and by the command line"),
    MethodDefinition(
        ALTI_LOGIT, "ALTI-Logit (Ferrando et al. 2023)",
        attributed="the logit of each output token (with a contrast token y′: logit(y) − logit(y′)), split into "
                   "every decoder layer's and head's update of the residual stream per key token, α_ij f_h(x_j) "
                   "read through the final norm with its scale held (the authors' linearisation), and carried "
                   "to the input tokens through ALTI+'s rollout up to that layer; the embedding, the feed-forward "
                   "updates and the biases are terms of their own",
        measure="logit units, signed; every term together adds up to the logit (difference)",
        baseline="none: read from the traced forward pass (the decoder's feed-forward blocks run again)",
        departures="a post-LN model's norm after every block is linearised the same way (the authors treat "
                   "pre-LN language models); Gemma 2's logit soft-capping is left out"),
)

FIELDS = (("What is attributed", "attributed"), ("Measure", "measure"), ("Baseline and steps", "baseline"),
          ("Departs from the paper's code", "departures"))


def definitions_html() -> str:
    """The Help page's section: one paragraph per method."""
    parts = ["<h3>What each Show method computes</h3>"]
    for definition in DEFINITIONS:
        rows = "".join(f"<br><i>{html.escape(label)}</i>: {html.escape(getattr(definition, field))}"
                       for label, field in FIELDS)
        parts.append(f"<p><b>{html.escape(definition.title)}</b>{rows}</p>")
    return "\n".join(parts)


def definitions_markdown() -> str:
    """docs/contributions.md's table."""
    header = "| Method | " + " | ".join(label for label, _ in FIELDS) + " |"
    lines = [header, "|" + " --- |" * (len(FIELDS) + 1)]
    for definition in DEFINITIONS:
        cells = [f"**{definition.title}** (`{definition.name}`)"] + [getattr(definition, field) for _, field in FIELDS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
