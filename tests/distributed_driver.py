"""What ``attnviz train`` does, as a script ``torchrun`` can start: read PAIRS.tsv, split, build tokenizers
and a model config, train. tests/test_distributed.py runs it in two processes.

    python -m torch.distributed.run --nproc_per_node 2 --standalone tests/distributed_driver.py \\
        --data PAIRS.tsv --arch gru-additive --out OUT.safetensors --steps 5
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's models/, not an installed one

from models import make_config
from models.text.pairs import read_pairs
from models.text.splits import split_pairs
from models.training.trainer import TrainingConfig, build_tokenizers, train

TINY = {"transformer": dict(d_model=32, heads=2, d_ff=64, encoder_layers=1, decoder_layers=1),
        "gru": dict(hidden=48, decoder_layers=1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    train_pairs, valid_pairs = split_pairs(read_pairs(args.data), 0.2, seed=args.seed)
    source, target = build_tokenizers(train_pairs)
    model_config = make_config(args.arch, source.vocab_size, target.vocab_size, max_len=16, dropout=args.dropout,
                               **TINY[args.arch.split("-")[0]])
    config = TrainingConfig(steps=args.steps, batch_size=args.batch_size, learning_rate=5e-3, warmup_steps=2,
                            eval_every=2, save_every=3, validation_sentences=2, seed=args.seed, device="cpu",
                            progress=False)
    summary = train(model_config, source, target, train_pairs, valid_pairs, out_path=args.out, config=config,
                    provenance={"corpus": args.data, "rank": os.environ.get("RANK", "0")})
    print(f"rank {os.environ.get('RANK', '0')} of {os.environ.get('WORLD_SIZE', '1')}: step {summary.step} "
          f"train loss {summary.train_loss:.4f} valid loss {summary.valid_loss}", flush=True)


if __name__ == "__main__":
    main()
