"""The precisions a model's weights are kept in, by name: float32 (exact), bfloat16 or float16 (half the memory;
the model then computes in that precision). No torch here, so the app's state, its views and the command line's
``--dtype`` read the same names; ``models.storage.checkpoint.WEIGHT_DTYPES`` maps them to torch's types."""

PRECISIONS = ("float32", "bfloat16", "float16")
EXACT = PRECISIONS[0]
