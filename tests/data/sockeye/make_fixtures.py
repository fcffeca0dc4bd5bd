"""Write the Sockeye 3 model folders tests/test_import_sockeye.py converts, and what Sockeye itself computes with
them (logits, every head's attention, greedy output).

Sockeye 3.1 pins torch < 1.14 and numpy < 2, so it does not install beside this project's torch; it runs beside
it in a virtual environment that sees the system's torch and has its own numpy:

    python -m venv --system-site-packages /tmp/sockeye-venv
    /tmp/sockeye-venv/bin/pip install --no-deps sockeye==3.1.34
    /tmp/sockeye-venv/bin/pip install "numpy<2" pyyaml sacrebleu
    /tmp/sockeye-venv/bin/python tests/data/sockeye/make_fixtures.py

Each model trains for a few hundred updates with ``sockeye-train`` on a tiny corpus written here; the folder keeps
what a user has after training (``config``, ``params.best``, ``vocab.src.0.json``, ``vocab.trg.0.json``,
``version``, ``args.yaml``), beside ``sockeye_outputs.npz``.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
WORDS = ("the cat dog sees a big small red house tree runs jumps over under near blue green bird fish "
         "eats water old new quick slow").split()
SENTENCES = ["the cat sees a big house", "a small dog runs near the tree", "the bird eats a red fish"]
COMMON = ["--batch-size", "400", "--batch-type", "word", "--checkpoint-interval", "150", "--max-updates", "300",
          "--use-cpu", "--seed", "1", "--quiet", "--initial-learning-rate", "0.003"]
VARIANTS = {
    # Sockeye's defaults: pre-LN, fixed sinusoids, one vocabulary and one table for both sides and the output
    "transformer-preln": ["--num-layers", "2:1", "--transformer-model-size", "16", "--num-embed", "16",
                          "--transformer-attention-heads", "2", "--transformer-feed-forward-num-hidden", "32",
                          "--shared-vocab", "--weight-tying-type", "src_trg_softmax"],
    # post-LN, learned positions, GELU with a gated (GLU) feed-forward, separate vocabularies, nothing tied
    "transformer-postln": ["--num-layers", "1:2", "--transformer-model-size", "16", "--num-embed", "16",
                           "--transformer-attention-heads", "4", "--transformer-feed-forward-num-hidden", "24",
                           "--transformer-preprocess", "", "--transformer-postprocess", "drn",
                           "--transformer-positional-embedding-type", "learned", "--transformer-activation-type",
                           "gelu", "--transformer-feed-forward-use-glu", "--weight-tying-type", "none"],
}
KEEP = ("config", "params.best", "vocab.src.0.json", "vocab.trg.0.json", "version", "args.yaml")


def corpus(count: int, seed: int) -> tuple[list[str], list[str]]:
    """Sentences of the words above; the "translation" reverses the word order and upper-cases the words."""
    rng = random.Random(seed)
    sources, targets = [], []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        sources.append(" ".join(words))
        targets.append(" ".join(word.upper() for word in reversed(words)))
    return sources, targets


def train(work: Path, name: str, arguments: list[str]) -> Path:
    model = work / name
    subprocess.run([str(BIN / "sockeye-train"), "--source", str(work / "train.src"), "--target",
                    str(work / "train.tgt"), "--validation-source", str(work / "dev.src"), "--validation-target",
                    str(work / "dev.tgt"), "--output", str(model), *arguments, *COMMON], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    for file in KEEP:
        shutil.copy(model / file, out / file)
    return out


def references(folder: Path, work: Path) -> None:
    from sockeye import layers
    from sockeye.model import load_model

    model, source_vocabs, target_vocabs = load_model(str(folder), device=torch.device("cpu"))
    model.eval()
    names = {}
    for name, module in model.named_modules():
        if isinstance(module, layers.DotAttentionCell):
            names[id(module)] = name
    seen = []
    original = layers.DotAttentionCell.forward

    def recording(self, queries, key_values, mask=None):
        # the same arithmetic as DotAttentionCell.forward, keeping the probabilities
        logits = layers.interleaved_matmul_encdec_qk(queries, key_values, heads=self.heads)
        if mask is not None:
            logits = logits.masked_fill(mask, -1e30 if logits.dtype == torch.float32 else -1e4)
        seen.append((names[id(self)], torch.softmax(logits, dim=-1).detach().clone()))
        return original(self, queries, key_values, mask)

    source_vocab, target_vocab = source_vocabs[0], target_vocabs[0]
    out: dict[str, np.ndarray] = {}
    for index, sentence in enumerate(SENTENCES):
        src = [source_vocab.get(word, 1) for word in sentence.split()] + [3]
        target = [target_vocab[word.upper()] for word in reversed(sentence.split())]
        tgt_in = [2] + target
        source = torch.tensor(src)[None, :, None]
        target_input = torch.tensor(tgt_in)[None, :, None]
        layers.DotAttentionCell.forward = recording
        try:
            with torch.no_grad():
                output = model(source, torch.tensor([[len(src), 0]]), target_input, torch.tensor([len(tgt_in)]))
        finally:
            layers.DotAttentionCell.forward = original
        out[f"{index}/src"] = np.array(src)
        out[f"{index}/tgt_in"] = np.array(tgt_in)
        out[f"{index}/logits"] = output["logits"][0].numpy()
        for name, probs in seen:  # [heads, query, key] (batch 1)
            out[f"{index}/attention/{name}"] = probs.numpy()
        seen.clear()
    # greedy output from sockeye-translate itself
    (work / "input.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    subprocess.run([str(BIN / "sockeye-translate"), "-m", str(folder), "--input", str(work / "input.txt"),
                    "--output", str(work / "output.txt"), "--beam-size", "1", "--greedy", "--use-cpu",
                    "--max-output-length", "40", "--output-type", "json", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for index, line in enumerate((work / "output.txt").read_text(encoding="utf-8").splitlines()):
        tokens = json.loads(line)["translation"].split()
        out[f"{index}/greedy"] = np.array([target_vocab[token] for token in tokens])
    np.savez(folder / "sockeye_outputs.npz", **out)
    print(folder.name, (work / "output.txt").read_text(encoding="utf-8").splitlines()[:3])


def main() -> None:
    work = Path("/tmp/attnviz-sockeye-fixtures")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    for name, (count, seed) in (("train", (400, 1)), ("dev", (40, 2))):
        sources, targets = corpus(count, seed)
        (work / f"{name}.src").write_text("\n".join(sources) + "\n", encoding="utf-8")
        (work / f"{name}.tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    for name, arguments in VARIANTS.items():
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        references(train(work, name, arguments), work)


if __name__ == "__main__":
    main()
