"""attnviz convert SRC -o OUT.safetensors [--format F] [--set KEY=VALUE]... [--src-vocab FILE]
[--tgt-vocab FILE] [--trust]: a checkpoint trained with other people's code → an attnviz checkpoint.

Formats (auto-detected when --format is omitted):
  marian           a Hugging Face Marian / opus-mt folder (config.json, model.safetensors or
                   pytorch_model.bin, source.spm, target.spm, vocab.json)
  nn-transformer   the PyTorch nn.Transformer tutorial's Seq2SeqTransformer, or any model with
                   nn.Transformer's keys; needs --set nhead=N --set norm_first=true|false
  pytorch-seq2seq  the PyTorch seq2seq tutorial's EncoderRNN + AttnDecoderRNN: a folder with encoder*.pt
                   and decoder*.pt, or one file holding both
  jadore           jadore801120/attention-is-all-you-need-pytorch ({'settings', 'model'} .chkpt)
  annotated        harvardnlp/annotated-transformer (a state dict of make_model); needs --set h=N
  hf-bart          a Hugging Face BART, mBART, M2M100/NLLB, Pegasus or BlenderbotSmall folder (config.json,
                   model.safetensors, tokenizer.json or vocab.json + merges.txt); a multilingual one
                   (mBART-50, NLLB) takes --src-lang/--tgt-lang, kept in the checkpoint
  fsmt             a Hugging Face FSMT folder (config.json, model.safetensors, vocab-src.json, vocab-tgt.json,
                   merges.txt; its Moses tokenizer needs sacremoses)
  hf-t5            a Hugging Face T5 (v1.0, v1.1) or mT5 folder (config.json, model.safetensors,
                   tokenizer.json or spiece.model)
  opennmt          an OpenNMT-py 3.x checkpoint (<save_model>_step_N.pt: model, generator, vocab, opt) of a
                   Transformer or an LSTM/GRU RNN with global attention and input feeding; its vocabularies are
                   inside, input is whitespace-tokenised as in training
  joeynmt          a JoeyNMT 2.x model folder (config.yaml, best.ckpt or STEP.ckpt, src_vocab.txt, trg_vocab.txt;
                   its sentencepiece model when the level is bpe), or its .ckpt with config.yaml beside it: a
                   Transformer or a bidirectional GRU/LSTM with Bahdanau or Luong attention
  fairseq          a fairseq checkpoint (checkpoint_best.pt, model.pt, or the folder holding it) of the
                   transformer or lstm family; its dict.<lang>.txt files and sentencepiece model or subword-nmt
                   codes are found beside it or in its data-bin folder (else --src-vocab/--tgt-vocab, --set bpe=FILE;
                   --set moses=LANG to Moses-tokenise before subword-nmt)
  sockeye          a Sockeye 3 model folder (config, params.best, vocab.src.0.json, vocab.trg.0.json) of a
                   Transformer; input is whitespace-tokenised as in training
  hf-causal        a Hugging Face decoder-only language model folder (GPT-2, Llama, Mistral, Qwen2, Qwen3,
                   Gemma 2: config.json, model.safetensors, sharded safetensors with their index, or
                   pytorch_model.bin, tokenizer.json, generation_config.json)

--set keys are named as in the source code (nhead, norm_first, n_head, MAX_LENGTH...); a file that lacks
one is refused with the list of what to give. Vocabulary files hold one token a line (line number = id).
Files are read without running code from them; --trust opens whole pickled models (with inert stand-ins
for their classes) and must only be used for files from a source you trust.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from models.nn.config import parse_settings
from models.errors import InputError

from .common import add_output_option


NAME = "convert"
FORMAT_NAMES = ("marian", "nn-transformer", "pytorch-seq2seq", "jadore", "annotated", "hf-bart", "fsmt", "hf-t5",
                "opennmt", "joeynmt", "fairseq", "sockeye", "hf-causal")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="import a checkpoint trained with other code", description=__doc__)
    parser.add_argument("source", metavar="SRC", help="the foreign checkpoint file or folder")
    add_output_option(parser, "the attnviz checkpoint to write (.safetensors)")
    parser.add_argument("--format", choices=FORMAT_NAMES, help="the source format (default: detected)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyper-parameter the file lacks, named as in its source code (repeatable)")
    parser.add_argument("--src-lang", metavar="CODE", help="a multilingual model's source language (mBART-50: "
                                                           "en_XX; kept in the checkpoint; same as --set src_lang=)")
    parser.add_argument("--tgt-lang", metavar="CODE",
                        help="its target language, forced as the first output token (default: none)")
    parser.add_argument("--src-vocab", metavar="FILE", help="source vocabulary, one token a line")
    parser.add_argument("--tgt-vocab", metavar="FILE", help="target vocabulary, one token a line")
    parser.add_argument("--trust", action="store_true",
                        help="allow whole pickled models (classes become inert stubs); trusted files only")


def run(args: argparse.Namespace) -> int:
    from models.storage.checkpoint import SUFFIX, save_checkpoint
    from models.storage.files import check_output_folder
    from models.importers import convert

    output = Path(args.output)
    if output.suffix != SUFFIX:
        raise InputError(f"{output}: the output file must end in {SUFFIX}")
    check_output_folder(output)  # before the conversion, not after it
    settings = parse_settings(args.set)
    for key, value in (("src_lang", args.src_lang), ("tgt_lang", args.tgt_lang)):
        if value is not None:
            settings[key] = value
    checkpoint = convert(args.source, args.format, settings=settings, src_vocab=args.src_vocab,
                         tgt_vocab=args.tgt_vocab, trust=args.trust)
    provenance = {**checkpoint.provenance, "command": _command(args)}
    save_checkpoint(output, checkpoint.model, source_tokenizer=checkpoint.source_tokenizer,
                    target_tokenizer=checkpoint.target_tokenizer, provenance=provenance)
    config = checkpoint.config
    record = checkpoint.provenance.get("imported_from", {})
    print(f"saved {output}: {record.get('format', '?')} → {config.arch}, {checkpoint.model.parameter_count():,} "
          f"parameters", file=sys.stderr)
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that made the checkpoint, rebuilt from the parsed arguments."""
    parts = ["attnviz", NAME, shlex.quote(str(args.source)), "-o", shlex.quote(str(args.output))]
    if args.format:
        parts += ["--format", args.format]
    parts += [part for item in args.set for part in ("--set", shlex.quote(item))]
    for option, value in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang),
                          ("--src-vocab", args.src_vocab), ("--tgt-vocab", args.tgt_vocab)):
        if value:
            parts += [option, shlex.quote(str(value))]
    return " ".join(parts + (["--trust"] if args.trust else []))
