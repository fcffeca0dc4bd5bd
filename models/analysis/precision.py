"""What the precision a model's weights are kept in means for the numbers computed from them. No torch: the
window's state reads it too."""

from __future__ import annotations

EXACT = "float32"  # the precision checkpoints are written in: the numbers as the model was trained to give them


def rounded_weights_notice(weights: str) -> str:
    """The one line saying that what is shown is computed on weights rounded to ``weights`` (a name of
    models/storage/checkpoint.py ``WEIGHT_DTYPES``), or "" for float32 weights."""
    if weights == EXACT:
        return ""
    return (f"computed on the weights rounded to {weights} (--dtype / Weights): float32 weights give other numbers "
            f"(attention and contributions can move by tenths)")
