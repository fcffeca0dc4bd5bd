"""The checkpoint formats the importers read, named once: each format's ``--format`` name, the module under
models/importers/ that converts it (which takes its ``NAME`` from here) and what ``attnviz convert --help`` says of it.

Imports no torch: ``attnviz convert --help`` lists these without loading an importer (models/importers/__init__.py
loads the modules, and with them torch, on first use).
"""

from __future__ import annotations

from dataclasses import dataclass

SUMMARY_INDENT = 19  # the column where ``--help`` starts each format's summary


@dataclass(frozen=True)
class Format:
    """A format: its ``--format`` name, its module (``models/importers/<module>.py``) and its ``--help`` summary
    (lines as ``--help`` breaks them)."""

    name: str
    module: str
    summary: str


# Every format, once, in the order ``--help`` lists them; detection asks them in the ranks each module declares.
FORMAT_CATALOGUE = (
    Format("marian", "marian",
           "a Hugging Face Marian / opus-mt folder (config.json, model.safetensors or\n"
           "pytorch_model.bin, source.spm, target.spm, vocab.json)"),
    Format("nn-transformer", "nn_transformer",
           "the PyTorch nn.Transformer tutorial's Seq2SeqTransformer, or any model with\n"
           "nn.Transformer's keys; needs --set nhead=N --set norm_first=true|false"),
    Format("pytorch-seq2seq", "pytorch_seq2seq",
           "the PyTorch seq2seq tutorial's EncoderRNN + AttnDecoderRNN: a folder with encoder*.pt\n"
           "and decoder*.pt, or one file holding both"),
    Format("jadore", "jadore",
           "jadore801120/attention-is-all-you-need-pytorch ({'settings', 'model'} .chkpt)"),
    Format("annotated", "annotated",
           "harvardnlp/annotated-transformer (a state dict of make_model); needs --set h=N"),
    Format("hf-bart", "hf_bart",
           "a Hugging Face BART, mBART, M2M100/NLLB, Pegasus or BlenderbotSmall folder (config.json,\n"
           "model.safetensors, tokenizer.json or vocab.json + merges.txt); a multilingual one\n"
           "(mBART-50, NLLB) takes --src-lang/--tgt-lang, kept in the checkpoint"),
    Format("fsmt", "fsmt",
           "a Hugging Face FSMT folder (config.json, model.safetensors, vocab-src.json, vocab-tgt.json,\n"
           "merges.txt; its Moses tokenizer needs sacremoses)"),
    Format("hf-t5", "hf_t5",
           "a Hugging Face T5 (v1.0, v1.1) or mT5 folder (config.json, model.safetensors,\n"
           "tokenizer.json or spiece.model)"),
    Format("opennmt", "opennmt",
           "an OpenNMT-py 3.x checkpoint (<save_model>_step_N.pt: model, generator, vocab, opt) of a\n"
           "Transformer or an LSTM/GRU RNN with global attention and input feeding; its vocabularies are\n"
           "inside, input is whitespace-tokenised as in training"),
    Format("joeynmt", "joeynmt",
           "a JoeyNMT 2.x model folder (config.yaml, best.ckpt or STEP.ckpt, src_vocab.txt, trg_vocab.txt;\n"
           "its sentencepiece model when the level is bpe), or its .ckpt with config.yaml beside it: a\n"
           "Transformer or a bidirectional GRU/LSTM with Bahdanau or Luong attention"),
    Format("fairseq", "fairseq",
           "a fairseq checkpoint (checkpoint_best.pt, model.pt, or the folder holding it) of the\n"
           "transformer or lstm family; its dict.<lang>.txt files and sentencepiece model or subword-nmt\n"
           "codes are found beside it or in its data-bin folder (else --src-vocab/--tgt-vocab, --set bpe=FILE;\n"
           "--set moses=LANG to Moses-tokenise before subword-nmt)"),
    Format("sockeye", "sockeye",
           "a Sockeye 3 model folder (config, params.best, vocab.src.0.json, vocab.trg.0.json) of a\n"
           "Transformer; input is whitespace-tokenised as in training"),
    Format("hf-causal", "hf_causal",
           "a Hugging Face decoder-only language model folder (GPT-2, Llama, Mistral, Qwen2, Qwen3,\n"
           "Gemma 2: config.json, model.safetensors, sharded safetensors with their index, or\n"
           "pytorch_model.bin, tokenizer.json, generation_config.json)"),
    Format("nanogpt", "nanogpt",
           "a nanoGPT ckpt.pt (model_args, model; compiled or not) with its character meta.pkl beside it,\n"
           "or --set tokenizer=PATH (a folder with meta.pkl, or GPT-2's tokenizer.json for a BPE model)"),
    Format("hf-encoder", "hf_encoder",
           "a Hugging Face encoder-only folder (BERT, RoBERTa, DistilBERT: the masked language model or the\n"
           "bare encoder; config.json, model.safetensors or pytorch_model.bin, tokenizer.json)"),
)
FORMAT_NAMES = tuple(entry.name for entry in FORMAT_CATALOGUE)


def format_name(module: str) -> str:
    """The ``--format`` name of the format that ``module`` (its ``__name__``) converts."""
    return next(entry.name for entry in FORMAT_CATALOGUE if entry.module == module.rpartition(".")[2])


def formats_help() -> str:
    """The formats as ``attnviz convert --help`` lists them: a name, then its summary from column 19."""
    lines = []
    for entry in FORMAT_CATALOGUE:
        first, *rest = entry.summary.splitlines()
        lines.append(f"  {entry.name:<{SUMMARY_INDENT - 2}}{first}")
        lines += [" " * SUMMARY_INDENT + line for line in rest]
    return "\n".join(lines)
