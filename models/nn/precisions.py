"""The precisions a model's weights are kept in, by name: float32 (exact), bfloat16 or float16 (half the memory;
the model then computes in that precision). No torch here, so the app's state, its views and the command line's
``--dtype`` read the same names; ``models.storage.checkpoint.WEIGHT_DTYPES`` maps them to torch's types."""

PRECISIONS = ("float32", "bfloat16", "float16")
EXACT = PRECISIONS[0]  # the precision checkpoints are written in: the numbers as the model was trained to give them


def rounded_weights_notice(weights: str) -> str:
    """The one line saying that what is shown is computed on weights rounded to ``weights`` (one of
    ``PRECISIONS``), or "" for float32 weights."""
    if weights == EXACT:
        return ""
    return (f"computed on the weights rounded to {weights} (--dtype / Weights): float32 weights give other numbers "
            f"(attention and contributions can move by tenths)")
