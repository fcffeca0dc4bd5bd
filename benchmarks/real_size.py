"""Checkpoints at the sizes people train: opus-mt base (6+6 layers × 8 heads, d_model 512, FFN 2048) and
opus-mt-tc-big (6+6 × 16 heads, d_model 1024, FFN 4096), vocabulary 32,000, random weights, written as attnviz
checkpoints (no download). Each measurement runs in a fresh interpreter and reports its time and how much the
process grew above a bare ``import torch``, also as a multiple of the float32 weights:

- ``whole file``: the baseline — the file read whole, its tensors made from the bytes, a randomly initialised
  model loaded from them (what loading cost before it streamed);
- ``load``: ``load_checkpoint`` (one tensor at a time into a model built without initialising its weights),
  keeping the weights as float32 or as bfloat16;
- ``info``: ``describe_file``, what ``attnviz info`` prints (the header only);
- ``translate``: ``attnviz translate`` of one sentence, end to end.

    python benchmarks/real_size.py [--shapes base big] [--keep FOLDER]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SHAPES = {"base": dict(d_model=512, heads=8, d_ff=2048), "big": dict(d_model=1024, heads=16, d_ff=4096)}
VOCAB = 32_000

MEASURE = """
import json, sys, time
import torch


def peak():  # this process' own high-water mark (ru_maxrss would start from the parent's at the fork)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))


before = peak()
start = time.perf_counter()
what, path = sys.argv[1], sys.argv[2]
if what == "whole file":
    from models import build_model
    from models.storage.checkpoint import read_metadata
    from models.nn.config import config_from_dict
    from models.storage.files import read_safetensors
    model = build_model(config_from_dict(read_metadata(path)["config"]))
    tensors, _ = read_safetensors(path)
    model.load_state_dict(tensors, strict=False)
elif what.startswith("load"):
    from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint
    load_checkpoint(path, dtype=WEIGHT_DTYPES[what.split()[-1]])
elif what == "info":
    from models.storage.checkpoint import describe_file
    describe_file(path)
else:
    from attnviz.cli import main
    main(["translate", "-c", path, "--max-len", "20", "w5 w6 w7 w8"])
seconds = time.perf_counter() - start
grown = (peak() - before) * 1024
print(json.dumps({"seconds": seconds, "grown": grown, "torch": before * 1024}))
"""


def write_checkpoint(folder: str, shape: str) -> tuple[str, int]:
    from models import build_model, make_config
    from models.storage.checkpoint import save_checkpoint
    from models.text.tokenizers import WordTokenizer

    words = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{index}" for index in range(VOCAB - 4)]
    tokenizer = WordTokenizer(words, {"pad": 0, "unk": 1, "bos": 2, "eos": 3})
    config = make_config("transformer-postln", VOCAB, VOCAB, encoder_layers=6, decoder_layers=6, max_len=512,
                         **SHAPES[shape])
    model = build_model(config)
    weights = sum(tensor.numel() * 4 for tensor in model.state_dict().values())
    path = os.path.join(folder, f"{shape}.safetensors")
    save_checkpoint(path, model, tokenizer, tokenizer)
    return path, weights


def measure(what: str, path: str) -> dict:
    result = subprocess.run([sys.executable, "-c", MEASURE, what, path], capture_output=True, text=True, cwd=REPO,
                            check=True, env={**os.environ, "PYTHONPATH": REPO})
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--keep", metavar="FOLDER", help="write the checkpoints here (default: a temporary folder)")
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp()
    for shape in args.shapes:
        path, weights = write_checkpoint(folder, shape)
        print(f"{shape}: float32 weights {weights / 2**20:,.0f} MB")
        baseline = None
        for what in ("whole file", "load float32", "load bfloat16", "info", "translate"):
            result = measure(what, path)
            baseline = baseline or result
            print(f"  {what:13s} {result['seconds']:6.2f} s ({result['seconds'] / baseline['seconds']:.2f}× whole "
                  f"file)  +{result['grown'] / 2**20:6,.0f} MB = {result['grown'] / weights:.2f}× the weights "
                  f"(bare torch: {result['torch'] / 2**20:,.0f} MB)")
        if not args.keep:
            os.remove(path)


if __name__ == "__main__":
    main()
