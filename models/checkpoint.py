"""The old path of :mod:`models.storage.checkpoint`, kept for scripts written against it; new code imports from
``models`` (``from models import load_checkpoint, run, Translator, Ablation``)."""

from .storage.checkpoint import *  # noqa: F403
