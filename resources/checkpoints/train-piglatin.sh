#!/usr/bin/env bash
# Train the four Pig Latin GRU demo checkpoints exactly as shipped (see README.md beside this file); the
# decoder-only one: train-piglatin-decoder-only.sh.
# The corpus comes from: python -m models.corpora.bible --out data/en-es
#                        python -m models.corpora.piglatin --english data/en-es/train.tsv --out data/piglatin
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--data data/piglatin/train.tsv --valid data/piglatin/valid.tsv --tokenizer char --shared-vocab
        --batch-size 64 --lr 3e-3 --warmup 300 --eval-every 2000 --save-every 2000 --valid-sentences 300
        --set max_len=64)
for arch in ${ARCHS:-gru-additive gru-scaled-dot gru-transformer-decoder gru-none}; do
    name=${arch/gru-none/gru-no-attention}
    extra=(--set hidden=128)
    [ "$arch" = gru-transformer-decoder ] && extra=(--set hidden=128 --set decoder_layers=3)
    attnviz train "${common[@]}" "${extra[@]}" --arch "$arch" --steps "${STEPS:-8000}" --seed 1 \
        --out "resources/checkpoints/piglatin-$name.safetensors" "$@"
done
