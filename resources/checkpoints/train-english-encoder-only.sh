#!/usr/bin/env bash
# Train the encoder-only demo checkpoint exactly as shipped (see README.md beside this file): a masked-language model
# on the characters of the English words and phrases of the decoder-only Pig Latin demo's corpus (their source side),
# built from files in this repository alone (models/corpora/piglatin.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python -m models.corpora.piglatin --vocabulary resources/checkpoints/en-es-transformer.safetensors \
    --demos resources/checkpoints/demos.json --out data/piglatin-words
attnviz train --data data/piglatin-words/train.tsv --valid data/piglatin-words/valid.tsv --arch encoder-only \
    --tokenizer char --batch-size 64 --lr 2e-3 --warmup 400 --label-smoothing 0 --steps "${STEPS:-8000}" --seed 1 \
    --eval-every 1000 --save-every 1000 \
    --set d_model=128 --set layers=4 --set heads=4 --set d_ff=256 --set max_len=64 \
    --out "${OUT:-resources/checkpoints/english-encoder-only.safetensors}" "$@"
