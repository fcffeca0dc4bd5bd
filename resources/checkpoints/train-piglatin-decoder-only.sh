#!/usr/bin/env bash
# Train the decoder-only Pig Latin demo checkpoint exactly as shipped (see README.md beside this file).
# Its corpus is built from files in this repository alone (no SWORD modules): the whole-word pieces of the
# English→Spanish demo's vocabulary and the demos' inputs, hash-split (models/corpora/piglatin.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python -m models.corpora.piglatin --vocabulary resources/checkpoints/en-es-transformer.safetensors \
    --demos resources/checkpoints/demos.json --out data/piglatin-words
attnviz train --data data/piglatin-words/train.tsv --valid data/piglatin-words/valid.tsv --arch decoder-only \
    --tokenizer char --batch-size 64 --lr 2e-3 --warmup 400 --steps "${STEPS:-3000}" --seed 1 \
    --eval-every 1000 --save-every 1000 --valid-sentences 200 \
    --set d_model=128 --set layers=4 --set heads=4 --set d_ff=256 --set max_len=64 \
    --out "${OUT:-resources/checkpoints/piglatin-decoder-only.safetensors}" "$@"
