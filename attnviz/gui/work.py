"""What the window's jobs compute, as functions of a ``Translator`` (no Qt): a model's description and Show choices,
a run's labels, the corpus jobs' generators of units, and the one way a job's failure becomes a line in the window.
The worker (worker.py) runs them on its thread."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from models.errors import AttnvizError
from models.inference.batch_sizes import Batching
from models.inference.translator import SourceInput, Translator, use_idle_cores
from models.storage.checkpoint import describe_checkpoint, weights_name

from ..state.contributions import ShowChoice, show_choice
from ..state.session import ModelInfo, RunLabels

# Padded tokens one NLL importance pass holds in the window: a pass is a unit, so this bounds how long a
# sentence run asked for meanwhile waits (on the en-es demo 4,096 also beat one pass of every head: 2.4 s, not 3.3 s).
IMPORTANCE_PASS_TOKENS = 4_096
# How the corpus jobs that decode again (chrF / exact importance, their pruning curves) cut the pairs: one batch
# is a unit, so a run asked for meanwhile waits for one batch, not a whole corpus (models/inference/corpus.py).
CORPUS_BATCHING = Batching()

CLI_DTYPE_HINT = "try --dtype bfloat16"  # load_checkpoint's memory refusal speaks to the CLI; the window has a combo
WINDOW_DTYPE_HINT = "choose Weights: bfloat16 in the Model panel"


def in_window_words(failure: AttnvizError) -> str:
    """The line a loading error shows in the window: the CLI's ``--dtype`` hint becomes the Model panel's combo."""
    return str(failure).replace(CLI_DTYPE_HINT, WINDOW_DTYPE_HINT)


@contextlib.contextmanager
def reporting_errors(say: Callable[[str], None], *, unexpected: str = "internal error") -> Iterator[None]:
    """The one way a job on this thread fails: an error of the block becomes the one line ``say`` is given, and
    the thread goes on to the next job. An :class:`AttnvizError` (something the user can fix) is its own line in
    the window's words; anything else is a bug or an odd file: ``unexpected`` (what was being done), its type and
    message, with the traceback on stderr for a bug report."""
    try:
        yield
    except AttnvizError as failure:
        say(in_window_words(failure))
    except Exception as failure:  # noqa: BLE001 (said in the window, never a dead thread)
        traceback.print_exc()
        say(f"{unexpected}: {type(failure).__name__}: {failure}")


def corpus_pairs(corpus: str | list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (source, target) pairs of a corpus job: read from a PAIRS.tsv path, or given (a demo's own)."""
    from models.text.pairs import read_pairs

    return read_pairs(corpus) if isinstance(corpus, str) else list(corpus)


def importance_steps(translator: Translator, pairs: list[tuple[str, str]], method: str):
    """Head importance by ``method`` (a name of models/analysis/catalogue.py ``IMPORTANCE_METHODS``) as a long job's
    generator, through the dispatcher ``attnviz importance`` uses too; the NLL's passes hold
    ``IMPORTANCE_PASS_TOKENS``, a decoding method scores in the model's own metric, one ``CORPUS_BATCHING`` batch
    a unit."""
    from models.analysis.importance_methods import importance_steps as steps

    return steps(translator, pairs, method, tokens_per_pass=IMPORTANCE_PASS_TOKENS, batching=CORPUS_BATCHING)


def prune_steps(translator: Translator, pairs: list[tuple[str, str]], importance, *, seed: int):
    """The pruning curves of ``importance``'s ranking as a long job's generator: one teacher-forced pass per unit
    (the NLL, passes as short as the importance job's) or one ``CORPUS_BATCHING`` batch decoded again at a point
    (chrF / exact)."""
    from models.analysis.pruning import prune_curve_steps

    return prune_curve_steps(translator, pairs, importance, seed=seed, tokens_per_pass=IMPORTANCE_PASS_TOKENS,
                             batching=CORPUS_BATCHING)


def show_choices(translator: Translator) -> tuple[ShowChoice, ...]:
    """Every contributions method as the model offers it, with the line saying why not where it cannot."""
    from models.analysis.contributions import CONTRIBUTION_METHODS

    return tuple(show_choice(method, method.unavailable(translator.model) or "")
                 for method in CONTRIBUTION_METHODS.values())


def describe(translator: Translator, path: Path) -> ModelInfo:
    summary = describe_checkpoint(translator.checkpoint)

    def tokenizer(side: dict) -> str:
        characters = f": {side['characters']}" if "characters" in side else ""
        languages = f", {len(side['languages'])} languages" if "languages" in side else ""
        return f"{side['kind']}, {side['vocab_size']} tokens{characters}{languages}"

    return ModelInfo(
        path=path, arch=summary["arch"], parameters=summary["parameters"], kinds=tuple(summary["attention_kinds"]),
        config=summary["config"], provenance=dict(summary["provenance"]),
        source_tokenizer=tokenizer(summary["source_tokenizer"]),
        target_tokenizer=tokenizer(summary["target_tokenizer"]),
        device=str(translator.device), max_len=translator.config.max_len, languages=tuple(translator.languages),
        src_lang=translator.source_tokenizer.language or "", tgt_lang=translator.target_tokenizer.language or "",
        weights=weights_name(translator.model), show_choices=show_choices(translator),
        chat=translator.has_chat, mask_token=mask_token(translator), **decoder_only_shape(translator.model))


def decoder_only_shape(model) -> dict[str, tuple[int, ...]]:
    """A decoder-only model's key/value groups and sliding windows as plain data (nothing for other models)."""
    if not hasattr(model, "kv_groups"):
        return {}
    return {"kv_groups": tuple(int(group) for group in model.kv_groups()),
            "windows": tuple(int(window) for window in model.sliding_windows())}


def mask_token(translator: Translator) -> str:
    """The token that marks a position to fill, as typed (an encoder-only model's with its masked-language-model
    head; "" for the others)."""
    mask_id, model = getattr(translator.config, "mask_id", -1), translator.model
    fills = not model.decodes and getattr(model, "has_predictions", False)
    return translator.source_tokenizer.token(mask_id) if mask_id >= 0 and fills else ""


def run_labels(translator: Translator, source: SourceInput) -> RunLabels:
    """The labels a run's trace gives the source tokens and the start token, so that its steps can be drawn
    before it finishes."""
    start = translator.target_tokenizer.token(translator.config.bos_id)
    return RunLabels(tuple(translator.source_labels(source)), start)


def neuron_vectors(translator: Translator, job) -> object:
    """A ``NeuronJob``'s query and key vectors (models/analysis/neuron.py) of the run's result, in its languages and
    with its heads switched off."""
    from models.analysis.neuron import neuron_vectors as vectors

    translator.set_languages(job.src_lang or None, job.tgt_lang or None)
    return vectors(translator.model, prompt_source(translator, job).ids, list(job.output), ablation=job.ablation)


HALF_PRECISION_ABOVE = 384 * 2**20  # bytes of float32 attention one run may keep; longer runs keep float16


def trace_dtype(translator: Translator, request, *, source: SourceInput,
                target_ids: list[int] | None) -> tuple[type, int]:
    """float32, or float16 for a run whose attention would take more than :data:`HALF_PRECISION_ABOVE` at full
    precision (long inputs: docs/ARCHITECTURE.md#memory), refused where even so it would not fit; the float32 size."""
    run = request.settings
    size = translator.trace_size(source, mode=run.mode, beam=run.beam, target_ids=target_ids, max_len=run.max_len)
    dtype = np.float16 if size > HALF_PRECISION_ABOVE else np.float32
    translator.check_room_for(size, dtype=dtype)  # one line rather than a process killed part way
    return dtype, size


def patch_report(translator: Translator, job) -> object:
    """A ``PatchJob``'s patching (models/analysis/patching.py) as the ``PatchReport`` the pane draws."""
    from models.analysis.catalogue import PATCH_LOGIT, PATCH_NLL
    from models.analysis.patching import patch_sources

    from ..state.patch_view import report_for

    translator.set_languages(job.src_lang or None, job.tgt_lang or None)
    clean, corrupt = translator.source(job.clean), translator.source(job.corrupt)
    run = patch_sources(translator, clean, corrupt, step=job.step, metric=PATCH_NLL if job.nll else PATCH_LOGIT)
    return report_for(translator, run, clean=clean, corrupt=corrupt)


def prompt_source(translator: Translator, run) -> SourceInput:
    """The run's text encoded: laid out by the model's chat template when the run asks for it and the model has one
    (a partner model without one reads the text as it is). ``run``: the run's settings, or a job of one of its
    results (its ``text`` and ``chat``): the one way each job reads the prompt the run ran on."""
    return translator.chat_source(run.text) if run.chat and translator.has_chat else translator.source(run.text)


def fill_run(translator: Translator, source: SourceInput, ablation, *, partner: Translator | None = None,
             text: str = "") -> list[tuple[str, object]]:
    """An encoder-only model's run (models/inference/fill_mask.py) as what the worker's signals send, in order:
    ("notice", why nothing was filled) if nothing was, ("original", the same input with every head on) when
    ``ablation`` switches heads off, ("partner_finished", model B's fill of ``text`` or the line saying why not)
    while comparing, and ("finished", [its result])."""
    from models.inference.fill_mask import fill_masks

    fill = fill_masks(translator, source, ablation=ablation)
    answers: list[tuple[str, object]] = [("notice", f"{fill.note[:1].upper()}{fill.note[1:]}.")] if fill.note else []
    if ablation:
        answers.append(("original", fill_result(fill_masks(translator, source))))
    if partner is not None:
        lines: list[str] = []
        with reporting_errors(lines.append):  # model A's fill stands
            if partner.model.decodes:
                raise AttnvizError("model B decodes and model A fills masks: compare two encoder-only models")
            answers.append(("partner_finished", fill_result(fill_masks(partner, partner.source(text)))))
        answers.extend(("partner_finished", line) for line in lines)
    return [*answers, ("finished", [fill_result(fill)])]


def fill_result(fill) -> object:
    """A ``FillResult`` as the ``DecodeResult`` the session and views read: its text the filled sentence, its
    ``token_ids`` and tokens each mask's most likely token (what the contributions of a mask's prediction
    attribute), ``steps[m]`` mask m's top-k (the decoding panel's chart, one step per masked position, its ``step``
    that position), ``prompt_ids`` the sentence as encoded."""
    import numpy as np

    from models.trace.records import DecodeResult, DecodeStep

    steps = [DecodeStep(step=p.position, token_ids=np.array([p.best]), tokens=[p.top_tokens[0]],
                        probabilities=np.array([p.top_probs[0]]), ranks=np.array([0]),
                        top_ids=np.array([p.top_ids]), top_tokens=[list(p.top_tokens)],
                        top_probs=np.array([p.top_probs]), parents=np.array([0]), scores=np.array([0.0]),
                        finished=np.array([True]), attention={}, masks={})
             for p in fill.predictions]
    log_prob = float(sum(np.log(p.top_probs[0]) for p in fill.predictions))
    best = [p.top_tokens[0] for p in fill.predictions]
    return DecodeResult(token_ids=[p.best for p in fill.predictions], tokens=best,
                        text=fill.text, log_prob=log_prob, score=log_prob, trace=fill.trace, steps=steps,
                        rows=[0] * len(steps), prompt_ids=list(fill.source_ids))


def leave_a_core_for_the_gui() -> None:
    """torch on all cores starves the GUI thread on small machines (docs/ARCHITECTURE.md#threading), and on
    cores other work keeps busy it waits for its own threads."""
    use_idle_cores(keep_free=1)


def lens_readings(translator: Translator, job, captured_pass) -> object:
    """A ``LensJob``'s logit lens and DecoderLens (models/analysis/lens.py) of the run's result, in its languages and
    with its heads switched off, from its traced pass (``captured_pass``: the worker's kept one) as plain data."""
    from models.analysis import catalogue
    from models.analysis.lens import check_lens, decoder_lens, logit_lens, unavailable

    from ..state.lens_view import EncoderRow, LensReadings

    model, tokenizer = translator.model, translator.target_tokenizer
    check_lens(model)
    translator.set_languages(job.src_lang or None, job.tgt_lang or None)
    src_ids = prompt_source(translator, job).ids
    output = list(job.output)
    captured = captured_pass(translator, (job.request_id, job.hypothesis, job.ablation), src_ids=src_ids,
                             output_ids=output)
    lens = logit_lens(model, src_ids, output, captured=captured)
    note = unavailable(model, catalogue.DECODER_LENS) or ""
    encoder = () if note else tuple(
        EncoderRow(reading.layer, tokenizer.decode(list(reading.token_ids)), reading.nll)
        for reading in decoder_lens(model, src_ids, output, captured=captured, first=tokenizer.first_tokens()))
    label = tokenizer.token
    return LensReadings(tokens=tuple(label(int(token)) for token in lens.token_ids), probs=lens.probs,
                        ranks=lens.ranks, top_probs=lens.top_probs, vocab_size=int(captured.logits.shape[-1]),
                        top_tokens=tuple(tuple(tuple(label(int(token)) for token in step) for step in layer)
                                         for layer in lens.top_ids), encoder=encoder, encoder_note=note)


# Traced passes kept for switching among the forward methods: the newest run's hypotheses only (a pass holds the
# logits [T, vocab], every block's tensors and its model: tens of MB for a long input; one of a long prompt, alone),
# and an older run's pass explains nothing a job can still ask for.
CAPTURED_KEPT = 8


def kept_pass(kept: dict, translator: Translator, result: tuple, *, src_ids, output_ids):
    """The traced pass of one result (request id, hypothesis, the heads it ran with switched off), from ``kept``
    (the worker's: model, result → pass) or made and kept there: switching among the methods that read it re-runs
    nothing."""
    from models.analysis.contributions import capture_forward

    key = (id(translator.model), *result)
    if key not in kept:
        long = translator.checked_pass_size(src_ids, output_ids) > HALF_PRECISION_ABOVE  # a long one alone
        while len(kept) >= (1 if long else CAPTURED_KEPT):
            kept.pop(next(iter(kept)))
        kept[key] = capture_forward(translator.model, src_ids, list(output_ids), ablation=result[2])
    return kept[key]


def coverage_steps(translator: Translator, job, captured_pass):
    """A coverage job (a ``ContributionJob`` of ALTI+ with ``coverage``) as a long job's generator: for each of its
    hypotheses the traced pass (``captured_pass``: the worker's kept one) is one unit, then ALTI+ one unit per run
    of queries of each block (models/analysis/alti.py ``alti_maps_steps``), so that a newer run overtakes it within
    one unit. Each unit yields (the hypothesis under way, the answer of the one just complete or None); the last
    hypothesis' answer is the return value."""
    from models.analysis import catalogue
    from models.analysis.alti import alti_maps_steps
    from models.analysis.contributions import CONTRIBUTION_METHODS, ContributionMaps, source_coverage

    from ..state.contributions import ContributionAnswer

    CONTRIBUTION_METHODS[catalogue.ALTI].check(translator.model)
    answer = None
    for hypothesis, output_ids in zip(job.hypotheses, job.outputs):
        if answer is not None:
            yield hypothesis, answer
        translator.set_languages(job.src_lang or None, job.tgt_lang or None)
        captured = captured_pass(translator, (job.request_id, hypothesis, job.ablation),
                                 src_ids=prompt_source(translator, job).ids, output_ids=output_ids)
        yield hypothesis, None
        units = alti_maps_steps(captured)
        while True:
            try:
                next(units)
            except StopIteration as end:
                maps = ContributionMaps(catalogue.ALTI, per_head=False, **end.value)
                break
            yield hypothesis, None
        answer = ContributionAnswer(job, maps, hypothesis=hypothesis, coverage=source_coverage(maps))
    return answer


class CoverageAnswers:
    """Where a coverage long job's units and end go: each hypothesis' :class:`ContributionAnswer` to ``emit``
    once complete; the job's error or stop (an :class:`~attnviz.state.jobs.Answer`) as the answer of the
    hypothesis under way."""

    def __init__(self, job, emit: Callable[[object], None]):
        self.job, self.emit, self.hypothesis = job, emit, job.hypotheses[0]

    def report(self, _job_id: int, hypothesis: int, complete) -> None:
        self.hypothesis = hypothesis
        if complete is not None:
            self.emit(complete)

    def answer(self, end) -> None:
        from ..state.contributions import ContributionAnswer

        if end.value is not None:
            self.emit(end.value)
        else:
            self.emit(ContributionAnswer(self.job, hypothesis=self.hypothesis, error=end.error, stopped=end.stopped))
