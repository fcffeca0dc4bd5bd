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
    ablation_for, add_decoding_options, add_model_options, announce_truncation, announce_unknown, argument_text,
    encoding_name, finite_float, input_lines, note, open_translator, prompt_source, terminal_text,
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
    parser.add_argument("text", nargs="*", help="sentences to translate (default: lines of standard input)")


def run(args: argparse.Namespace) -> int:
    if args.text:
        texts = [argument_text(text, f"input {number}") for number, text in enumerate(args.text, 1)]
    else:
        texts = input_lines(args.encoding)
    if not texts:
        raise InputError("nothing to translate: give TEXT arguments or lines on standard input")
    translator = open_translator(args)
    from models.inference.decoding import finish
    from models.inference.modes import decoding_mode

    ablation = ablation_for(args, translator)
    sources = []
    for number, text in enumerate(texts, 1):  # check every input before spending time on any
        try:
            sources.append(prompt_source(args, translator, text))
        except InputError as failure:
            raise InputError(f"input {number}: {failure}") from None
    if not translator.model.decodes:  # an encoder-only model fills its masks instead
        return _fill(args, translator, list(zip(texts, sources)), ablation=ablation)
    translations = []
    for number, (text, source) in enumerate(zip(texts, sources), 1):
        announce_unknown(source, f"input {number}")
        announce_truncation(source, f"input {number}", translator.config.max_len)
        best = finish(translator.decode(source, mode=decoding_mode(args.beam), beam=args.beam,
                                        length_penalty=args.length_penalty, max_len=args.max_len,
                                        need_weights=False, ablation=ablation))[0]
        if args.json:
            translations.append({"input": text, "output": best.text, "tokens": best.tokens,
                                 "token_ids": best.token_ids, "score": float(best.score)})
        else:
            print(terminal_text(best.text), flush=True)  # one line each, no escape sequences from the vocabulary
    if args.json:  # escaped throughout: no control character or lone surrogate reaches the terminal
        print(json.dumps(translations))
    return 0


def _fill(args: argparse.Namespace, translator, inputs: list, *, ablation) -> int:
    """An encoder-only model's run (models/inference/fill_mask.py): per input the sentence with each mask filled by
    its most likely token; --json the top-k of every mask. A sentence with nothing to fill is printed as it is, and a
    note on stderr says why."""
    from models.inference.fill_mask import fill_masks

    documents = []
    for number, (text, source) in enumerate(inputs, 1):
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
