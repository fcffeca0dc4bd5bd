"""Training: teacher forcing, AdamW, warm-up + inverse-square-root schedule, validation, checkpoints, resume.

    source, target = build_tokenizers(pairs, "char")
    config = make_config("transformer-preln", source.vocab_size, target.vocab_size)
    summary = train(config, source, target, train_pairs, valid_pairs, out_path="out.safetensors",
                    config=TrainingConfig(steps=2000))

Batches hold ``batch_size`` sentence pairs in all (across processes) and are formed per epoch from a
permutation that depends on ``(seed, epoch)`` alone, so ``(epoch, batch index)`` is the whole data position
a resumed run needs. Pairs of similar length are batched together (less padding).

Resume: next to ``OUT.safetensors`` lives ``OUT.train-state.safetensors``: optimizer moments and RNG
states as tensors, everything else (step, data position, schedule, settings) as JSON in its metadata. No
pickle. Training N steps straight and training N/2, stopping and resuming give bit-identical weights.

Distributed: under ``torchrun --nproc_per_node N`` (env ``WORLD_SIZE`` > 1) each process takes every N-th
pair of each global batch, DistributedDataParallel averages the gradients, and only rank 0 validates,
saves and prints. With one process none of that happens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..nn.base import Seq2Seq
from ..storage.checkpoint import Checkpoint, save_checkpoint, unique_tensors
from ..nn.config import DecoderOnlyConfig, ModelConfig, TrainingConfig, config_to_dict
from ..nn.build import build_model
from ..inference.batches import Batch, Example, collate, encode_pairs, sequence_length
from ..text.pairs import Pair
from ..text.splits import derived_seed
from .batches import BatchStream
from ..errors import CheckpointError, ConfigError
from ..storage.files import check_output_folder, read_safetensors, remove_stale_partials
from ..storage.tensor_files import write_safetensors
from ..storage.snapshots import snapshot_folder, snapshot_path, snapshot_provenance, snapshot_steps
from ..text.scores import bleu_name, corpus_scores
from ..text.tokenizers import CharTokenizer, SentencePieceTokenizer, Tokenizer
from ..inference.distributed import Processes, launched_processes
from ..inference.translator import Translator, resolve_device

STATE_SUFFIX = ".train-state.safetensors"
STATE_FORMAT = "attnviz-train-state"
STATE_VERSION = 2  # 2: the state holds the weights and tokenizers (one consistent file)
ADAM_BETAS = (0.9, 0.98)  # the Transformer paper's; a shorter second-moment memory suits warm-up
WEIGHT_DECAY = 0.01
TOKENIZER_KINDS = ("char", "sentencepiece")
# Settings that change the weights; a resumed run must use the ones it started with.
_RESUME_FIXED = ("batch_size", "learning_rate", "warmup_steps", "label_smoothing", "clip_norm", "seed")


@dataclass
class TrainingSummary:
    """Where training ended. ``train_loss``: the training objective (label-smoothed cross-entropy per
    target token) averaged since the previous validation; ``valid_loss``: plain cross-entropy per token;
    chrF and BLEU in 0..100, BLEU on characters for a character-level target (``bleu_name`` "char_bleu", the
    metric's name in the provenance; models/text/scores.py). Validation metrics are None without validation pairs
    (and off rank 0)."""

    step: int
    train_loss: float | None
    valid_loss: float | None
    chrf: float | None
    bleu: float | None
    seconds: float
    checkpoint: Path
    model: Seq2Seq = field(repr=False)  # the trained model, in eval mode
    bleu_name: str = "bleu"


def state_path(out_path: str | Path) -> Path:
    """The training state file that belongs to checkpoint ``out_path``."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.stem + STATE_SUFFIX)


def build_tokenizers(pairs: Sequence[Pair], kind: str = "char", vocab_size: int = 8000,
                     shared: bool = False) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers built from ``pairs``; ``shared`` builds one from both sides."""
    if kind not in TOKENIZER_KINDS:
        raise ConfigError(f"tokenizer must be one of {', '.join(TOKENIZER_KINDS)}; got {kind!r}")
    if not pairs:
        raise ConfigError("cannot build tokenizers from a corpus with no pairs")
    sources, targets = [source for source, _ in pairs], [target for _, target in pairs]

    def build(texts: list[str]) -> Tokenizer:
        if kind == "char":
            return CharTokenizer.build(texts)
        return SentencePieceTokenizer.train(texts, vocab_size)

    if shared:
        tokenizer = build(sources + targets)
        return tokenizer, tokenizer
    return build(sources), build(targets)


def learning_rate_at(step: int, peak: float, warmup_steps: int) -> float:
    """Learning rate of 1-based ``step``: linear to ``peak`` at ``warmup_steps``, then ``peak·√(warmup/step)``
    (without warm-up, ``peak/√step``). It does not depend on the total step count, so resuming with more
    steps continues the same curve."""
    if step <= warmup_steps:
        return peak * step / warmup_steps
    return peak * math.sqrt(max(warmup_steps, 1) / step)


def train(model_config: ModelConfig, source_tokenizer: Tokenizer, target_tokenizer: Tokenizer,
          train_pairs: Sequence[Pair], valid_pairs: Sequence[Pair], *, out_path: str | Path,
          config: TrainingConfig, provenance: dict[str, Any] | None = None,
          resume: bool = False) -> TrainingSummary:
    """Train a fresh model (or resume the one at ``out_path``) for ``config.steps`` steps in all; the
    checkpoint is written every ``save_every`` steps and at the end."""
    config.validate()
    model_config.validate()
    check_output_folder(out_path)  # before any work: a typo in --out must not cost the whole run
    for owned in (out_path, state_path(out_path)):  # what a run killed outright while saving left behind
        remove_stale_partials(owned)
    _check_tokenizers(model_config, source_tokenizer, target_tokenizer)
    if not train_pairs:
        raise ConfigError("the training corpus has no pairs")
    train_examples = encode_pairs(train_pairs, source_tokenizer, target=target_tokenizer, model_config=model_config,
                                  name="training")
    valid_examples = encode_pairs(valid_pairs, source_tokenizer, target=target_tokenizer, model_config=model_config,
                                  name="validation")
    processes = _join_processes(config)
    with _terminate_as_exit():
        try:
            trainer = _Trainer(model_config, (source_tokenizer, target_tokenizer), train_examples=train_examples,
                               valid=(list(valid_pairs), valid_examples), out_path=Path(out_path), config=config,
                               processes=processes, provenance=provenance)
            if resume:
                trainer.restore()
            else:
                trainer.start_snapshots()
            return trainer.run()
        finally:
            processes.finish()


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM (``kill``, a job scheduler stopping the run) ends training as Ctrl+C does: through the
    ``finally`` blocks, so a checkpoint or state being written is not left half-written beside the old one.
    Python's default would end the process on the spot. Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_tokenizers(model_config: ModelConfig, source: Tokenizer, target: Tokenizer) -> None:
    if (source.vocab_size, target.vocab_size) != (model_config.src_vocab_size, model_config.tgt_vocab_size):
        raise ConfigError(f"the tokenizers' vocabularies ({source.vocab_size}, {target.vocab_size}) do not match "
                          f"the model config's ({model_config.src_vocab_size}, {model_config.tgt_vocab_size})")
    if isinstance(model_config, DecoderOnlyConfig) and source.to_dict() != target.to_dict():
        raise ConfigError("a decoder-only model reads the prompt and the continuation with one tokenizer; build "
                          "them with shared=True (attnviz train: --shared-vocab, implied by --arch decoder-only)")
    expected = (target.pad_id, target.bos_id, target.eos_id)
    found = (model_config.pad_id, model_config.bos_id, model_config.eos_id)
    if found != expected:
        raise ConfigError(f"the model config's pad/bos/eos ids {found} differ from the tokenizer's {expected}")


def _loss_sum(model: torch.nn.Module, batch: Batch, pad_id: int, label_smoothing: float) -> Tensor:
    """Cross-entropy summed over the batch's target tokens (padding ignored); a decoder-only model's logits are
    those of its separator and target positions (models/inference/batches.py): the prompt is never scored."""
    logits, _ = model(batch.src, batch.tgt_in)  # [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=pad_id,
                           label_smoothing=label_smoothing, reduction="sum")


def _join_processes(config: TrainingConfig) -> Processes:
    """The processes torchrun started (models/inference/distributed.py), each to take a share of every batch."""
    world = launched_processes()
    if world > 1 and config.batch_size < world:
        raise ConfigError(f"batch_size ({config.batch_size}) must be at least the number of processes ({world})")
    return Processes.join(resolve_device(config.device))


class _Trainer:
    """One training run: the model, its optimizer, the data position and the metrics so far."""

    def __init__(self, model_config: ModelConfig, tokenizers: tuple[Tokenizer, Tokenizer], *,
                 train_examples: list[Example], valid: tuple[list[Pair], list[Example]], out_path: Path,
                 config: TrainingConfig, processes: Processes, provenance: dict[str, Any] | None):
        self.model_config, self.tokenizers, self.config = model_config, tokenizers, config
        self.train_examples, (self.valid_pairs, self.valid_examples) = train_examples, valid
        self.out_path, self.processes, self.caller_provenance = out_path, processes, dict(provenance or {})
        self.device = processes.device
        torch.manual_seed(config.seed)  # the initial weights are the same in every process
        self.model = build_model(model_config).to(self.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate, betas=ADAM_BETAS,
                                           weight_decay=WEIGHT_DECAY)
        lengths = [sequence_length(example, model_config) for example in train_examples]
        self.stream = BatchStream(lengths, config.batch_size, config.seed)
        self.step, self.seconds_before, self.started = 0, 0.0, time.perf_counter()
        self.window = [0.0, 0]  # training loss sum and token count since the last validation
        self.bleu_name = bleu_name(self.characters)
        self.metrics: dict[str, float | None] = {"train_loss": None, "valid_loss": None, "chrf": None,
                                                 self.bleu_name: None}
        self.snapshot_steps = set(snapshot_steps(config.steps, config.snapshots))
        torch.manual_seed(derived_seed(config.seed, "dropout", processes.rank))

    def run(self) -> TrainingSummary:
        config, processes = self.config, self.processes
        network = self.model
        if processes.world > 1:
            network = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                broadcast_buffers=False)  # the only buffers are constant position tables
        self.started = time.perf_counter()
        with tqdm(total=config.steps, initial=min(self.step, config.steps), desc="training", unit="step",
                  disable=not (config.progress and processes.main), dynamic_ncols=True) as bar:
            while self.step < config.steps:
                loss, rate = self._train_step(network)
                bar.set_postfix({"smoothed loss" if config.label_smoothing else "loss": f"{loss:.3f}",
                                 "lr": f"{rate:.2e}"}, refresh=False)
                bar.update(1)
                last = self.step == config.steps  # validated before saved: the checkpoint gets its metrics
                if last or (config.eval_every and self.step % config.eval_every == 0):
                    self._evaluate(bar)
                if self.step in self.snapshot_steps:  # before the state: a state's step implies its snapshots
                    self._snapshot()
                if last or (config.save_every and self.step % config.save_every == 0):
                    self._save()
        self.model.eval()
        return TrainingSummary(step=self.step, train_loss=self.metrics["train_loss"],
                               valid_loss=self.metrics["valid_loss"], chrf=self.metrics["chrf"],
                               bleu=self.metrics.get(self.bleu_name), bleu_name=self.bleu_name,
                               seconds=self._seconds(), checkpoint=self.out_path,
                               model=self.model)

    def _seconds(self) -> float:
        """Training time of this checkpoint so far, resumed runs included."""
        return self.seconds_before + time.perf_counter() - self.started

    def _train_step(self, network: torch.nn.Module) -> tuple[float, float]:
        """One optimizer step on the next global batch; returns its loss per token and the learning rate."""
        config, processes = self.config, self.processes
        indices = self.stream.next()
        global_tokens = sum(len(self.train_examples[i][1]) + 1 for i in indices)
        share = collate([self.train_examples[i] for i in indices[processes.rank:: processes.world]],
                        self.model_config, self.device)
        rate = learning_rate_at(self.step + 1, config.learning_rate, config.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        loss_sum = _loss_sum(network, share, pad_id=self.model_config.pad_id, label_smoothing=config.label_smoothing)
        # DDP averages gradients over processes; scaling by the world size makes that average the gradient
        # of the whole batch's loss per token.
        (loss_sum * processes.world / global_tokens).backward()
        if config.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        total = float(processes.sum(loss_sum.detach()))
        self.window[0] += total
        self.window[1] += global_tokens
        return total / global_tokens, rate

    def _evaluate(self, bar: tqdm) -> None:
        """Rank 0: training loss since the last validation, validation loss, greedy chrF and BLEU."""
        if self.window[1]:
            self.metrics["train_loss"] = self.window[0] / self.window[1]
        self.window = [0.0, 0]
        if not self.processes.main or not self.valid_examples:
            return
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # validation must not change the training's randomness
            try:
                self.model.eval()
                self.metrics["valid_loss"] = _validation_loss(self.model, self.valid_examples,
                                                              batch_size=self.config.batch_size,
                                                              device=self.device)
                if self.config.validation_sentences:
                    pairs = self.valid_pairs[: self.config.validation_sentences]
                    self.metrics["chrf"], self.metrics[self.bleu_name] = _decode_scores(self.model, self.tokenizers,
                                                                                pairs=pairs,
                                                                                device=self.device)
            finally:
                self.model.train()
        # Printed with or without the bar: in a background run's log these lines are the record.
        bar.write(progress_line(self.step, self._seconds(), self.metrics, label_smoothing=self.config.label_smoothing),
                  file=sys.stderr)

    @property
    def characters(self) -> bool:
        """Whether the target side is characters (its BLEU then counts character n-grams)."""
        return self.tokenizers[1].kind == "char"

    def _provenance(self) -> dict[str, Any]:
        training = {name: value for name, value in dataclasses.asdict(self.config).items()
                    if name not in ("device", "progress")}
        return {**self.caller_provenance, "arch": self.model_config.arch, "steps": self.step,
                "train_pairs": len(self.train_examples), "valid_pairs": len(self.valid_examples),
                "metrics": dict(self.metrics), "seconds": round(self._seconds(), 3), "device": str(self.device),
                "processes": self.processes.world, "torch_version": torch.__version__, "training": training}

    def start_snapshots(self) -> None:
        """A fresh run with snapshots: the folder beside the checkpoint, emptied of an earlier run's steps."""
        if not (self.config.snapshots and self.processes.main):
            return
        folder = snapshot_folder(self.out_path)
        folder.mkdir(exist_ok=True)
        for old in folder.glob("step-*.safetensors"):
            old.unlink()

    def _snapshot(self) -> None:
        """The weights now as a float16 checkpoint in the snapshot folder (rank 0 writes)."""
        if self.processes.main:
            folder = snapshot_folder(self.out_path)
            folder.mkdir(exist_ok=True)
            save_checkpoint(snapshot_path(folder, self.step), self.model, *self.tokenizers,
                            snapshot_provenance(self._provenance(), self.step, self.config.snapshots),
                            dtype=torch.float16)

    def _save(self) -> None:
        """Checkpoint and training state (rank 0 writes; every rank contributes its RNG state)."""
        rng = {"torch": self.processes.gather(torch.get_rng_state())}
        if self.device.type == "cuda":
            rng["cuda"] = self.processes.gather(torch.cuda.get_rng_state(self.device))
        if self.processes.main:
            # The state holds the weights too, and is written first: whenever a run is stopped, the state file
            # alone is a consistent point to resume from, whatever became of the checkpoint beside it.
            tensors = {f"rng.{rank}.{kind}": state for kind, states in rng.items() for rank, state in enumerate(states)}
            tensors.update(_optimizer_tensors(self.optimizer))
            tensors.update({f"model.{name}": value for name, value in unique_tensors(self.model).items()})
            _write_state(state_path(self.out_path), tensors, self._state_document())
            save_checkpoint(self.out_path, self.model, *self.tokenizers, self._provenance())
        self.processes.barrier()

    def _state_document(self) -> dict[str, Any]:
        return {"step": self.step, "data": self.stream.position(), "window": self.window, "metrics": self.metrics,
                "seconds": self._seconds(), "processes": self.processes.world,
                "scheduler": {"kind": "inverse_sqrt", "peak": self.config.learning_rate,
                              "warmup_steps": self.config.warmup_steps, "last_step": self.step},
                "training": dataclasses.asdict(self.config), "model": config_to_dict(self.model_config),
                "snapshot_every": _snapshot_every(self.config),
                "tokenizers": [tokenizer.to_dict() for tokenizer in self.tokenizers]}

    def restore(self) -> None:
        """Continue from ``out_path`` and its training state: weights, optimizer, data position, RNG."""
        path = state_path(self.out_path)
        tensors, document = _read_state(path)
        _check_resumable(path, document, config=self.config, model_config=self.model_config)
        if [t.to_dict() for t in self.tokenizers] != document.get("tokenizers"):
            raise ConfigError(f"cannot resume {self.out_path}: it was trained with other tokenizers")
        weights = {name[len("model."):]: tensor for name, tensor in tensors.items() if name.startswith("model.")}
        expected = unique_tensors(self.model)
        if set(weights) != set(expected):
            raise CheckpointError(path, "the training state's weights do not match the model; "
                                        "train again without resume")
        self.model.load_state_dict(weights, strict=False)
        _load_optimizer(self.optimizer, tensors)
        self.step = document["step"]
        self.stream = BatchStream(self.stream.lengths, self.config.batch_size, seed=self.config.seed,
                                  epoch=document["data"]["epoch"], index=document["data"]["index"])
        self.window = list(document["window"])
        self.metrics.update({name: value for name, value in document["metrics"].items() if name in self.metrics})
        self.seconds_before = float(document["seconds"])
        self._restore_rng(tensors)

    def _restore_rng(self, tensors: dict[str, Tensor]) -> None:
        rank = self.processes.rank
        if f"rng.{rank}.torch" not in tensors:  # resumed with more processes than it was saved with
            torch.manual_seed(derived_seed(self.config.seed, "dropout", rank, self.step))
            return
        torch.set_rng_state(tensors[f"rng.{rank}.torch"])
        if self.device.type == "cuda" and f"rng.{rank}.cuda" in tensors:
            torch.cuda.set_rng_state(tensors[f"rng.{rank}.cuda"], self.device)


def _check_resumable(path: Path, document: dict[str, Any], config: TrainingConfig, model_config: ModelConfig) -> None:
    if document.get("model") != config_to_dict(model_config):
        raise ConfigError(f"cannot resume {path}: it was trained with another model config")
    saved = document.get("training", {})
    for name in _RESUME_FIXED:
        if saved.get(name) != getattr(config, name):
            raise ConfigError(f"cannot resume {path}: {name} was {saved.get(name)!r}, now {getattr(config, name)!r}")
    # A resumed run continues the series: same spacing (steps / snapshots), so the steps already kept stay in it.
    was, now = document.get("snapshot_every", 0.0), _snapshot_every(config)
    if not math.isclose(was, now):
        def shown(every: float) -> str:
            return f"every {every:g} steps" if every else "none"
        raise ConfigError(f"cannot resume {path}: its snapshots were {shown(was)}, now {shown(now)} "
                          f"(keep --steps / --snapshots the same)")


def _snapshot_every(config: TrainingConfig) -> float:
    return config.steps / config.snapshots if config.snapshots else 0.0


def _validation_loss(model: Seq2Seq, examples: list[Example], batch_size: int, device: torch.device) -> float:
    """Cross-entropy per target token over every validation pair (no label smoothing)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]) + len(examples[i][1]))
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = collate([examples[i] for i in order[start: start + batch_size]], model.config, device)
            total += float(_loss_sum(model, batch, pad_id=model.config.pad_id, label_smoothing=0.0))
            tokens += batch.tokens
    return total / tokens


def progress_line(step: int, seconds: float, metrics: dict[str, float | None], *, label_smoothing: float) -> str:
    """A validation's line: the training loss (the objective, label smoothing included: it does not fall to 0),
    the validation's plain cross-entropy, chrF and BLEU (``char_bleu``: counted on characters)."""
    shown = []
    for name, value in metrics.items():
        if value is None:
            continue
        note = f" (label smoothing {label_smoothing:g} included)" if name == "train_loss" and label_smoothing else ""
        shown.append(f"{name} {value:.3f}{note}")
    return f"step {step} ({seconds:.0f} s): " + "  ".join(shown)


def _decode_scores(model: Seq2Seq, tokenizers: tuple[Tokenizer, Tokenizer], pairs: list[Pair],
                   device: torch.device) -> tuple[float, float]:
    """chrF and BLEU of greedy translations of ``pairs`` (each cut at twice its source length plus 10 tokens,
    so an untrained model that never ends a sentence costs little); BLEU on characters for a character-level
    target."""
    translator = Translator(Checkpoint(model, *tokenizers), device)
    hypotheses = []
    for source, _ in pairs:
        length = len(translator.source(source, unknown="replace").ids)
        hypotheses.append(translator.translate(source, max_len=2 * length + 10, unknown="replace").text)
    return corpus_scores(hypotheses, [target for _, target in pairs], characters=tokenizers[1].kind == "char")


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, Tensor]:
    """``optimizer.<parameter index>.<name>`` for every tensor of the optimizer state (AdamW holds only tensors)."""
    tensors = {}
    for index, values in optimizer.state_dict()["state"].items():
        for name, value in values.items():
            if not isinstance(value, Tensor):
                raise TypeError(f"optimizer state {name!r} is not a tensor")  # a new optimizer, not user input
            tensors[f"optimizer.{index}.{name}"] = value.detach().cpu().contiguous()
    return tensors


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor]) -> None:
    state: dict[int, dict[str, Tensor]] = {}
    for key, tensor in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = tensor
    # The hyperparameters come from the config (checked equal); the learning rate is set every step.
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})


def _write_state(path: Path, tensors: dict[str, Tensor], document: dict[str, Any]) -> None:
    metadata = {"format": STATE_FORMAT, "format_version": str(STATE_VERSION), "state": json.dumps(document)}
    write_safetensors(path, tensors, metadata)


def _read_state(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    if not path.is_file():
        raise CheckpointError(path, "no training state to resume from (it is written next to the checkpoint "
                                    "by a run without resume)")
    tensors, metadata = read_safetensors(path)
    if metadata.get("format") != STATE_FORMAT or metadata.get("format_version") != str(STATE_VERSION):
        raise CheckpointError(path, "not an attnviz training state (version "
                                    f"{STATE_VERSION}); train again without resume")
    try:
        return tensors, json.loads(metadata["state"])
    except (KeyError, json.JSONDecodeError) as error:
        raise CheckpointError(path, f"the training state's metadata is damaged ({error})") from None

