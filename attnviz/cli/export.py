"""attnviz export -c CKPT [--beam K] [--target TEXT] TEXT -o OUT.npz|OUT.csv: the attention as data.

An .npz holds every head: src_tokens, tgt_tokens (starting with the start token fed to the decoder), and
for each attention kind {kind}_L{layer} [heads, query_len, key_len] float32 and {kind}_mask
[query_len, key_len] bool (True = may attend); also output_tokens, translation, score, and ablated: the
heads --ablate switched off, as KIND:LAYER:HEAD strings (their weights are still the ones they computed).
--contributions adds every contribution method the model can give (a GRU: value norms and the gradients):
value-weighted norms norm_{kind}_L{layer} [heads, query_len, key_len], ALTI+ blocks alti_{kind}_L{layer}
[query_len, key_len] (a cross block's share of each source token), alti_source [target_len, source_len] and
alti_target [target_len, target_len] (rolled out through the model; each row of the two together sums to 1),
source_contribution [target_len], value zeroing zeroing_{kind}_L{layer} [query_len, key_len], input x gradient
ixg_source [target_len, source_len] and ixg_target [target_len, target_len], integrated gradients ig_source,
ig_target, ig_completeness [target_len] (each output step's relative completeness error) and ig_steps
[target_len] (its step count; --ig-steps N fixes it), ALTI-Logit (the logit of each output token split into every
decoder head's update) alti_logit_{dec_self,cross}_L{layer} [heads, target_len, key_len], alti_logit_source
[target_len, source_len] and alti_logit_target [target_len, target_len] (the updates carried to the input tokens
through ALTI+), and alti_logit_logit, _embedding, _bias [target_len] and _feed_forward [layers, target_len] (the
terms no input token has; all of them add up to the logit).
--contrast TOKEN [--contrast-step N] (with --contributions): the gradient methods' and ALTI-Logit's arrays explain
logit(y) - logit(TOKEN) at every step (or step N alone) instead of the token's own score; contrast_ids
[target_len] int32 names each step's contrast token (-1: none).
--vectors adds how every head computed its weights (README, "export --vectors"): query_{kind}_L{layer} [heads,
query_len, head_dim] and key_{kind}_L{layer} [heads, key_len, head_dim] (after rotary positions, which
vectors_rotated says), where the model scales other than by 1/sqrt(head_dim) scale_{kind}_L{layer} and where it
adds a bias (T5) bias_{kind}_L{layer} [heads, query_len, key_len], where it soft-caps (Gemma 2) softcap_{kind}_L{layer};
softmax(q.k^T * scale (capped) + bias) over the keys {kind}_mask allows is {kind}_L{layer}.
An encoder-only model (BERT, RoBERTa, DistilBERT) writes enc_self alone, src_ids, masked_positions [masks], the top 5
predictions of each mask fill_ids [masks, 5] (best first), fill_tokens, fill_probs, and translation: the sentence with
each mask filled.

A decoder-only language model's .npz holds its whole sequence instead of src_tokens and tgt_tokens: token_ids
(the prompt's, then the output's), tokens, prompt_len, and dec_self_L{layer} [heads, n, n] and dec_self_mask
[n, n] over the n positions fed (every token but the last; row i predicted token i + 1); translation is the
continuation's text.

A .csv holds one heatmap, chosen with --kind, --layer and --head as in render: a header row "query \\ key"
then the key tokens, one row per query token. Tokens are the model's own (a repeated key token gets #2,
#3... so that every column name is unique).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from models.errors import InputError

from ..state.export import check_output, write_csv, write_fill_npz, write_npz
from .common import (
    ablation_for, add_contrast_options, add_decoding_options, add_ig_steps_option, add_model_options, add_output_option,
    contrast_for, decode_one, fill_one, model_shape, open_translator, prompt_source, say_if_rounded,
)
from .render import add_selection_options, check_selection, parse_head

NAME = "export"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="write the attention of one sentence to an .npz or .csv file",
                                   description=__doc__)
    add_model_options(parser)
    add_decoding_options(parser)
    parser.add_argument("--target", help="force decoding to this target text instead of searching "
                                         "(default: the model's own output)")
    add_selection_options(parser, required=False)
    parser.add_argument("--contributions", action="store_true",
                        help="also write every contribution method the model can give to the .npz")
    add_ig_steps_option(parser)
    add_contrast_options(parser)
    parser.add_argument("--vectors", action="store_true",
                        help="also write each head's query and key vectors (and scale, bias) to the .npz")
    parser.add_argument("text", help="the source sentence")
    add_output_option(parser, "the file to write: .npz (every head) or .csv (one heatmap)")


def run(args: argparse.Namespace) -> int:
    output = check_output(args.output, (".npz", ".csv"))
    if not args.contributions and (args.contrast is not None or args.contrast_step is not None):
        raise InputError("--contrast explains the contribution methods' arrays: add --contributions")
    if args.vectors and output.suffix.lower() != ".npz":
        raise InputError("--vectors writes arrays to an .npz file; a .csv holds one attention heatmap")
    if set(model_shape(args)) == {"enc_self"}:  # an encoder-only model: its masks filled, nothing decoded
        return _export_filled(args, output)
    if output.suffix.lower() == ".npz":
        translator = open_translator(args) if args.vectors else None
        if translator is not None:
            check_vectors(translator)
        result, extra = decoded_with_contributions(args, translator)
        if args.vectors:
            extra = {**(extra or {}), **vector_arrays(args, translator, output_ids=result.token_ids)}
        write_npz(output, result, extra)
        with np.load(output) as written:
            print(f"wrote {output} ({len(written.files)} arrays)", file=sys.stderr)
        return 0
    if args.contributions:
        raise InputError("--contributions writes arrays to an .npz file; a .csv holds one attention heatmap")
    head = csv_selection(args)
    write_heatmap_csv(output, decode_one(args).trace, kind=args.kind, layer=args.layer, head=head)
    return 0


def csv_selection(args: argparse.Namespace) -> int | str:
    """The one heatmap a .csv holds, as --kind, --layer and --head choose it (checked), its head parsed."""
    head = parse_head(args.head)
    if args.kind is None or head == "all":
        raise InputError("a .csv holds one heatmap: choose it with --kind KIND [--layer L] [--head H|mean|max|rollout]")
    check_selection(args, head)
    return head


def _export_filled(args: argparse.Namespace, output) -> int:
    """An encoder-only model's run (models/inference/fill_mask.py) written as the .npz (with ``masked_positions``
    and the top 5 of each mask, ``fill_ids``) or one heatmap's .csv."""
    if args.contributions and output.suffix.lower() != ".npz":
        raise InputError("--contributions writes arrays to an .npz file; a .csv holds one attention heatmap")
    head = csv_selection(args) if output.suffix.lower() == ".csv" else None
    translator = open_translator(args)
    if args.vectors:
        check_vectors(translator)
    result = fill_one(args, translator)
    if head is not None:
        write_heatmap_csv(output, result.trace, kind=args.kind, layer=args.layer, head=head)
        return 0
    extra = {**(vector_arrays(args, translator, output_ids=[]) if args.vectors else {}),
             **(filled_contributions(args, translator, result) or {})}
    write_fill_npz(output, result, extra or None)
    with np.load(output) as written:
        print(f"wrote {output} ({len(written.files)} arrays)", file=sys.stderr)
    return 0


def filled_contributions(args: argparse.Namespace, translator, result):
    """With ``--contributions``, an encoder-only run's contribution arrays (models/analysis/encoder_only.py: the
    gradients attribute each mask's most likely token), else None."""
    if not args.contributions:
        return None
    from models.analysis.gradients import check_ig_steps
    from models.analysis.methods import contribution_arrays

    if args.ablate:
        raise InputError("--contributions describes the model as it is: leave out --ablate")
    check_ig_steps(args.ig_steps)
    say_if_rounded(translator)
    return contribution_arrays(translator.model, result.source_ids, [p.best for p in result.predictions],
                               ig_steps=args.ig_steps)


def decoded_with_contributions(args: argparse.Namespace, translator=None):
    """The result to write and, with ``--contributions``, its contribution arrays (the method is checked
    against the model before anything is decoded); ``translator`` is the one ``args`` opened, if one was."""
    if not args.contributions:
        return decode_one(args, translator), None
    from models.analysis.gradients import check_ig_steps
    from models.analysis.methods import contribution_arrays

    if args.ablate:
        raise InputError("--contributions describes the model as it is: leave out --ablate")
    check_ig_steps(args.ig_steps)
    translator = translator or open_translator(args)
    say_if_rounded(translator)
    result = decode_one(args, translator)
    source_ids = prompt_source(args, translator).ids
    contrast = contrast_for(args, translator, len(result.token_ids))
    return result, contribution_arrays(translator.model, source_ids, result.token_ids, ig_steps=args.ig_steps,
                                       contrast=contrast)


def check_vectors(translator) -> None:
    """A model without query and key vectors (a GRU) refused in one line before anything runs."""
    from models.analysis.neuron import NeuronError, unavailable

    reason = unavailable(translator.model)
    if reason is not None:
        raise NeuronError(reason)


def vector_arrays(args: argparse.Namespace, translator, *, output_ids) -> dict[str, np.ndarray]:
    """The neuron view's arrays (models/trace/vectors.py ``NeuronVectors.arrays``) of the run of ``args.text`` that
    gave ``output_ids``, with the heads ``--ablate`` switched off as the run had them."""
    from models.analysis.neuron import neuron_vectors

    source_ids = prompt_source(args, translator).ids
    return neuron_vectors(translator.model, source_ids, output_ids,
                          ablation=ablation_for(args, translator)).arrays()


def write_heatmap_csv(output, trace, *, kind: str, layer: int, head: int | str) -> None:
    from ..state.session import Selection
    from ..state.viewmodel import heatmap

    state = heatmap(trace, Selection(kind=kind, layer=layer, head=head))  # no outputs: rows keep their own tokens
    write_csv(output, state.matrix, query_tokens=state.query_labels, key_tokens=unique_names(state.key_labels))
    print(f"wrote {output} ({kind} layer {layer} head {head}: {len(state.query_labels)} × "
          f"{len(state.key_labels)})", file=sys.stderr)


def unique_names(tokens: list[str]) -> list[str]:
    """``tokens`` with each repeat numbered (``the``, ``the#2``), so that each column has its own name."""
    used: set[str] = set()
    names = []
    for token in tokens:
        name, number = token, 1
        while name in used:  # also steps past a token that itself reads "the#2"
            number += 1
            name = f"{token}#{number}"
        used.add(name)
        names.append(name)
    return names
