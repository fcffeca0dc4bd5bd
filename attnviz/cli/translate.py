"""attnviz translate -c CKPT [--beam K] [--device D] [--json] TEXT...: one output line per input.

With no TEXT, each line of standard input is one input. --json prints one document instead: a list with
each input, its output, its tokens, their ids and their score. An encoder-only model (BERT, RoBERTa, DistilBERT)
fills each [MASK] (<mask>) with its most likely token; --json gives the top 5 of every mask.

A decoder-only language model (GPT-2, Llama, Qwen, Gemma...) continues each TEXT as its prompt: the output is
the continuation (the prompt is not repeated), the tokens and ids the continuation's. --chat lays each TEXT out
as the user's turn with the model's chat template (--system TEXT: a system message before it), ending where the
assistant's answer begins, as transformers' apply_chat_template(add_generation_prompt=True) does.
"""

from __future__ import annotations

import argparse
import json

from models.errors import InputError

from .common import (
    ablation_for, add_batching_options, add_decoding_options, add_model_options, announce_truncation,
    announce_unknown, announce_unknown_inputs, argument_text, batching_of, each_input_line, encoding_name, error,
    finite_float, model_shape, note, open_translator, progress_bar, prompt_source, terminal_text,
)

NAME = "translate"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="translate sentences", description=__doc__)
    add_model_options(parser)
    add_decoding_options(parser)
    parser.add_argument("--length-penalty", type=finite_float, metavar="ALPHA",
                        help="beam length penalty α (default 0.6; a decoder-only model's 1.0, as transformers' "
                             "generate)")
    parser.add_argument("--encoding", type=encoding_name, default="utf-8",
                        help="text encoding of standard input (default utf-8)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_batching_options(parser)
    parser.add_argument("--verbose", action="store_true",
                        help="name every input with characters the vocabulary lacks (default: one line for them all)")
    parser.add_argument("text", nargs="*", help="sentences to translate (default: lines of standard input)")


def run(args: argparse.Namespace) -> int:
    if args.text:
        texts: list[str | None] = [argument_text(text, f"input {number}") for number, text in enumerate(args.text, 1)]
        bad: dict[int, str] = {}
    else:
        texts, bad = each_input_line(args.encoding)
    if not texts:
        raise InputError("nothing to translate: give TEXT arguments or lines on standard input")
    model_shape(args)  # mistakes answered before torch is imported (--system without --chat among them)
    from models.inference.distributed import joined

    with joined(args.device) as processes:
        args.device = str(processes.device)  # under torchrun on CUDA: this process's own GPU
        translator = open_translator(args)
        sources = _sources(args, translator, texts, bad=bad)
        if not processes.main:
            bad = {}  # the main process says what was wrong
        for message in bad.values():  # each refused input once, before the outputs
            error(message)
        if not translator.model.decodes:  # an encoder-only model fills its masks instead
            _fill(args, translator, list(zip(texts, sources)), ablation=ablation_for(args, translator))
        else:
            _translate(args, translator, texts, sources=sources, processes=processes, bad=bad)
    return 1 if bad else 0


def _sources(args: argparse.Namespace, translator, texts: list[str | None], *, bad: dict[int, str]) -> list:
    """Each input's ``SourceInput``, or None where it is refused (its one line kept in ``bad`` by input number);
    one input alone, or every input, refused is the command's error."""
    sources = []
    for number, text in enumerate(texts, 1):
        source = None
        try:
            if text is not None:
                source = prompt_source(args, translator, text)
        except InputError as failure:
            bad[number] = f"input {number}: {failure}"
        sources.append(source)
    if bad and len(bad) == len(texts):
        raise InputError(bad[min(bad)])
    ordered = sorted(bad.items())
    bad.clear()
    bad.update(ordered)  # by input number
    return sources


def _translate(args: argparse.Namespace, translator, texts: list[str | None], *, sources: list, processes,
               bad: dict[int, str]) -> None:
    """Decode the inputs in batches (models/inference/corpus.py) and print each output in input order as soon as it
    and every one before it are done (a refused input's line is empty); --json one document at the end."""
    from models.inference.corpus import decode_corpus

    if processes.main:
        announce_unknown_inputs(sources, verbose=args.verbose)
        for number, source in enumerate(sources, 1):
            if source is not None:
                announce_truncation(source, f"input {number}", translator.config.max_len)
    translations = []
    results = decode_corpus(translator, sources, beam=args.beam, batching=batching_of(args), processes=processes,
                            length_penalty=args.length_penalty, max_len=args.max_len,
                            ablation=ablation_for(args, translator))
    with progress_bar(len(texts), enabled=processes.main and not args.json, unit="line") as bar:
        for number, (text, found) in enumerate(zip(texts, results), 1):
            best = found[0] if found else None
            if args.json:
                translations.append({"input": text, "output": best.text, "tokens": best.tokens,
                                     "token_ids": best.token_ids, "score": float(best.score)} if best else
                                    {"input": text, "output": None, "error": bad.get(number, "refused")})
            else:  # one line each, no escape sequences from the vocabulary
                bar.write(terminal_text(best.text) if best else "")
            bar.update(1)
    if args.json and processes.main:  # escaped throughout: no control character or lone surrogate reaches the terminal
        print(json.dumps(translations))


def _fill(args: argparse.Namespace, translator, inputs: list, *, ablation) -> int:
    """An encoder-only model's run (models/inference/fill_mask.py): per input the sentence with each mask filled by
    its most likely token; --json the top-k of every mask. A sentence with nothing to fill is printed as it is, and a
    note on stderr says why."""
    from models.inference.fill_mask import fill_masks

    documents = []
    for number, (text, source) in enumerate(inputs, 1):
        if source is None:  # refused, and said so
            documents.append({"input": text, "output": None, "error": "refused"}) if args.json else print()
            continue
        announce_unknown(source, f"input {number}")
        announce_truncation(source, f"input {number}", translator.config.max_len)
        result = fill_masks(translator, source, need_weights=False, ablation=ablation)
        output = result.text if result.predictions else text  # nothing filled: the sentence as it was given
        if result.note:
            note(f"input {number}: {result.note}")
        if args.json:
            documents.append({"input": text, "output": output, "note": result.note,
                              "masks": [{"position": p.position, "ids": p.top_ids, "tokens": p.top_tokens,
                                         "probabilities": p.top_probs} for p in result.predictions]})
        else:
            print(terminal_text(output), flush=True)
    if args.json:
        print(json.dumps(documents))
    return 0
