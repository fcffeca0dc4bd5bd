"""attnviz lens -c CKPT TEXT [--target T] [--beam K] [--top K] [--json]: what the model knew at each layer.

The logit lens (nostalgebraist 2020): every decoder layer's residual stream put through the model's own output head
(final norm, output projection, logit scale or soft-cap); per output step and layer boundary (0: the embeddings,
the last: the model's own output), the chosen token's probability and rank (0 = the most likely) and the top K
tokens. DecoderLens (Langedijk et al. 2023): the decoder reads each encoder layer's output (through the encoder's
final norm where the model has one) instead of the last; per encoder layer boundary, its greedy output and the
NLL (nats) of the model's own output given it. The output is the greedy one, the beam's --hypothesis N with
--beam K, or --target forced. A decoder-only model's TEXT is its prompt (--chat: laid out by its chat template):
the lens covers the continuation, and DecoderLens does not apply (it has no encoder); a recurrent (GRU) model has no
layers to read.

--json prints one document: `tokens` (the output), `decoder` per step a list per layer boundary of
{layer, p, rank, top: [[token, p], ...]}, `encoder` per encoder boundary {layer, output, nll} (null for a
decoder-only model).
"""

from __future__ import annotations

import argparse
import json

from models.errors import InputError

from .common import (
    add_beam_option, add_model_options, announce_truncation, announce_unknown, argument_text, int_range,
    open_translator, prompt_source, terminal_text, unknown_mode,
)

NAME = "lens"
MAX_TOP = 100


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="the logit lens and DecoderLens: what each layer already predicts",
                                   description=__doc__)
    add_model_options(parser)
    add_beam_option(parser)
    parser.add_argument("--hypothesis", type=int_range(1), default=1, metavar="N",
                        help="with --beam: the beam's N-th final hypothesis (default 1, the best)")
    parser.add_argument("--target", help="force decoding to this target text instead of searching (default: search)")
    parser.add_argument("--top", type=int_range(1, MAX_TOP), default=5, metavar="K",
                        help=f"tokens listed per layer and step (default 5; at most {MAX_TOP})")
    parser.add_argument("--step", type=int_range(1), metavar="N", help="only output step N (default: every step)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("text", help="the sentence (a decoder-only model's prompt)")


def run(args: argparse.Namespace) -> int:
    text = argument_text(args.text, "the text")
    translator = open_translator(args)
    from models.analysis import catalogue
    from models.analysis.contributions import capture_forward
    from models.analysis.lens import check_lens, decoder_lens, logit_lens, unavailable
    from models.inference.decoding import finish
    from models.inference.modes import decoding_mode

    model = translator.model
    check_lens(model)
    if args.hypothesis > args.beam:
        raise InputError(f"--hypothesis {args.hypothesis} is beyond the beam's {args.beam} hypotheses")
    source = prompt_source(args, translator, text)
    announce_unknown(source, "the text")
    announce_truncation(source, "the text", translator.config.max_len)
    target = translator.target(args.target, unknown=unknown_mode(args)) if args.target is not None else None
    results = finish(translator.decode(source, mode=decoding_mode(args.beam, target is not None), beam=args.beam,
                                       target_ids=target, need_weights=False))
    if args.hypothesis > len(results):
        raise InputError(f"--hypothesis {args.hypothesis} is beyond the {len(results)} hypotheses the beam kept")
    result = results[args.hypothesis - 1]
    src_ids = result.prompt_ids if result.prompt_ids is not None else source.ids
    captured = capture_forward(model, src_ids, result.token_ids)
    lens = logit_lens(model, src_ids, result.token_ids, captured=captured, top_k=args.top)
    steps = range(lens.steps)
    if args.step is not None:
        lens.check_step(args.step - 1)
        steps = [args.step - 1]
    readings = None
    if unavailable(model, catalogue.DECODER_LENS) is None:
        readings = decoder_lens(model, src_ids, result.token_ids, captured=captured,
                                first=translator.target_tokenizer.first_tokens())
    label, detokenise = translator.target_tokenizer.token, translator.target_tokenizer.decode
    if args.json:
        print(json.dumps(lens_document(lens, readings, steps, label=label, text=detokenise)))
    else:
        print(terminal_text(f"output: {result.text}"))
        _print_lens(lens, steps, label)
        if readings is None:
            print(unavailable(model, catalogue.DECODER_LENS))
        else:
            _print_readings(readings, detokenise)
    return 0


def lens_document(lens, readings, steps, *, label, text) -> dict:
    """The JSON document (see the module's help) of the steps ``steps``."""
    document = {"tokens": [label(int(token)) for token in lens.token_ids], "steps": [step + 1 for step in steps],
                "decoder": [[{"layer": layer, "p": float(lens.probs[layer, step]), "rank": int(lens.ranks[layer, step]),
                              "top": [[label(int(token)), float(p)]
                                      for token, p in zip(lens.top_ids[layer, step], lens.top_probs[layer, step])]}
                             for layer in range(lens.layers)] for step in steps]}
    document["encoder"] = None if readings is None else [
        {"layer": reading.layer, "output": text(list(reading.token_ids)), "nll": reading.nll} for reading in readings]
    return document


def _print_lens(lens, steps, label) -> None:
    print(f"logit lens: the chosen token's p (rank) and the most likely token at each decoder layer boundary "
          f"(0: embeddings, {lens.layers - 1}: the output)")
    cells = [["step", "token", *(f"L{layer}" for layer in range(lens.layers))]]
    for step in steps:
        cells.append([str(step + 1), label(int(lens.token_ids[step])),
                      *(f"{lens.probs[layer, step]:.3f} ({lens.ranks[layer, step]}) "
                        f"{label(int(lens.top_ids[layer, step, 0]))}" for layer in range(lens.layers))])
    _print_table(cells)


def _print_readings(readings, detokenise) -> None:
    print("DecoderLens: the decoder reading each encoder layer boundary (0: embeddings); NLL of the model's own output")
    _print_table([["layer", "NLL", "output"]] + [[str(reading.layer), f"{reading.nll:.3f}",
                                                  detokenise(list(reading.token_ids))] for reading in readings])


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print(terminal_text("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()))
