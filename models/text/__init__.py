"""Text in and out: normalisation, tokenizers, and PAIRS.tsv corpora."""

# Each tokenizer kind registers itself when its module is imported; importing them all here means
# Tokenizer.from_dict knows every kind whichever of these modules a caller imported.
from . import tokenizers as _every_kind  # noqa: F401
