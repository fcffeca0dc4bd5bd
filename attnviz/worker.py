"""The model's worker thread: every torch call happens here; only plain data leaves it.

The GUI asks by calling the ``load``/``run`` slots through queued signals and learns the outcome from
the signals below. A newer request makes the running one stop at its next decoding step (the worker
reads ``latest_request``, which the GUI thread sets before it asks); requests that are already stale
when they start are skipped.
"""

from __future__ import annotations

import os
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from PySide6.QtCore import QObject, QThread, Signal, Slot

from models.checkpoint import SUFFIX, load_checkpoint, read_metadata, save_checkpoint
from models.errors import AttnvizError, CheckpointError, ForeignCheckpointError, UnknownCharactersError
from models.importers import Inspection, MissingSettingsError, TrustRequiredError, convert, inspect
from models.translator import Translator

from .session import ModelInfo, Request


def describe(translator: Translator, path: Path) -> ModelInfo:
    import dataclasses

    checkpoint, model = translator.checkpoint, translator.model
    return ModelInfo(
        path=path, arch=model.config.arch, parameters=model.parameter_count(), kinds=tuple(model.kinds),
        config=dataclasses.asdict(model.config), provenance=dict(checkpoint.provenance),
        source_tokenizer=f"{checkpoint.source_tokenizer.kind}, {checkpoint.source_tokenizer.vocab_size} tokens",
        target_tokenizer=f"{checkpoint.target_tokenizer.kind}, {checkpoint.target_tokenizer.vocab_size} tokens",
        device=str(translator.device), max_len=model.config.max_len)


@dataclass(frozen=True)
class ImportAnswer:
    """What the user said about a foreign checkpoint in the import dialog."""

    path: str
    format: str | None
    settings: dict
    src_vocab: str | None
    tgt_vocab: str | None
    trust: bool
    device: str
    inspection: Inspection | None = None


@dataclass(frozen=True)
class ImportQuestion:
    """A foreign checkpoint needs answers: ``inspection`` says what it lacks (None: it needs trust first)."""

    path: str
    inspection: Inspection | None
    problem: str
    previous: ImportAnswer | None = None


def is_native(path: str) -> bool:
    """An attnviz checkpoint (the other files and folders are imported)."""
    if not (path.endswith(SUFFIX) and Path(path).is_file()):
        return False
    try:
        read_metadata(path)
    except ForeignCheckpointError:
        return False
    except CheckpointError:
        return True  # a damaged file: loading it reports what is wrong
    return True


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


class ModelWorker(QObject):
    loaded = Signal(object)  # ModelInfo of a newly opened model
    load_failed = Signal(str)
    import_needed = Signal(object)  # ImportQuestion: a foreign file needs settings, vocabularies or trust
    device_changed = Signal(object)  # ModelInfo after the model moved to another device
    step = Signal(int, object)  # request id, DecodeStep
    finished = Signal(int, object)  # request id, list[DecodeResult]
    failed = Signal(int, str)
    notice = Signal(str)

    def __init__(self):
        super().__init__()
        self.translator: Translator | None = None
        self.latest_request = 0  # written by the GUI thread; an int assignment is atomic in CPython

    @Slot(str, str)
    def load(self, path: str, device: str) -> None:
        """Open an attnviz checkpoint, or import a foreign one (asking for what it lacks)."""
        try:
            checkpoint = load_checkpoint(path) if is_native(path) else self._import_without_asking(path)
            if checkpoint is None:
                return
            self._open(checkpoint, path, device)
        except AttnvizError as failure:
            self.load_failed.emit(str(failure))

    @Slot(object)
    def import_model(self, answer: ImportAnswer) -> None:
        """Convert a foreign checkpoint with the user's answers; a failure asks again, saying why."""
        try:
            checkpoint = convert(answer.path, answer.format, answer.settings, answer.src_vocab, answer.tgt_vocab,
                                 trust=answer.trust)
            self._open(checkpoint, answer.path, answer.device)
        except AttnvizError as failure:
            inspection = failure.inspection if isinstance(failure, MissingSettingsError) else answer.inspection
            self.import_needed.emit(ImportQuestion(answer.path, inspection, str(failure), answer))

    def _import_without_asking(self, path: str):
        """The converted checkpoint, or None after asking the GUI for settings, vocabularies or trust."""
        try:
            inspection = inspect(path)
        except TrustRequiredError as failure:
            self.import_needed.emit(ImportQuestion(path, None, str(failure)))
            return None
        if inspection.missing or inspection.vocabularies:
            self.import_needed.emit(ImportQuestion(path, inspection, ""))
            return None
        return convert(path, inspection.format)

    def _open(self, checkpoint, path: str, device: str) -> None:
        translator = Translator(checkpoint, device or None)
        self.translator = translator
        self.loaded.emit(describe(translator, Path(path)))

    @Slot(str)
    def save(self, path: str) -> None:
        """Write the open model as an attnviz checkpoint (an imported model keeps its answers in it)."""
        if self.translator is None:
            return
        checkpoint = self.translator.checkpoint
        try:
            save_checkpoint(path, checkpoint.model, checkpoint.source_tokenizer, checkpoint.target_tokenizer,
                            checkpoint.provenance)
        except (OSError, AttnvizError) as failure:
            self.notice.emit(f"Could not save {path}: {failure}")
            return
        self.notice.emit(f"Saved {path}")

    @Slot(str)
    def set_device(self, device: str) -> None:
        if self.translator is None:
            return
        try:
            self.translator.to(device or "auto")
        except (AttnvizError, RuntimeError) as failure:
            self.notice.emit(f"Could not move the model to {device}: {failure}")
            return
        self.device_changed.emit(describe(self.translator, self.translator.checkpoint.path))

    @Slot(object)
    def run(self, request: Request) -> None:
        if self.translator is None or request.id != self.latest_request:
            return
        try:
            self._decode(request)
        except AttnvizError as failure:
            self.failed.emit(request.id, str(failure))
        except RuntimeError as failure:
            if not is_out_of_memory(failure) or self.translator.device.type == "cpu":
                raise
            self.translator.to("cpu")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.notice.emit("The GPU ran out of memory; the model now runs on the CPU.")
            self.device_changed.emit(describe(self.translator, self.translator.checkpoint.path))
            self._decode(request)
        except Exception as failure:  # a bug: say so in the window instead of killing the thread
            traceback.print_exc()
            self.failed.emit(request.id, f"internal error: {type(failure).__name__}: {failure}")

    def _decode(self, request: Request) -> None:
        translator = self.translator
        try:
            source = translator.source(request.text)
        except UnknownCharactersError as unknown:
            self.notice.emit(f"{str(unknown)[0].upper()}{str(unknown)[1:]}: shown as <unk>.")
            source = translator.source(request.text, unknown="replace")
        if source.truncated:
            self.notice.emit(f"The text has {source.original_length} tokens; only the first "
                             f"{translator.config.max_len} are used (the model's maximum).")
        target_ids = translator.target(request.target, unknown="replace") if request.mode == "forced" else None
        steps = translator.decode(source, mode=request.mode, beam=request.beam, target_ids=target_ids,
                                  max_len=request.max_len)
        while True:
            if request.id != self.latest_request:
                steps.close()
                return
            try:
                step = next(steps)
            except StopIteration as stop:
                self.finished.emit(request.id, stop.value)
                return
            self.step.emit(request.id, step)


class WorkerThread:
    """Owns the QThread and the worker living in it; ``close`` aborts, quits and waits."""

    live: "weakref.WeakSet[WorkerThread]" = weakref.WeakSet()  # lets tests prove no thread outlives its window

    def __init__(self):
        self.thread = QThread()
        self.thread.setObjectName("attnviz-model")
        self.worker = ModelWorker()
        self.worker.moveToThread(self.thread)
        self.thread.start()
        WorkerThread.live.add(self)

    def close(self) -> None:
        self.worker.latest_request = -1
        self.thread.quit()
        self.thread.wait()


def leave_a_core_for_the_gui() -> None:
    """torch on all cores starves the GUI thread on small machines (DESIGN §3)."""
    cores = os.cpu_count() or 1
    torch.set_num_threads(max(1, cores - 1))
