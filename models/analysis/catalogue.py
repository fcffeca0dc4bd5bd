"""The analysis methods, defined once for the CLI, the window, session files and the computing registries: each
contribution method and each head-importance method with its name, label, unit, the kinds it covers and what a
model needs to give it.

Imports no torch (a test imports it in a fresh interpreter): the app's plain-data modules (attnviz/state), the
views and the commands' ``--help`` read these names. The computations key off them: models/analysis/contributions.py
and gradients.py register each contribution method's computation by name (``@computes``), and
models/analysis/importance.py's ``importance_steps`` computes each importance method.
"""

from __future__ import annotations

from dataclasses import dataclass

# ------------------------------------------------------------------------------------------ contribution methods

WEIGHTS = "weights"  # attention weights: the trace itself, no computation of its own
VALUE_NORMS = "value_norms"
ALTI = "alti"
VALUE_ZEROING = "value_zeroing"
INPUT_X_GRADIENT = "input_x_gradient"
INTEGRATED_GRADIENTS = "integrated_gradients"
ALTI_LOGIT = "alti_logit"

# What a model needs to give a method (``ContributionMethod.needs``; models/analysis/contributions.py asks the model):
NEEDS_ATTENTION = "attention"  # any attention
NEEDS_TRANSFORMER = "transformer"  # Transformer blocks (a residual and a norm) throughout: the traced pass
NEEDS_VALUES = "values"  # attention whose value vectors the model exposes
NEEDS_EMBEDDINGS = "embeddings"  # token embedding tables
NEEDS_LOGITS = "logits"  # Transformer blocks throughout and a decoder whose output projection scores each token

ALL_KINDS = ("enc_self", "dec_self", "cross")


@dataclass(frozen=True)
class ContributionMethod:
    """One way of saying how much each input token shaped each output: what the window and the CLI call it,
    the unit of its colour scale, the kinds it gives maps for, whether its maps are per head, whether it
    comes from the traced forward pass alone (switching to it re-runs nothing), and what a model needs to give
    it (``needs``: one of the ``NEEDS_…`` names)."""

    name: str
    label: str
    unit: str
    kinds: tuple[str, ...]
    per_head: bool
    from_forward: bool
    needs: str
    bounded: bool = False  # its values are shares between 0 and 1
    rolls_out: bool = False  # its maps carry its own rollout through the model (``source``, ``target``)
    whole_model: bool = False  # one map per kind, of the whole model (no layer's)
    array_prefix: str = ""  # the name of its arrays in an NPZ export ("" for the weights: the trace's own arrays)
    contrastive: bool = False  # it explains logit(y) − logit(y′) given a contrast token y′ (analysis/contrast.py)
    signed: bool = False  # its values may be below 0 (logit terms): drawn on a diverging scale centred on 0


CONTRIBUTION_METHODS = {method.name: method for method in (
    ContributionMethod(WEIGHTS, "attention weights", "attention weight", kinds=ALL_KINDS, per_head=True,
                       from_forward=True, needs=NEEDS_ATTENTION, bounded=True),
    ContributionMethod(VALUE_NORMS, "value-weighted norms", "‖α·f(x)‖", kinds=ALL_KINDS, per_head=True,
                       from_forward=True, needs=NEEDS_VALUES, array_prefix="norm"),
    ContributionMethod(ALTI, "ALTI+", "share of output", kinds=ALL_KINDS, per_head=False, from_forward=True,
                       needs=NEEDS_TRANSFORMER, bounded=True, rolls_out=True, array_prefix="alti"),
    ContributionMethod(VALUE_ZEROING, "value zeroing", "share of change", kinds=ALL_KINDS, per_head=False,
                       from_forward=False, needs=NEEDS_TRANSFORMER, bounded=True, array_prefix="zeroing"),
    ContributionMethod(INPUT_X_GRADIENT, "input × gradient", "‖x ⊙ ∇ log p‖", kinds=("dec_self", "cross"),
                       per_head=False, from_forward=False, needs=NEEDS_EMBEDDINGS, whole_model=True,
                       array_prefix="ixg", contrastive=True),
    ContributionMethod(INTEGRATED_GRADIENTS, "integrated gradients", "‖x ⊙ mean ∇ log p‖",
                       kinds=("dec_self", "cross"), per_head=False, from_forward=False, needs=NEEDS_EMBEDDINGS,
                       whole_model=True, array_prefix="ig", contrastive=True),
    # Ferrando et al. 2023: each decoder head's update of the logit per key token; rolled out through ALTI+
    ContributionMethod(ALTI_LOGIT, "ALTI-Logit", "Δ logit", kinds=("dec_self", "cross"), per_head=True,
                       from_forward=True, needs=NEEDS_LOGITS, rolls_out=True, array_prefix="alti_logit",
                       contrastive=True, signed=True),
)}
CONTRIBUTION_NAMES = tuple(CONTRIBUTION_METHODS)  # in the order the Show box and ``render --show`` list them


def method_fields(method: ContributionMethod) -> dict:
    """The catalogue's fields of ``method`` (an entry of any registry built on :class:`ContributionMethod`)."""
    return {name: getattr(method, name) for name in ContributionMethod.__dataclass_fields__}


# ------------------------------------------------------------------------------------------ layer readings

LOGIT_LENS = "logit_lens"
DECODER_LENS = "decoder_lens"


@dataclass(frozen=True)
class ReadingMethod:
    """One way of reading what the model holds at each layer (not a contribution map): its name, what the window and
    the CLI call it, which stack's layers it reads (``reads``: "decoder" or "encoder"), whether a decoder-only model
    can give it, its paper, and the command that prints it. Its computation: models/analysis/lens.py
    ``COMPUTATIONS``, one per name."""

    name: str
    label: str
    reads: str
    decoder_only: bool
    paper: str
    command: str


READING_METHODS = {method.name: method for method in (
    ReadingMethod(LOGIT_LENS, "logit lens", reads="decoder", decoder_only=True,
                  paper="nostalgebraist 2020, interpreting GPT: the logit lens", command="lens"),
    ReadingMethod(DECODER_LENS, "DecoderLens", reads="encoder", decoder_only=False,
                  paper="Langedijk et al. 2023, DecoderLens: Layerwise Interpretation of Encoder-Decoder Transformers",
                  command="lens"),
)}


# ------------------------------------------------------------------------------------------ head importance

# The scores a head's importance is measured in (``--metric``): name → what the tables and the panel call it.
IMPORTANCE_METRICS = {"nll": "NLL (nats/token)", "chrf": "chrF", "exact": "exact match %"}
NLL = "nll"
# How a head's change is found (``--method``): every head switched off, or the gates' gradient.
ABLATION = "ablation"
GRADIENT = "gradient"
IMPORTANCE_ESTIMATES = (ABLATION, GRADIENT)
DECODE = "decode"  # the importance method that decodes every pair again (chrF, or exact match)


@dataclass(frozen=True)
class ImportanceMethod:
    """One way of scoring every head of a corpus: its name (the window's Method choice and session of a job), what
    the panel calls it, how each head's change is found (``estimate``, the CLI's ``--method``), the metrics it
    scores (the CLI's ``--metric``; the window scores a decoding method in the model's own,
    ``importance.metric_for``), and whether it decodes the pairs again."""

    name: str
    label: str
    estimate: str
    metrics: tuple[str, ...]
    decodes: bool = False

    @property
    def estimated(self) -> bool:
        """Its scores are first-order estimates (a gradient), not measured with the head off."""
        return self.estimate == GRADIENT


IMPORTANCE_METHODS = {method.name: method for method in (
    ImportanceMethod(NLL, "NLL, each head off", estimate=ABLATION, metrics=(NLL,)),
    ImportanceMethod(GRADIENT, "NLL, gradient estimate", estimate=GRADIENT, metrics=(NLL,)),
    ImportanceMethod(DECODE, "chrF / exact match, decoding again", estimate=ABLATION, metrics=("chrf", "exact"),
                     decodes=True),
)}
IMPORTANCE_NAMES = tuple(IMPORTANCE_METHODS)  # the Head importance panel's order; the first is its default


def importance_method(estimate: str, metric: str) -> ImportanceMethod | None:
    """The method that finds heads' changes by ``estimate`` in ``metric`` (the CLI's ``--method``, ``--metric``),
    or None where none does (a gradient of a decoded score)."""
    return next((method for method in IMPORTANCE_METHODS.values()
                 if method.estimate == estimate and metric in method.metrics), None)



# ------------------------------------------------------------------------------------------ interventions

# Methods that run the model again with its activations changed (or read their gradients) to say which parts carry
# a difference between two inputs: one entry each, what the window's tab and the CLI's subcommand call it.
PATCHING = "patching"
PATCH_LOGIT = "logit_difference"  # logit(clean token) − logit(corrupted run's token) at one step
PATCH_NLL = "nll"  # the NLL of the whole clean output
PATCH_METRICS = {PATCH_LOGIT: "logit difference (clean − corrupted token)", PATCH_NLL: "NLL of the clean output"}


@dataclass(frozen=True)
class InterventionMethod:
    """One intervention: its name, label, the CLI subcommand that runs it, the scores its tables hold (``metrics``,
    the first the default) and what a model needs to give it (``needs``)."""

    name: str
    label: str
    command: str
    metrics: tuple[str, ...]
    needs: str


INTERVENTION_METHODS = {method.name: method for method in (
    InterventionMethod(PATCHING, "activation patching, clean → corrupted", "patch", metrics=tuple(PATCH_METRICS),
                       needs=NEEDS_TRANSFORMER),
)}
