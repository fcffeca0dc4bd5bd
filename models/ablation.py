"""The old path of :mod:`models.nn.ablation`, kept for scripts written against it; new code imports from
``models`` (``from models import load_checkpoint, run, Translator, Ablation``)."""

from .nn.ablation import *  # noqa: F403
