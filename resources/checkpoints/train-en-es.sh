#!/usr/bin/env bash
# Train the English→Spanish demo Transformer (pre-LN, docs/architectures.md#pre-ln-transformer) on the Bible corpus.
# Corpus: python -m models.corpora.bible --out data/en-es   (see the top-level README).
# OUT defaults to a folder outside the repository: the trainer state beside the checkpoint is large.
# Re-run with --resume to continue; the same command and seed give the same weights on the same hardware.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/work/enes-train/en-es-transformer.safetensors}
mkdir -p "$(dirname "$out")"
attnviz train --data data/en-es/train.tsv --valid data/en-es/valid.tsv --arch "${ARCH:-transformer-preln}" --out "$out" \
    --tokenizer sentencepiece --vocab-size 8000 --shared-vocab --batch-size 64 --lr 1e-3 --warmup 800 \
    --steps "${STEPS:-20000}" --seed 1 --eval-every 500 --save-every 250 --valid-sentences 100 \
    --set d_model=256 --set heads=4 --set d_ff=1024 --set encoder_layers=3 --set decoder_layers=3 \
    --set max_len=256 --set share_embeddings=true --set tie_output=true --set scale_embedding=true "$@"
