"""The old path of :mod:`models.inference.decoding`, kept for scripts written against it; new code imports from
``models`` (``from models import load_checkpoint, run, Translator, Ablation``)."""

from .inference.decoding import *  # noqa: F403
