"""Write the fairseq checkpoints tests/test_import_fairseq.py converts, and what fairseq itself computes
with them (logits, every head's attention, greedy output).

fairseq does not install on this project's Python in the usual way, so the files are committed; this script
says exactly how they were made. Run it with a Python that has fairseq (the ``fairseq-fixed`` 0.12.3.1 fork
works on 3.11: ``READTHEDOCS=1 pip install --no-deps --no-build-isolation fairseq-fixed==0.12.3.1`` plus
hydra-core 1.3.2, omegaconf 2.3, bitarray, sacrebleu, scikit-learn, and its two Cython modules built):

    python tests/data/fairseq/make_fixtures.py [VARIANT ...]

(naming variants renews only their folders). Each model trains with ``fairseq-train`` on a tiny corpus written
here, tokenized with a sentencepiece model trained here (both the same on every run): 300 updates of Adam
(inverse-sqrt schedule, dropout 0.1), except the narrow LSTM decoder, which reads its source only after 8,000
updates at a fixed learning rate of 0.01, batches of 2,000 tokens, no dropout and gradients clipped to norm 1
(a quarter of an hour on two CPU cores; a rerun gives the same weights). The folder holds what a user has after
training: the checkpoint, the data-bin dictionaries and the sentencepiece model.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

# fairseq reads its own checkpoints with torch.load's old default (it trusts them; this script wrote them)
os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
HERE = Path(__file__).resolve().parent
WORDS = ("the cat dog sees a big small red house tree runs jumps over under near blue green bird fish "
         "eats water old new quick slow").split()
SENTENCES = ["the cat sees a big house", "a small dog runs near the tree", "the bird eats a red fish"]
VARIANTS = {
    # post-LN, fairseq's sinusoids, one dictionary and one embedding table for everything
    "transformer-postln": ["--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "2",
                           "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
                           "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                           "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"],
    # pre-LN with final norms, learned positions, a norm on the embeddings, GELU, two dictionaries
    "transformer-preln": ["--arch", "transformer", "--encoder-normalize-before", "--decoder-normalize-before",
                          "--encoder-learned-pos", "--decoder-learned-pos", "--layernorm-embedding",
                          "--activation-fn", "gelu", "--share-decoder-input-output-embed",
                          "--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                          "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "24",
                          "--decoder-ffn-embed-dim", "24", "--encoder-attention-heads", "4",
                          "--decoder-attention-heads", "4"],
    # LSTM with attention: bidirectional 2-layer encoder, input feeding
    "lstm": ["--arch", "lstm", "--encoder-bidirectional", "--encoder-layers", "2", "--decoder-layers", "2",
             "--encoder-embed-dim", "12", "--decoder-embed-dim", "12", "--encoder-hidden-size", "10",
             "--decoder-hidden-size", "20", "--decoder-out-embed-dim", "20"],
    # each stack its own head count and feed-forward width
    "transformer-sides": ["--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2",
                          "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                          "--decoder-ffn-embed-dim", "24", "--encoder-attention-heads", "4",
                          "--decoder-attention-heads", "2"],
    # an LSTM decoder narrower than the encoder's output (20): fairseq projects the encoder's final states
    "lstm-narrow-decoder": ["--arch", "lstm", "--encoder-bidirectional", "--encoder-layers", "2",
                            "--decoder-layers", "2", "--encoder-embed-dim", "12", "--decoder-embed-dim", "12",
                            "--encoder-hidden-size", "10", "--decoder-hidden-size", "14",
                            "--decoder-out-embed-dim", "14"],
}
JOINED = {"transformer-postln"}
TRAINING = {"--optimizer": "adam", "--lr": "0.005", "--lr-scheduler": "inverse_sqrt", "--warmup-updates": "30",
            "--max-tokens": "1000", "--max-update": "300", "--dropout": "0.1", "--clip-norm": "0"}
# what a variant needs beyond the few hundred updates above to learn the task: the narrow LSTM decoder learns
# the target language first and only after thousands of updates at a steady rate attends to the source
LONGER = {"lstm-narrow-decoder": {"--lr-scheduler": "fixed", "--lr": "0.01", "--max-tokens": "2000",
                                  "--max-update": "8000", "--dropout": "0", "--clip-norm": "1"}}


def corpus(count: int, seed: int) -> list[tuple[str, str]]:
    """Sentences of the words above; the "translation" reverses the word order and upper-cases the words."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        pairs.append((" ".join(words), " ".join(word.upper() for word in reversed(words))))
    return pairs


def run(tool: str, *arguments) -> None:
    """A fairseq command-line tool (fairseq-preprocess, fairseq-train), run as a module of the Python running
    this script, so that a fairseq installed in any folder on its path is the one used."""
    module = "fairseq_cli." + tool.removeprefix("fairseq-")
    subprocess.run([sys.executable, "-m", module, *map(str, arguments)], check=True, stdout=subprocess.DEVNULL)


def prepare(work: Path) -> None:
    work.mkdir(parents=True)
    train, valid = corpus(400, 1), corpus(40, 2)
    text = work / "all.txt"
    text.write_text("\n".join(side for pair in train for side in pair) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(work / "spm"), vocab_size=100,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1,
                                   unk_id=0, pad_id=-1)
    processor = spm.SentencePieceProcessor(model_file=str(work / "spm.model"))
    for name, pairs in (("train", train), ("valid", valid)):
        for index, lang in enumerate(("src", "tgt")):
            lines = [" ".join(processor.encode(pair[index], out_type=str)) for pair in pairs]
            (work / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def train(work: Path, name: str, arguments: list[str]) -> Path:
    data = work / f"bin-{name}"
    joined = ["--joined-dictionary"] if name in JOINED else []
    run("fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref",
        work / "train", "--validpref", work / "valid", "--destdir", data, "--workers", "1", *joined)
    save = work / f"save-{name}"
    settings = [item for pair in (TRAINING | LONGER.get(name, {})).items() for item in pair]
    run("fairseq-train", data, *arguments, *settings, "--cpu", "--seed", "1", "--save-dir", save,
        "--no-epoch-checkpoints", "--criterion", "cross_entropy", "--log-format", "none", "--disable-validation")
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    shutil.copy(save / "checkpoint_last.pt", out / "checkpoint_last.pt")
    for lang in ("src", "tgt"):
        shutil.copy(data / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
    shutil.copy(work / "spm.model", out / "sentencepiece.bpe.model")
    return out


def capture_attention(model) -> tuple[list, callable]:
    """Make every fairseq MultiheadAttention return all heads' weights, and record them in call order."""
    from fairseq.modules.multihead_attention import MultiheadAttention

    seen, handles = [], []

    def force(module, args, kwargs):
        kwargs["need_weights"], kwargs["need_head_weights"] = True, True
        return args, kwargs

    def keep(module, args, kwargs, output):
        seen.append((module.name, output[1].detach().clone()))

    for name, module in model.named_modules():
        if isinstance(module, MultiheadAttention):
            module.name = name
            # fairseq hands self-attention to torch's fused function, which averages the heads when asked for
            # weights; this flag makes it take its own per-head path (the same arithmetic)
            module.skip_embed_dim_check = True
            handles.append(module.register_forward_pre_hook(force, with_kwargs=True))
            handles.append(module.register_forward_hook(keep, with_kwargs=True))
    return seen, lambda: [handle.remove() for handle in handles]


def references(folder: Path) -> None:
    from fairseq import checkpoint_utils
    from fairseq.sequence_generator import SequenceGenerator

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(folder / "checkpoint_last.pt")],
        arg_overrides={"data": str(folder), "source_lang": "src", "target_lang": "tgt"})
    model = models[0].eval()
    processor = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=1, max_len_b=40)
    out: dict[str, np.ndarray] = {}
    for index, sentence in enumerate(SENTENCES):
        pieces = " ".join(processor.encode(sentence, out_type=str))
        src = task.source_dictionary.encode_line(pieces, add_if_not_exist=False, append_eos=True).long()[None]
        lengths = torch.tensor([src.shape[1]])
        target = " ".join(word.upper() for word in reversed(sentence.split()))
        tgt = task.target_dictionary.encode_line(" ".join(processor.encode(target, out_type=str)),
                                                 add_if_not_exist=False, append_eos=True).long()[None]
        prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)  # fairseq starts the decoder with </s>
        seen, remove = capture_attention(model)
        with torch.no_grad():
            logits, extra = model(src, lengths, prev)
        remove()
        out[f"{index}/src"] = src[0].numpy()
        out[f"{index}/prev"] = prev[0].numpy()
        out[f"{index}/logits"] = logits[0].numpy()
        for name, weights in seen:  # [heads, batch, query, key]
            out[f"{index}/attention/{name}"] = weights[:, 0].numpy()
        if isinstance(extra, torch.Tensor):  # the LSTM decoder returns its one cross-attention map [B, T, S]
            out[f"{index}/attention/cross"] = extra[0].numpy()
        with torch.no_grad():
            hypo = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})[0][0]
        out[f"{index}/greedy"] = hypo["tokens"].numpy()
    np.savez(folder / "fairseq_outputs.npz", **out)
    print(folder.name, "greedy", [task.target_dictionary.string(out[f"{i}/greedy"]) for i in range(len(SENTENCES))])


def main() -> None:
    work = Path("/tmp/attnviz-fairseq-fixtures")
    if work.exists():
        shutil.rmtree(work)
    prepare(work)
    for name, arguments in VARIANTS.items():
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        references(train(work, name, arguments))


if __name__ == "__main__":
    main()
