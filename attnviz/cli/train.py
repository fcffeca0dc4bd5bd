"""attnviz train --data PAIRS.tsv --arch ARCH -o CKPT [--steps N] [--seed S] [--device D] [--set KEY=VALUE]...

PAIRS.tsv has one source<TAB>target pair a line (UTF-8). Model settings are config fields given as
--set KEY=VALUE (e.g. --set d_model=256 --set heads=4; a Transformer's d_ff follows d_model, 4 times it, unless
set); attnviz train --arch ARCH --help lists that architecture's keys with their defaults. The loss the progress
shows is the training objective, label smoothing included; validation reports the plain cross-entropy, chrF and
BLEU (on characters for a character-level target). Works the same under torchrun --nproc_per_node N (one process
per device).

--arch decoder-only trains a language model (pre-LN blocks, rotary positions, SwiGLU, RMSNorm, tied output;
one vocabulary for both sides, --shared-vocab implied) on each pair laid out as one sequence: the source's
tokens (the prompt), the separator <s>, the target's tokens, the end token </s>. The loss is taken only on the
target positions (predicting the target and </s> after <s>), never on the prompt; decoding feeds <s> after
the prompt.

--arch encoder-only trains a masked-language model (BERT's objective: post-LN blocks, learned positions, the
masked-language-model head tied to the token table) on the source side of each pair, one sentence a line with </s>
after it, on characters, with "_" as the mask token (a typed "sh_pherd" asks the model to fill the "_"). Each step
chooses 15 % of every sentence's characters (one at least): 80 % become the mask, 10 % a random character, 10 % stay
(BERT's 80/10/10 rule), drawn from the seed and the step, so a seed masks the same characters every run; the loss is
on the chosen positions only. Validation reports the held-out sentences' masked characters' loss and top-1 accuracy,
15 % of each masked by a hash of the sentence (the same every time). One process; --resume and --snapshots are not
available for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from models.nn.config import (
    DECODER_ARCHS, ENCODER_ARCHS, FEED_FORWARD_RATIO, RNN_ARCHS, TRAINED_ARCHS, TRANSFORMER_ARCHS, TrainingConfig,
    make_config, parse_settings, settings_of,
)

from .common import add_output_option

NAME = "train"
DEFAULTS = TrainingConfig()  # one set of training defaults: the library's


class HelpWithSettings(argparse.Action):
    """``-h/--help``: the usual help, then the ``--set`` keys with their defaults: of ``--arch`` when it came
    first (``attnviz train --arch gru-additive --help``), else of each family."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.epilog = settings_text(getattr(namespace, "arch", None))
        parser.print_help()
        parser.exit()


def settings_text(arch: str | None) -> str:
    """The ``--set`` keys and defaults of ``arch``, or of every family when it is None, wrapped for a terminal."""
    import textwrap

    families = [(arch, [arch])] if arch else [(TRANSFORMER_ARCHS[0], list(TRANSFORMER_ARCHS)),
                                             (RNN_ARCHS[0], list(RNN_ARCHS)), (DECODER_ARCHS[0], list(DECODER_ARCHS)),
                                             (ENCODER_ARCHS[0], list(ENCODER_ARCHS))]
    parts = []
    for example, names in families:
        keys = " ".join(f"{key}={json.dumps(value)}" for key, value in settings_of(example).items())
        notes = []
        if example in TRANSFORMER_ARCHS or example in DECODER_ARCHS:
            notes.append(f"d_ff follows d_model: {FEED_FORWARD_RATIO} times it unless set")
        if example in TRANSFORMER_ARCHS and not arch:
            notes.append('transformer-postln: norm_position="post" final_norm=false')
        if example in DECODER_ARCHS:
            notes.append("pre-LN blocks, rotary positions, SwiGLU, RMSNorm; one sequence per pair: source <s> "
                         "target </s>, loss on the target positions only")
        if example in ENCODER_ARCHS:
            notes.append("post-LN blocks, learned positions, the masked-LM head; characters with _ as the mask, "
                         "15 % masked by BERT's 80/10/10 rule")
        title = f"--set keys of {', '.join(names)}, with their defaults" + "".join(f"; {note}" for note in notes)
        parts.append(textwrap.fill(title + ":", width=100, break_on_hyphens=False) + "\n"
                     + textwrap.fill(keys, width=100, initial_indent="  ", subsequent_indent="  "))
    return "\n\n".join(parts)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="train a model on sentence pairs", description=__doc__, add_help=False)
    parser.add_argument("-h", "--help", action=HelpWithSettings,
                        help="show this help, with the --set keys of --arch (given before it) and their defaults")
    parser.add_argument("--data", required=True, help="training pairs, source<TAB>target per line")
    parser.add_argument("--valid", help="validation pairs (default: --valid-fraction of --data, held out by hash)")
    parser.add_argument("--valid-fraction", type=float, default=0.05, help="share held out when --valid is absent")
    parser.add_argument("--arch", required=True, choices=TRAINED_ARCHS,
                        help="the model architecture (decoder-only: one sequence per pair, see above)")
    add_output_option(parser, "the checkpoint to write (.safetensors)", old_spelling="--out")
    parser.add_argument("--steps", type=int, default=DEFAULTS.steps, help="optimizer steps to train for")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seeds the weights, batches and split")
    parser.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--tokenizer", choices=("char", "sentencepiece"),
                        help="characters, or a sentencepiece model learned on --data (the default; encoder-only: "
                             "characters only)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="sentencepiece vocabulary size per side")
    parser.add_argument("--shared-vocab", action="store_true",
                        help="one tokenizer for both sides (always, for decoder-only)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a model config field")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size,
                        help="sentence pairs per step (over all processes)")
    parser.add_argument("--lr", type=float, default=DEFAULTS.learning_rate, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=DEFAULTS.warmup_steps, help="warm-up steps")
    parser.add_argument("--label-smoothing", type=float, default=DEFAULTS.label_smoothing,
                        help="weight moved from the reference token to the rest of the vocabulary")
    parser.add_argument("--clip", type=float, default=DEFAULTS.clip_norm, help="gradient norm clip")
    parser.add_argument("--eval-every", type=int, default=DEFAULTS.eval_every,
                        help="steps between validations (0: only at the end)")
    parser.add_argument("--save-every", type=int, default=DEFAULTS.save_every,
                        help="steps between checkpoint and training state writes (0: only at the end)")
    parser.add_argument("--valid-sentences", type=int, default=DEFAULTS.validation_sentences,
                        help="validation pairs decoded for chrF/BLEU")
    parser.add_argument("--snapshots", type=int, default=DEFAULTS.snapshots, metavar="N",
                        help="keep N evenly spaced float16 checkpoints in OUT.snapshots/ (attention across training)")
    parser.add_argument("--resume", action="store_true", help="continue from the trainer state next to -o")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _training_config(args: argparse.Namespace) -> TrainingConfig:
    return TrainingConfig(
        steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=args.warmup,
        label_smoothing=args.label_smoothing, clip_norm=args.clip, eval_every=args.eval_every,
        save_every=args.save_every, validation_sentences=args.valid_sentences, seed=args.seed,
        device=args.device, progress=not args.no_progress, snapshots=args.snapshots)


def run_masked_lm(args: argparse.Namespace, train_pairs, valid_pairs) -> int:
    """--arch encoder-only: a masked-language model on the pairs' source sentences (models/training/masked_lm.py)."""
    from models.errors import ConfigError
    from models.training.masked_lm import mask_id, masked_tokenizer, train_masked_lm

    if args.tokenizer == "sentencepiece" or args.resume or args.snapshots:
        given = "--tokenizer sentencepiece" if args.tokenizer == "sentencepiece" else \
            "--resume" if args.resume else "--snapshots"
        raise ConfigError(f"--arch encoder-only trains on characters in one process; {given} is not available for it")
    sentences = list(dict.fromkeys(source for source, _ in train_pairs))
    valid = list(dict.fromkeys(source for source, _ in valid_pairs))
    tokenizer = masked_tokenizer(sentences)
    model_config = dataclasses.replace(make_config(args.arch, tokenizer.vocab_size, tokenizer.vocab_size,
                                                   **parse_settings(args.set)), mask_id=mask_id(tokenizer))
    provenance = {"corpus": str(args.data), "command": "attnviz " + " ".join(sys.argv[1:])}
    summary = train_masked_lm(model_config, tokenizer, sentences, valid_sentences=valid, out_path=args.output,
                              config=_training_config(args), provenance=provenance)
    metrics = "" if summary.accuracy is None else \
        f": held-out masked loss {summary.valid_loss:.3f}, accuracy {100 * summary.accuracy:.2f}%"
    print(f"saved {summary.checkpoint} after {summary.step} steps in {summary.seconds:.0f} s{metrics}",
          file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    from models.text.pairs import read_pairs
    from models.text.splits import split_pairs
    from models.text.scores import CHARACTER_BLEU
    from models.training.trainer import build_tokenizers, train

    pairs = read_pairs(args.data)
    if args.valid:
        train_pairs, valid_pairs = pairs, read_pairs(args.valid)
    else:
        train_pairs, valid_pairs = split_pairs(pairs, args.valid_fraction, args.seed)
    if args.arch in ENCODER_ARCHS:
        return run_masked_lm(args, train_pairs, valid_pairs)
    shared = args.shared_vocab or args.arch in DECODER_ARCHS
    source, target = build_tokenizers(train_pairs, args.tokenizer or "sentencepiece", vocab_size=args.vocab_size,
                                      shared=shared)
    model_config = make_config(args.arch, source.vocab_size, target.vocab_size, **parse_settings(args.set))
    config = _training_config(args)
    provenance = {"corpus": str(args.data), "command": "attnviz " + " ".join(sys.argv[1:])}
    summary = train(model_config, source, target_tokenizer=target, train_pairs=train_pairs, valid_pairs=valid_pairs,
                    out_path=args.output, config=config,
                    provenance=provenance, resume=args.resume)
    bleu = "BLEU on characters" if summary.bleu_name == CHARACTER_BLEU else "BLEU"
    metrics = ", ".join(f"{name} {value:.3f}" if "loss" in name else f"{name} {value:.1f}"
                        for name, value in (("valid loss", summary.valid_loss), ("chrF", summary.chrf),
                                            (bleu, summary.bleu)) if value is not None)
    print(f"saved {summary.checkpoint} after {summary.step} steps in {summary.seconds:.0f} s"
          + (f": {metrics}" if metrics else ""), file=sys.stderr)
    return 0
