"""Text in, decoding steps and traces out: the one entry point the CLI and the GUI share.

A ``Translator`` holds a loaded checkpoint on a device. It tokenises (truncating to the model's
maximum length, and saying so), runs greedy, beam or forced decoding, and fills each result's text
with the target tokenizer's detokenisation.

A decoder-only model's source is its prompt (models/inference/prompts.py): tokenised as its tokenizer frames a prompt
(Llama's tokenizer.json puts its bos first, as transformers' tokenizer does), never truncated (a prompt that leaves no
room in the model's context is one line), and each result's text is the continuation's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

from ..nn.ablation import NO_ABLATION, Ablation
from ..storage.checkpoint import Checkpoint, available_memory
from ..trace.records import DecodeResult
from .batched import decode_batch
from .decoding import DECODERS, Capture, Search, Steps, finish
from .modes import MODE_NAMES, Mode, decoding_mode
from .prompts import continuation_room, prompted
from ..errors import AttnvizError, EmptyInputError, InputError
from ..text.chat import ChatTemplate, chat_messages


class DeviceError(AttnvizError):
    """A device that does not exist on this machine."""


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def available_devices() -> list[str]:
    """The kinds of device this machine has: always ``cpu``, then ``cuda`` and ``mps`` where present."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if _mps_available() else [])


def default_device() -> str:
    """``cuda`` if available, else ``mps``, else ``cpu``."""
    devices = available_devices()
    return "cuda" if "cuda" in devices else "mps" if "mps" in devices else "cpu"


def resolve_device(name: str | None) -> torch.device:
    """The device ``name`` asks for (``None`` or ``"auto"``: :func:`default_device`), checked to exist."""
    name = default_device() if name in (None, "", "auto") else name
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(f"unknown device {name!r} (use cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise DeviceError(f"device {name!r} is not available: this machine has no such CUDA device")
    if device.type == "mps" and not _mps_available():
        raise DeviceError("device 'mps' is not available on this machine")
    return device


TF32_VARIABLE = "ATTNVIZ_TF32"  # set to 1: float32 on a GPU may use TF32 (the window's setting; the CLI's --tf32)


def float32_precision(*, tf32: bool | None = None) -> bool:
    """The one rule for float32 on a GPU, applied wherever a model is placed on a device: exact, TF32 off for
    matrix products and for cuDNN's recurrent layers and convolutions (on by default in torch: it moved the GRU
    demos' attention by up to 2.9e-4 and their probabilities by 3.8e-4 from the CPU's; off, 1.4e-5), unless
    ``tf32`` asks for speed over exactness (None: the ``ATTNVIZ_TF32`` environment variable set to 1). The flags
    are the process's; returns whether TF32 is allowed."""
    if tf32 is None:
        tf32 = os.environ.get(TF32_VARIABLE, "").strip() == "1"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return tf32


def idle_cores(cores: int, load: float, *, keep_free: int = 0) -> int:
    """How many threads torch's CPU operations should use: the cores the rest of the machine leaves idle (``load``:
    its 1-minute load average), less ``keep_free`` kept for another thread of this process, at least one."""
    return max(1, cores - keep_free - round(load))


def use_idle_cores(*, keep_free: int = 0) -> int:
    """Lower torch's CPU thread count to :func:`idle_cores` (never raise it: a count chosen already, or an
    ``OMP_NUM_THREADS`` the user or torchrun set, stands) and return it. A parallel operation waits for its
    slowest thread, so on a loaded machine a thread the scheduler sets aside stalls every matrix product: one
    opus-mt-tc-big-sized sentence took 2.8 s on one thread and 12 s on two while other work kept both cores busy."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average; elsewhere it may be unavailable
        load = 0.0
    threads = min(torch.get_num_threads(), idle_cores(os.cpu_count() or 1, load, keep_free=keep_free))
    torch.set_num_threads(threads)
    return threads


@dataclass
class SourceInput:
    """Token ids ready for the encoder; ``original_length`` > ``len(ids)`` when the text was truncated.

    ``unknown``: the characters the vocabulary has no token for (sorted, distinct; they became its unknown
    token); ``labels``: when there are some, the encoder positions' labels with each unknown token shown
    as the text it stands for, ``⟨"⟩``.
    """

    ids: list[int]
    original_length: int
    unknown: list[str] = field(default_factory=list)
    labels: list[str] | None = None

    @property
    def truncated(self) -> bool:
        return self.original_length > len(self.ids)

    def unknown_notice(self) -> str:
        """What the command line and the window say of the characters that became the unknown token ("" when
        none did)."""
        if not self.unknown:
            return ""
        shown = " ".join(repr(character) for character in self.unknown[:10])
        return f"the model's vocabulary has no token for {shown}; each became its unknown token"

    def truncation_notice(self, limit: int) -> str:
        """What the command line and the window say of a text cut to the model's ``limit`` tokens ("" when it was
        not), after the text's name."""
        if not self.truncated:
            return ""
        return f"has {self.original_length} tokens; only the first {limit} are used (the model's maximum length)"


class Translator:
    def __init__(self, checkpoint: Checkpoint, device: str | torch.device | None = None, *, tf32: bool | None = None):
        """``tf32``: float32 on a GPU may use TF32 (see :func:`float32_precision`; None: as the environment says)."""
        self.checkpoint = checkpoint
        self.device = resolve_device(device) if not isinstance(device, torch.device) else device
        self.tf32 = tf32
        float32_precision(tf32=tf32)
        self.model = checkpoint.model.to(self.device).eval()
        self.source_tokenizer = checkpoint.source_tokenizer
        self.target_tokenizer = checkpoint.target_tokenizer

    @property
    def config(self):
        return self.model.config

    def to(self, device: str | torch.device) -> "Translator":
        self.device = resolve_device(device) if not isinstance(device, torch.device) else device
        float32_precision(tf32=self.tf32)
        self.model.to(self.device)
        return self

    @property
    def languages(self) -> list[str]:
        """The language codes the model reads and writes (multilingual models), sorted; else empty."""
        return sorted(set(self.source_tokenizer.languages) | set(self.target_tokenizer.languages))

    def set_languages(self, source: str | None = None, target: str | None = None) -> None:
        """Choose the source and/or target language (codes of :attr:`languages`); one line when unknown."""
        for tokenizer, code in ((self.source_tokenizer, source), (self.target_tokenizer, target)):
            if code is not None:
                tokenizer.set_language(code)

    def source(self, text: str, *, unknown: str = "replace", framed: bool = True) -> SourceInput:
        """Encode the source text as the training text was written (models/text/normalize.py); keeps the first
        ``max_len`` tokens (the end token included). Characters the vocabulary still lacks become its
        unknown token (``unknown="error"``: refused instead). ``framed=False``: a text already laid out as the model
        reads it (a rendered chat prompt, :meth:`chat_prompt`), encoded as it is: not normalised, and without the
        special tokens the tokenizer frames a text with (the template writes its own)."""
        tokenizer = self.source_tokenizer if framed else getattr(self.source_tokenizer, "unframed",
                                                                lambda: self.source_tokenizer)()
        text = tokenizer.normalize(text) if framed else text
        ids = tokenizer.encode(text, unknown=unknown)
        missing, labels = [], None
        if tokenizer.unk_id is not None and tokenizer.unk_id in ids:
            missing = sorted({character for character in text if not tokenizer.knows(character)})
            surfaces = iter(tokenizer.unknown_surfaces(text, ids))
            labels = [f"⟨{next(surfaces, '?')}⟩" if token_id == tokenizer.unk_id else tokenizer.token(token_id)
                      for token_id in ids]
        if self.config.src_append_eos:
            ids = ids + [self.config.eos_id]
            labels = labels + [tokenizer.token(self.config.eos_id)] if labels is not None else None
        if getattr(self.config, "prompt_separator", False):  # trained here: a prompt is the source, then <s>
            ids = ids + [self.config.bos_id]
            labels = labels + [tokenizer.token(self.config.bos_id)] if labels is not None else None
        limit = self.config.max_len
        if self.decoder_only:  # a prompt is never cut: its end is what the continuation follows
            continuation_room(self.config, len(ids))
        if len(ids) <= limit:
            return SourceInput(ids, len(ids), unknown=missing, labels=labels)
        # the end token stays last: appended here, or framing an encoder-only model's sentence ([SEP], </s>)
        keeps_end = self.config.src_append_eos or (not self.model.decodes and ids[-1] == self.config.eos_id)
        kept = ids[: limit - 1] + ids[-1:] if keeps_end else ids[:limit]
        if labels is not None:
            labels = labels[: limit - 1] + labels[-1:] if keeps_end else labels[:limit]
        return SourceInput(kept, len(ids), unknown=missing, labels=labels)

    @property
    def has_chat(self) -> bool:
        """Whether the model has a chat template (:meth:`chat_source`)."""
        return self.checkpoint.chat_template is not None and self.decoder_only

    def chat_source(self, text: str, system: str | None = None, *, unknown: str = "replace") -> SourceInput:
        """``text`` as the user's turn laid out by the model's chat template (:meth:`chat_prompt`), encoded."""
        return self.source(self.chat_prompt(text, system), unknown=unknown, framed=False)

    def chat_prompt(self, text: str, system: str | None = None) -> str:
        """``text`` as the user's message (after ``system``'s) laid out by the model's chat template, ending with the
        opening of the assistant's turn, to be encoded with ``source(..., framed=False)`` as transformers'
        ``apply_chat_template(add_generation_prompt=True, tokenize=True)`` does; one line when the model has no
        chat template."""
        if not self.has_chat:
            raise InputError("this model has no chat template (only a chat-tuned language model's folder brings one)")
        template = ChatTemplate.from_dict(self.checkpoint.chat_template)
        return template.render(chat_messages(text, system), add_generation_prompt=True)

    @property
    def decoder_only(self) -> bool:
        """Whether the model continues a prompt (its source) rather than translating a source."""
        return prompted(self.config)

    def target(self, text: str, *, unknown: str = "replace") -> list[int]:
        ids = self.target_tokenizer.encode(self.target_tokenizer.normalize(text), unknown=unknown)
        if not ids:
            raise EmptyInputError("the target text is empty")
        return ids

    def trace_size(self, source: SourceInput, *, mode: str = Mode.GREEDY, beam: int = 4,
                   target_ids: list[int] | None = None, max_len: int | None = None) -> int:
        """Bytes of float32 attention a run of :meth:`decode` keeps at most: every kind, layer and head, the
        output as long as it may get (``max_len``, or the target), a beam's rows for each hypothesis; a decoder-only
        model's one ``dec_self`` square over every position fed (the prompt, then the output but its last token)."""
        first = len(self.target_tokenizer.first_tokens())
        room = self.config.max_len - len(source.ids) if self.decoder_only else self.config.max_len
        if mode == Mode.FORCED:
            target = first + len(target_ids or []) + 1
        else:
            target = min(max_len or room, room)
        source_len = len(source.ids)
        # A beam keeps at most every row of its steps and the trace of each hypothesis shown (the best at first); a
        # decoder-only model's beam also carries up to ``beam`` finished ones (models/inference/finished_beams.py).
        hypotheses = (2 * beam if self.decoder_only else beam) + 1 if mode == Mode.BEAM else 1
        fed = source_len - 1 + target if self.decoder_only else target  # a prompt's dec_self square: every position
        cells = {"enc_self": source_len * source_len, "dec_self": fed * fed * hypotheses,
                 "cross": target * source_len * hypotheses}
        return 4 * sum(layers * heads * cells[kind] for kind, (layers, heads) in self.model.attention_shape().items())

    @staticmethod
    def check_room_for(size: int, *, dtype: type = np.float32, what: str = "this run's attention") -> None:
        """One line, before anything is computed, when ``size`` bytes of float32 attention (:meth:`trace_size`), kept
        as ``dtype`` (float16: half), would not fit in the memory the system has free: the process would be killed
        part way. Where the system does not say what is free, nothing is checked."""
        half = np.dtype(dtype) == np.float16
        kept, available = size // 2 if half else size, available_memory()
        if available is not None and kept > available:
            raise InputError(f"{what} would take ~{kept / 2**30:.1f} GB{' at half precision' if half else ''}, and "
                             f"{available / 2**30:.1f} GB of memory is free: shorten the input or the output")

    def checked_pass_size(self, src_ids: list[int], output_ids: list[int]) -> int:
        """Bytes of float32 attention of one teacher-forced pass that feeds ``output_ids`` after ``src_ids`` (a traced
        pass: models/analysis/contributions.py keeps its weights at float32), refused in one line where they would
        not fit in the free memory."""
        size = self.trace_size(SourceInput(list(src_ids), len(src_ids)), mode=Mode.FORCED, target_ids=list(output_ids))
        self.check_room_for(size, what="this pass's float32 attention")
        return size

    def decode(self, source: SourceInput, *, mode: str = Mode.GREEDY, beam: int = 4,
               length_penalty: float | None = None, target_ids: list[int] | None = None, max_len: int | None = None,
               top_k: int = 10, need_weights: bool = True, ablation: Ablation = NO_ABLATION,
               dtype: type = np.float32) -> Steps:
        """A decoding generator (see models.inference.decoding) whose results carry detokenised text; ``ablation``
        switches heads off (models/nn/ablation.py) and is checked against the model before anything runs.
        ``dtype``: the number type the trace is kept in (float16 halves it; see :meth:`trace_size`).
        ``length_penalty`` None: 0.6 (GNMT's), a decoder-only model's 1.0 (transformers' default)."""
        ablation.validate(self.model.attention_shape())
        if mode not in DECODERS:
            raise ValueError(f"mode must be one of {MODE_NAMES}")
        capture = Capture(label=self.target_tokenizer.token, source_tokens=self.source_labels(source), top_k=top_k,
                          need_weights=need_weights, max_len=max_len, dtype=dtype, ablation=ablation)
        if length_penalty is None:
            length_penalty = 1.0 if self.decoder_only else 0.6
        # the target language's code, where the model needs one, starts every output
        search = Search(beam=beam, length_penalty=length_penalty, first=self.target_tokenizer.first_tokens(),
                        target=target_ids)
        return self._with_text(DECODERS[Mode(mode)](self.model, source.ids, capture, search), source)

    def decode_batch(self, sources: list[SourceInput], *, mode: str = Mode.GREEDY, beam: int = 4,
                     length_penalty: float | None = None, max_len: int | None = None, top_k: int = 10,
                     need_weights: bool = False, ablation: Ablation = NO_ABLATION,
                     dtype: type = np.float32) -> list[list[DecodeResult]]:
        """Greedy or beam decoding of ``sources`` in one batch (models/inference/batched.py): per source its results
        with their text, best first, as :meth:`decode` gives them one at a time."""
        ablation.validate(self.model.attention_shape())
        if length_penalty is None:
            length_penalty = 1.0 if self.decoder_only else 0.6
        captures = [Capture(label=self.target_tokenizer.token, source_tokens=self.source_labels(source), top_k=top_k,
                            need_weights=need_weights, max_len=max_len, dtype=dtype, ablation=ablation)
                    for source in sources]
        search = Search(beam=beam, length_penalty=length_penalty, first=self.target_tokenizer.first_tokens())
        found = decode_batch(self.model, [source.ids for source in sources], captures, search=search, mode=Mode(mode))
        for source, results in zip(sources, found):
            for result in results:
                result.text = self.target_tokenizer.decode(result.token_ids)
                result.truncated_source = source.truncated
        return found

    def source_labels(self, source: SourceInput) -> list[str]:
        """How a run's trace labels the encoder positions: the tokens, an unknown one as the text it stands for."""
        return list(source.labels) if source.labels is not None else [
            self.source_tokenizer.token(int(index)) for index in source.ids]

    def _with_text(self, steps: Steps, source: SourceInput) -> Steps:
        results = yield from steps
        for result in results:
            result.text = self.target_tokenizer.decode(result.token_ids)
            result.truncated_source = source.truncated
        return results

    def translate(self, text: str, *, beam: int = 1, max_len: int | None = None, need_weights: bool = False,
                  unknown: str = "replace", ablation: Ablation = NO_ABLATION):
        """The best result for ``text`` (greedy when ``beam`` is 1)."""
        source = self.source(text, unknown=unknown)
        return finish(self.decode(source, mode=decoding_mode(beam), beam=beam, max_len=max_len,
                                  need_weights=need_weights, ablation=ablation))[0]
