"""The old path of :mod:`models.inference.translator`, kept for scripts written against it; new code imports from
``models`` (``from models import load_checkpoint, run, Translator, Ablation``)."""

from .inference.translator import *  # noqa: F403
