"""A corpus decoded in batches (models/inference/corpus.py) at batch sizes 1 / 8 / 32 / 128, greedy and beam 4,
in sentences per second and peak memory, beside transformers' batched ``generate`` on the same Hugging Face model
in the same run.

Two models:
- ``en-es``: the bundled en-es demo (its reference sentences, repeated to ``--sentences``);
- ``marian-base``: a random-weight MarianMTModel of the opus-mt base shape (d_model 512, 6 + 6 layers, 8 heads,
  FFN 2048, vocabulary 8,000), built with transformers' ``MarianConfig`` and written with ``save_pretrained``,
  converted by attnviz's importer; sources are random ids of 8 to 30 tokens (the end token last). transformers'
  ``generate`` decodes the same sources in the same batches (padded, with their attention mask), padding banned,
  no forced end token, ``length_penalty`` 0.6 for beam search as ours.

Every run decodes at most ``--max-len`` tokens (24), without the trace; its speed is given per wall-clock second and
per CPU second of the process (the steadier measure of a one-thread run on a busy machine). Memory: on the CPU the
process's peak resident size during the run (its high-water mark reset before each run, /proc/self/clear_refs), and
how much it grew above the size before the run; on CUDA torch's peak allocated memory. One torch thread unless
``--threads``.

Goals (the CPU, one thread, marian-base, 64 sentences): batch 32 ≥ 3× batch 1 greedy, ≥ 2× at beam 4; peak memory
≤ 1.5× the batch-1 run's.

    python benchmarks/corpus.py [--models en-es marian-base] [--batches 1 8 32 128] [--sentences 64]
                                [--device cuda] [--threads 1] [--no-transformers]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attnviz.state.demos import demo_path, demo_reference_pairs  # noqa: E402
from models.inference.batch_sizes import Batching  # noqa: E402
from models.inference.corpus import decode_corpus  # noqa: E402
from models.inference.translator import SourceInput, Translator  # noqa: E402
from models.storage.checkpoint import load_checkpoint  # noqa: E402

BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
            encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512, vocab_size=8000)
GOALS = {"greedy": 3.0, "beam 4": 2.0}  # batch 32 over batch 1, sentences per second
MEMORY_GOAL = 1.5


def marian_folder(folder: Path):
    """A base-shaped MarianMTModel with random weights in ``folder`` (weights, config, tokenizer files)."""
    import sentencepiece as spm
    import transformers

    texts = ["the cat sat on the mat", "where is the house", "i like green apples", "we are going to the beach"]
    for name in ("source.spm", "target.spm"):
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=30,
                                       hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2)
        (folder / name).write_bytes(model.getvalue())
    pieces = spm.SentencePieceProcessor(model_proto=(folder / "source.spm").read_bytes())
    vocab = {"</s>": 0, "<unk>": 1, **{pieces.id_to_piece(i): i + 2 for i in range(3, pieces.get_piece_size())}}
    vocab["<pad>"] = BASE["vocab_size"] - 1
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "es",
                                                              "separate_vocabs": False}), encoding="utf-8")
    torch.manual_seed(0)
    pad = BASE["vocab_size"] - 1
    config = transformers.MarianConfig(**BASE, decoder_vocab_size=BASE["vocab_size"], pad_token_id=pad,
                                       decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=None,
                                       scale_embedding=True, activation_function="swish")
    original = transformers.MarianMTModel(config).eval()
    original.save_pretrained(folder, safe_serialization=True)
    return original


def random_sources(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 31, (count,), generator=generator).tolist()
    return [torch.randint(2, vocab - 1, (length - 1,), generator=generator).tolist() + [0] for length in lengths]


def demo_sources(translator: Translator, count: int) -> list[list[int]]:
    texts = [source for source, _ in demo_reference_pairs("en-es-transformer")]
    return [translator.source(texts[index % len(texts)]).ids for index in range(count)]


class PeakMemory:
    """The peak memory of a block: on CUDA torch's allocated memory, else the process's resident size."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = torch.cuda.memory_allocated(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # resets the high-water mark to the current size
            self.before = _status("VmRSS")
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self.peak = _status("VmHWM")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def ours(translator: Translator, sources: list[list[int]], *, batch: int, beam: int, max_len: int) -> dict:
    inputs = [SourceInput(ids, len(ids)) for ids in sources]
    with PeakMemory(translator.device) as memory:
        start, start_cpu = time.perf_counter(), time.process_time()
        results = list(decode_corpus(translator, inputs, beam=beam, batching=Batching(tokens=10**9, size=batch),
                                     max_len=max_len, need_weights=False))
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return dict(seconds=seconds, per_second=len(sources) / seconds, per_cpu_second=len(sources) / cpu,
                peak=memory.peak, grew=memory.peak - memory.before, outputs=[result[0].token_ids for result in results])


def theirs(original, sources: list[list[int]], *, batch: int, beam: int, max_len: int, device) -> dict:
    import transformers

    pad = original.config.pad_token_id
    settings = transformers.GenerationConfig(max_new_tokens=max_len, num_beams=beam, do_sample=False,
                                             bad_words_ids=[[pad]], decoder_start_token_id=pad, eos_token_id=0,
                                             pad_token_id=pad, length_penalty=0.6, early_stopping=False)
    order = sorted(range(len(sources)), key=lambda index: len(sources[index]))
    outputs = [None] * len(sources)
    with PeakMemory(device) as memory, torch.inference_mode():
        start, start_cpu = time.perf_counter(), time.process_time()
        for first in range(0, len(order), batch):
            chosen = order[first: first + batch]
            longest = max(len(sources[index]) for index in chosen)
            ids = torch.full((len(chosen), longest), pad, dtype=torch.long)
            for row, index in enumerate(chosen):
                ids[row, : len(sources[index])] = torch.tensor(sources[index])
            ids = ids.to(device)
            generated = original.generate(input_ids=ids, attention_mask=(ids != pad).long(),
                                          generation_config=settings).cpu()
            for row, index in enumerate(chosen):
                outputs[index] = [token for token in generated[row, 1:].tolist() if token != pad]
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return dict(seconds=seconds, per_second=len(sources) / seconds, per_cpu_second=len(sources) / cpu,
                peak=memory.peak, grew=memory.peak - memory.before, outputs=outputs)


def report(name: str, rows: dict, batches: list[int]) -> list[str]:
    failures = []
    for mode in ("greedy", "beam 4"):
        one = rows.get((mode, batches[0], "attnviz"))
        for batch in batches:
            line = [f"{name:12s} {mode:7s} batch {batch:4d}"]
            for who in ("attnviz", "transformers"):
                found = rows.get((mode, batch, who))
                if found:
                    line.append(f"{who} {found['per_second']:6.1f} sent/s ({found['per_cpu_second']:6.1f} per CPU s), "
                                f"peak {found['peak'] / 2**20:6.0f} MB (+{found['grew'] / 2**20:4.0f})")
            mine, peer = rows.get((mode, batch, "attnviz")), rows.get((mode, batch, "transformers"))
            if mine and peer:
                line.append(f"ratio {mine['per_second'] / peer['per_second']:.2f} "
                            f"(CPU {mine['per_cpu_second'] / peer['per_cpu_second']:.2f})")
            if mine and one and batch != batches[0]:
                line.append(f"×{mine['per_second'] / one['per_second']:.2f} of batch {batches[0]} "
                            f"(CPU ×{mine['per_cpu_second'] / one['per_cpu_second']:.2f})")
            print("  ".join(line), flush=True)
        mine = rows.get((mode, 32, "attnviz"))
        if name == "marian-base" and mine and one and batches[0] == 1:
            speedup, memory = mine["per_second"] / one["per_second"], mine["peak"] / one["peak"]
            if speedup < GOALS[mode]:
                failures.append(f"{name} {mode}: batch 32 is {speedup:.2f}× batch 1 (goal ≥ {GOALS[mode]}×)")
            if memory > MEMORY_GOAL:
                failures.append(f"{name} {mode}: batch 32's peak is {memory:.2f}× batch 1's (goal ≤ {MEMORY_GOAL}×)")
    return failures


def measure(name: str, translator: Translator, sources, original, args) -> dict:
    rows = {}
    for mode, beam in (("greedy", 1), ("beam 4", 4)):
        for batch in args.batches:
            rows[(mode, batch, "attnviz")] = found = ours(translator, sources, batch=batch, beam=beam,
                                                          max_len=args.max_len)
            if original is not None:
                rows[(mode, batch, "transformers")] = peer = theirs(original, sources, batch=batch, beam=beam,
                                                                    max_len=args.max_len, device=translator.device)
                same = sum(mine == other for mine, other in zip(found["outputs"], peer["outputs"]))
                print(f"  ({name} {mode} batch {batch}: {same} of {len(sources)} outputs equal transformers')",
                      flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=["en-es", "marian-base"], default=["en-es", "marian-base"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=24)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-transformers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"device {args.device}, {torch.get_num_threads()} torch thread(s), {args.sentences} sentences, "
          f"at most {args.max_len} tokens each", flush=True)
    failures = []
    if "en-es" in args.models:
        translator = Translator(load_checkpoint(demo_path("en-es-transformer")), args.device)
        failures += report("en-es", measure("en-es", translator, demo_sources(translator, args.sentences), None,
                                            args), args.batches)
    if "marian-base" in args.models:
        from models.importers import convert

        with tempfile.TemporaryDirectory() as folder:
            original = marian_folder(Path(folder))
            translator = Translator(convert(Path(folder)), args.device)
            original = None if args.no_transformers else original.to(translator.device)
            sources = random_sources(args.sentences, BASE["vocab_size"])
            failures += report("marian-base", measure("marian-base", translator, sources, original, args),
                               args.batches)
    for failure in failures:
        print(f"GOAL MISSED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
