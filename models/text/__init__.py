"""Text in and out: normalisation, tokenizers, and PAIRS.tsv corpora."""
