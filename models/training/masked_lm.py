"""Training an encoder-only model as a masked-language model (BERT's objective, Devlin et al. 2019, §3.1).

    tokenizer = masked_tokenizer(sentences)               # characters, and MASK_CHARACTER as the mask token
    config = dataclasses.replace(make_config("encoder-only", tokenizer.vocab_size, tokenizer.vocab_size),
                                 mask_id=mask_id(tokenizer))
    summary = train_masked_lm(config, tokenizer, sentences, valid_sentences=valid_sentences, out_path="out.safetensors",
                              config=TrainingConfig(steps=2000))

Each sentence is its tokens then the end token ``</s>``. Every step takes ``batch_size`` sentences (the data order
of models/training/batches.py) and chooses 15 % of each sentence's tokens (``</s>`` and padding never; one at least)
to predict: of those, 80 % become the mask token, 10 % a random token of the vocabulary's characters and 10 % stay as
they are (BERT's 80/10/10 rule). The loss is the cross-entropy of the chosen positions only. The choice is drawn from
a generator seeded by ``(seed, "masking", step)``, so the same seed masks the same tokens at the same step.

Validation: the cross-entropy and the top-1 accuracy of held-out sentences' tokens masked by hash (15 %,
models/text/masking.py: the same tokens at every validation), every one replaced by the mask token.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..errors import ConfigError, InputError
from ..nn.build import build_model
from ..nn.config import TrainingConfig
from ..nn.encoder_config import EncoderOnlyConfig
from ..storage.checkpoint import save_checkpoint
from ..storage.files import check_output_folder
from ..text.char_tokenizer import CharTokenizer
from ..text.masking import MASK_SHARE, hashed_mask_positions
from ..text.splits import derived_seed
from ..text.tokenizer import SPECIAL_TOKENS, Tokenizer
from .batches import BatchStream
from .trainer import ADAM_BETAS, WEIGHT_DECAY, learning_rate_at

MASK_CHARACTER = "_"  # the character a typed sentence marks a position to fill with: "sh_pherd"
MASKED, RANDOM = 0.8, 0.1  # of the chosen positions: the mask token, a random token (the rest stay as they are)


@dataclass
class MaskedLMSummary:
    """Where training ended: the training loss since the last validation, and the held-out masked tokens'
    cross-entropy and top-1 accuracy (0..1; None without held-out sentences)."""

    step: int
    train_loss: float | None
    valid_loss: float | None
    accuracy: float | None
    seconds: float
    checkpoint: Path
    model: torch.nn.Module = field(repr=False)


def masked_tokenizer(sentences: Sequence[str]) -> CharTokenizer:
    """A character tokenizer of ``sentences`` with ``MASK_CHARACTER`` as its mask token (refused in a sentence)."""
    marked = [sentence for sentence in sentences if MASK_CHARACTER in sentence]
    if marked:
        raise ConfigError(f"the training sentences hold the mask character {MASK_CHARACTER!r} "
                          f"(e.g. {marked[0][:40]!r}); a masked-language model keeps it for the positions to fill")
    if not sentences:
        raise ConfigError("cannot build a tokenizer from a corpus with no sentences")
    return CharTokenizer(sorted(set().union(*sentences) | {MASK_CHARACTER}))


def mask_id(tokenizer: Tokenizer) -> int:
    """The id of ``MASK_CHARACTER`` in ``tokenizer``."""
    ids = tokenizer.encode(MASK_CHARACTER)
    if len(ids) != 1 or ids[0] == tokenizer.unk_id:
        raise ConfigError(f"the tokenizer has no mask token {MASK_CHARACTER!r}")
    return ids[0]


def encode_sentences(tokenizer: Tokenizer, sentences: Sequence[str], config: EncoderOnlyConfig) -> list[list[int]]:
    """Each sentence's ids with ``</s>`` after them, cut to the model's positions."""
    encoded = []
    for sentence in sentences:
        ids = tokenizer.encode(tokenizer.normalize(sentence))[: config.max_len - 1]
        encoded.append(ids + [config.eos_id])
    return encoded


def padded(sentences: Sequence[list[int]], pad_id: int) -> Tensor:
    """Right-padded ids ``[B, S]``."""
    width = max(len(ids) for ids in sentences)
    return torch.tensor([ids + [pad_id] * (width - len(ids)) for ids in sentences])


def choose_masks(ids: Tensor, config: EncoderOnlyConfig, generator: torch.Generator, *,
                 replacements: Tensor) -> tuple[Tensor, Tensor]:
    """BERT's masking of a batch ``[B, S]``: the input with the chosen positions masked, replaced or kept, and the
    labels (the original token where chosen, else -100, which the loss ignores)."""
    real = (ids != config.pad_id) & (ids != config.eos_id)
    scores = torch.rand(ids.shape, generator=generator).masked_fill(~real, 2.0)
    chosen = (scores < MASK_SHARE) & real
    least = scores.argmin(dim=1, keepdim=True)  # a sentence with none chosen predicts its token of least draw
    chosen |= torch.zeros_like(chosen).scatter(1, least, True) & real
    how = torch.rand(ids.shape, generator=generator)
    random_ids = replacements[torch.randint(len(replacements), ids.shape, generator=generator)]
    inputs = torch.where(chosen & (how < MASKED), torch.full_like(ids, config.mask_id), ids)
    inputs = torch.where(chosen & (how >= MASKED) & (how < MASKED + RANDOM), random_ids, inputs)
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def hashed_masks(tokenizer: Tokenizer, sentences: Sequence[str], encoded: Sequence[list[int]], *,
                 config: EncoderOnlyConfig) -> tuple[Tensor, Tensor]:
    """Held-out sentences with their hashed 15 % (models/text/masking.py) replaced by the mask token, and labels."""
    inputs, labels = [], []
    for sentence, ids in zip(sentences, encoded):
        chosen = set(hashed_mask_positions(sentence, len(ids) - 1))
        inputs.append([config.mask_id if i in chosen else token for i, token in enumerate(ids)])
        labels.append([token if i in chosen else -100 for i, token in enumerate(ids)])
    width = max(len(ids) for ids in inputs)
    return (torch.tensor([ids + [config.pad_id] * (width - len(ids)) for ids in inputs]),
            torch.tensor([ids + [-100] * (width - len(ids)) for ids in labels]))


@torch.no_grad()
def held_out_scores(model, inputs: Tensor, labels: Tensor, batch_size: int = 256) -> tuple[float, float]:
    """The masked tokens' mean cross-entropy and top-1 accuracy."""
    loss, right, count = 0.0, 0, 0
    for start in range(0, len(inputs), batch_size):
        logits, _ = model(inputs[start: start + batch_size])
        gold = labels[start: start + batch_size]
        chosen = gold != -100
        loss += float(F.cross_entropy(logits[chosen].float(), gold[chosen], reduction="sum"))
        right += int((logits[chosen].argmax(-1) == gold[chosen]).sum())
        count += int(chosen.sum())
    return loss / max(count, 1), right / max(count, 1)


def train_masked_lm(model_config: EncoderOnlyConfig, tokenizer: Tokenizer, sentences: Sequence[str], *,
                    valid_sentences: Sequence[str], out_path: str | Path, config: TrainingConfig,
                    provenance: dict[str, Any] | None = None) -> MaskedLMSummary:
    """Train a fresh encoder-only model for ``config.steps`` steps on one process; the checkpoint (the tokenizer on
    both sides) is written every ``save_every`` steps and at the end."""
    config.validate()
    model_config.validate()
    if model_config.mask_id < 0 or not model_config.mlm_head:
        raise ConfigError("a masked-language model needs a mask token (mask_id) and its head (mlm_head)")
    check_output_folder(out_path)
    if not sentences:
        raise InputError("no training sentences")
    device = torch.device(config.device or "cpu")
    torch.manual_seed(config.seed)
    model = build_model(model_config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=ADAM_BETAS,
                                  weight_decay=WEIGHT_DECAY)
    encoded = encode_sentences(tokenizer, sentences, model_config)
    stream = BatchStream([len(ids) for ids in encoded], config.batch_size, config.seed)
    specials = {model_config.pad_id, model_config.bos_id, model_config.eos_id, model_config.mask_id,
                tokenizer.unk_id, *range(len(SPECIAL_TOKENS))}
    replacements = torch.tensor([i for i in range(model_config.vocab_size) if i not in specials])
    valid = hashed_masks(tokenizer, valid_sentences, encode_sentences(tokenizer, valid_sentences, model_config),
                         config=model_config) if valid_sentences else None
    torch.manual_seed(derived_seed(config.seed, "dropout", 0))
    metrics: dict[str, float | None] = {"train_loss": None, "valid_loss": None, "accuracy": None}
    window, started = [0.0, 0], time.perf_counter()

    def provenance_now(step: int) -> dict[str, Any]:
        training = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("device", "progress")}
        return {**(provenance or {}), "arch": model_config.arch, "objective": "masked-lm", "steps": step,
                "train_sentences": len(sentences), "valid_sentences": len(valid_sentences), "metrics": dict(metrics),
                "seconds": round(time.perf_counter() - started, 3), "device": str(device),
                "torch_version": torch.__version__, "training": training}

    with tqdm(total=config.steps, desc="training", unit="step", disable=not config.progress) as bar:
        for step in range(1, config.steps + 1):
            generator = torch.Generator().manual_seed(derived_seed(config.seed, "masking", step))
            inputs, labels = choose_masks(padded([encoded[i] for i in stream.next()], model_config.pad_id),
                                          model_config, generator, replacements=replacements)
            rate = learning_rate_at(step, config.learning_rate, config.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = rate
            logits, _ = model(inputs.to(device))
            chosen = labels != -100
            loss = F.cross_entropy(logits[chosen.to(device)].float(), labels[chosen].to(device),
                                   label_smoothing=config.label_smoothing)
            loss.backward()
            if config.clip_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            window[0] += loss.item() * int(chosen.sum())
            window[1] += int(chosen.sum())
            bar.set_postfix({"loss": f"{loss.item():.3f}", "lr": f"{rate:.2e}"}, refresh=False)
            bar.update(1)
            last = step == config.steps
            if last or (config.eval_every and step % config.eval_every == 0):
                metrics["train_loss"] = window[0] / max(window[1], 1)
                window = [0.0, 0]
                if valid is not None:
                    model.eval()
                    metrics["valid_loss"], metrics["accuracy"] = held_out_scores(model, valid[0].to(device),
                                                                                  valid[1].to(device))
                    model.train()
                bar.write(progress_line(step, time.perf_counter() - started, metrics), file=sys.stderr)
            if last or (config.save_every and step % config.save_every == 0):
                save_checkpoint(out_path, model, tokenizer, target_tokenizer=tokenizer, provenance=provenance_now(step))
    model.eval()
    return MaskedLMSummary(step=config.steps, train_loss=metrics["train_loss"], valid_loss=metrics["valid_loss"],
                           accuracy=metrics["accuracy"], seconds=time.perf_counter() - started,
                           checkpoint=Path(out_path), model=model)


def progress_line(step: int, seconds: float, metrics: dict[str, float | None]) -> str:
    """One validation's line: step, time, training loss, held-out masked tokens' loss and accuracy."""
    parts = [f"step {step}", f"{seconds:.0f} s"]
    if metrics["train_loss"] is not None:
        parts.append(f"train loss {metrics['train_loss']:.3f}")
    if metrics["valid_loss"] is not None:
        parts.append(f"held-out masked loss {metrics['valid_loss']:.3f}, accuracy {100 * metrics['accuracy']:.2f}%")
    return ", ".join(parts)
