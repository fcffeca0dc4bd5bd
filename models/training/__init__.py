"""Training a model on PAIRS.tsv corpora."""
