"""Checkpoints at the sizes people download: random-weight Hugging Face Marian folders of the opus-mt base shape
(6+6 layers × 8 heads, d_model 512, FFN 2048) and the opus-mt-tc-big shape (6+6 × 16 heads, d_model 1024, FFN
4096), vocabulary 32,000, built with ``transformers`` and written with ``save_pretrained`` (no download; the end
token's logit bias is pushed down, so greedy decoding runs to the length asked for). Each measurement runs in a
fresh interpreter and reports its time and how much the process grew above a bare ``import torch``, also as a
multiple of the float32 weights; times are also given as a ratio to the baseline of the same run:

- ``whole file``: the baseline — the converted checkpoint read whole, its tensors made from the bytes, a randomly
  initialised model loaded from them (what loading cost before it streamed);
- ``convert``: ``attnviz convert`` of the folder;
- ``load``: ``load_checkpoint`` (one tensor at a time into a model built without initialising its weights),
  keeping the weights as float32 or as bfloat16;
- ``info``: ``describe_file``, what ``attnviz info`` prints (the header only);
- ``translate``: ``attnviz translate`` of one sentence (40 tokens out), end to end;
- ``window``: the app (offscreen, a real QApplication) started as ``attnviz`` starts it on the checkpoint: launch →
  the first heatmap, and → every view drawn for a 40-token run, with a timeline (torch imported, window built, first
  tensor read, model open, first steps, run finished); ``--window-only`` times only this, ``--runs`` repeats it.

With ``--device cuda`` loading, translating and the window run on the GPU, and one more line gives the host memory
the CUDA context alone adds to a process (it is in every GPU figure above it).

    python benchmarks/real_size.py [--shapes base big] [--device cuda] [--no-window] [--runs N] [--keep FOLDER]
    python benchmarks/real_size.py --window-only FOLDER/big.safetensors --runs 3   # the window alone, again
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.windows import wait_for  # noqa: E402

SHAPES = {"base": dict(d_model=512, heads=8, ffn=2048), "big": dict(d_model=1024, heads=16, ffn=4096)}
VOCAB = 32_000
TOKENS = 40  # output tokens of the one-sentence translation and of the window's run
WORDS = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park"]
# The goals at the tc-big shape on a 2-core machine: (seconds at most, growth as × the weights at most).
GOALS = {"convert": (None, 1.5), "translate": (5.0, 1.25), "load bfloat16": (None, 0.7), "window": (6.0, None)}
INFO_GOAL = (1.5, 200 * 2**20)  # info: seconds, bytes

MEASURE = """
import json, sys, time
import torch


def peak():  # this process' own high-water mark (ru_maxrss would start from the parent's at the fork)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))


before = peak()
start = time.perf_counter()
what, path, device, text = sys.argv[1:5]
if what == "whole file":
    from models import build_model
    from models.storage.checkpoint import read_metadata
    from models.nn.config import config_from_dict
    from models.storage.files import read_safetensors
    model = build_model(config_from_dict(read_metadata(path)["config"]))
    tensors, _ = read_safetensors(path)
    model.load_state_dict(tensors, strict=False)
elif what == "convert":
    from attnviz.cli import main
    main(["convert", path, "-o", text])
elif what.startswith("load"):
    from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint
    load_checkpoint(path, device, dtype=WEIGHT_DTYPES[what.split()[-1]])
elif what == "info":
    from models.storage.checkpoint import describe_file
    describe_file(path)
elif what == "cuda context":
    torch.zeros(1, device=device)
else:
    from attnviz.cli import main
    main(["translate", "-c", path, "--device", device, "--max-len", "TOKENS", text])
if device.startswith("cuda"):
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
grown = (peak() - before) * 1024
print(json.dumps({"seconds": seconds, "grown": grown, "torch": before * 1024}))
""".replace("TOKENS", str(TOKENS))


def write_marian_folder(folder: str, shape: str) -> int:
    """A random-weight ``MarianMTModel`` of ``shape`` saved with its tokenizer files; returns its float32 weights
    in bytes (tied weights once)."""
    import sentencepiece as spm
    import torch
    import transformers

    os.makedirs(folder, exist_ok=True)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(WORDS), model_writer=proto, vocab_size=30,
                                   hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2)
    processor = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    pieces = [processor.id_to_piece(index) for index in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces + [f"w{index}" for index in range(VOCAB)]:
        if piece not in ("<unk>", "<s>", "</s>") and len(vocab) < VOCAB - 1:
            vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = VOCAB - 1
    for name in ("source.spm", "target.spm"):
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(proto.getvalue())
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as handle:
        json.dump(vocab, handle)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"source_lang": "en", "target_lang": "es", "separate_vocabs": False}, handle)
    sizes = SHAPES[shape]
    config = transformers.MarianConfig(
        vocab_size=VOCAB, decoder_vocab_size=VOCAB, d_model=sizes["d_model"], encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=sizes["heads"], decoder_attention_heads=sizes["heads"],
        encoder_ffn_dim=sizes["ffn"], decoder_ffn_dim=sizes["ffn"], max_position_embeddings=512,
        pad_token_id=VOCAB - 1, eos_token_id=0, decoder_start_token_id=VOCAB - 1, activation_function="swish",
        scale_embedding=True, share_encoder_decoder_embeddings=True)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, config.eos_token_id] = -1e4  # greedy decoding runs to the length asked for
    model.save_pretrained(folder)
    return sum(param.numel() * 4 for param in model.parameters()) + model.final_logits_bias.numel() * 4


def sentence_of(checkpoint: str, tokens: int) -> str:
    """A source sentence that the checkpoint's tokenizer makes ``tokens`` tokens of, with the end token."""
    from models.storage.checkpoint import read_metadata
    from models.text.tokenizers import Tokenizer

    tokenizer = Tokenizer.from_dict(read_metadata(checkpoint)["tokenizers"]["source"])
    words = " ".join(WORDS * 10).split()
    count = 1
    while len(tokenizer.encode(" ".join(words[:count]))) + 1 < tokens:
        count += 1
    return " ".join(words[:count])


def measure(what: str, path: str, device: str = "cpu", text: str = "") -> dict:
    result = subprocess.run([sys.executable, "-c", MEASURE, what, path, device, text], capture_output=True,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{what} failed: {result.stderr.strip()[-800:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def window_case(checkpoint: str, device: str, text: str, launched: float) -> dict:
    """In this fresh process: the app starts as ``attnviz`` does (attnviz/gui/app.py:launch) on ``checkpoint``,
    then runs ``text`` greedily to ``TOKENS`` tokens as soon as the model is open; seconds since ``launched``
    (the parent's clock when it started this process) to the first heatmap drawn and to every view drawn, the
    process' peak memory, and a timeline of what happened when (``TIMELINE``)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings

    from attnviz.gui.app import launch

    marks = {"python started": 0.0}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time() - launched)

    settings = QSettings(os.path.join(tempfile.mkdtemp(), "bench.ini"), QSettings.Format.IniFormat)
    started = launch(checkpoint, device, settings)
    application, window = started.app, started.window
    mark("window shown")
    wait_for(application, lambda: window.built)
    mark("window built")
    worker = window.worker
    worker.load_progress.connect(lambda *_: mark("weights: first tensor read"))
    worker.loaded.connect(lambda *_: mark("model open"))
    worker.steps.connect(lambda *_: mark("first steps arrived"))
    worker.finished.connect(lambda *_: mark("run finished"))
    wait_for(application, lambda: window.session.model is not None)
    bar = window.views.input_bar
    bar.text.setText(text)
    bar.mode.setCurrentIndex(bar.mode.findData("greedy"))
    bar.max_len.setValue(TOKENS)
    bar.debounce.stop()  # the edits above would ask for a run of their own
    window.run()
    mark("run asked for")
    request = window.session.request
    wait_for(application, lambda: window.views.focus.image.image is not None)
    application.processEvents()  # its paint
    mark("first heatmap drawn")
    wait_for(application, lambda: window.session.is_current(request.id) and bool(window.session.results))
    application.processEvents()
    window.grab()  # paints every visible view now
    mark("every view drawn")
    marks["torch import started"] = started.importing.started - launched
    marks["torch imported"] = started.importing.ended - launched
    result = window.session.result
    shape = (len(result.trace.src_tokens), len(result.token_ids))
    window.close()
    window.shut_down()
    window.deleteLater()
    application.processEvents()
    return {"heatmap": marks["first heatmap drawn"], "drawn": marks["every view drawn"], "tokens": shape,
            "peak": peak_bytes(), "timeline": marks}


def peak_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def measure_window(checkpoint: str, device: str, text: str) -> dict:
    launched = time.time()
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--window", checkpoint, device, text,
                             repr(launched)], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO, "QT_QPA_PLATFORM": "offscreen"}, check=False)
    if result.returncode != 0:
        raise SystemExit(f"window failed: {result.stderr.strip()[-800:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def load_average() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:
        return f"{os.cpu_count()} cores"


def report(what: str, result: dict, *, baseline: dict, weights: int, goal: bool) -> None:
    seconds, grown = result["seconds"], result["grown"]
    line = (f"  {what:13s} {seconds:6.2f} s ({seconds / baseline['seconds']:.2f}× whole file)  "
            f"+{grown / 2**20:6,.0f} MB = {grown / weights:.2f}× the weights "
            f"(bare torch: {result['torch'] / 2**20:,.0f} MB)")
    limits = GOALS.get(what)
    if goal and what == "info":
        met = seconds <= INFO_GOAL[0] and grown <= INFO_GOAL[1]
        line += f"  goal ≤ {INFO_GOAL[0]} s, ≤ +200 MB: {'met' if met else 'NOT met'}"
    elif goal and limits:
        met = (limits[0] is None or seconds <= limits[0]) and (limits[1] is None or grown <= limits[1] * weights)
        wanted = ", ".join(part for part in (limits[0] and f"≤ {limits[0]} s", limits[1] and f"≤ {limits[1]}×") if part)
        line += f"  goal {wanted}: {'met' if met else 'NOT met'}"
    print(line, flush=True)


def report_window(checkpoint: str, args: argparse.Namespace, *, goal: bool, text: str) -> None:
    """``--runs`` fresh window processes, each one's times, then the median and the first run's timeline."""
    runs = []
    for _ in range(args.runs):
        window = measure_window(checkpoint, args.device, text)
        runs.append(window)
        verdict = f"  goal ≤ 6 s: {'met' if window['heatmap'] <= 6 else 'NOT met'}" if goal else ""
        print(f"  window        launch → first heatmap {window['heatmap']:.2f} s, → all views drawn "
              f"{window['drawn']:.2f} s ({window['tokens'][0]} source × {window['tokens'][1]} output tokens), "
              f"peak {window['peak'] / 2**20:,.0f} MB{verdict}  ({load_average()})", flush=True)
    if len(runs) > 1:
        print(f"  window        median of {len(runs)}: first heatmap "
              f"{statistics.median(run['heatmap'] for run in runs):.2f} s, all views drawn "
              f"{statistics.median(run['drawn'] for run in runs):.2f} s", flush=True)
    print("  timeline of the first window run (seconds since launch):")
    for name, seconds in sorted(runs[0]["timeline"].items(), key=lambda item: item[1]):
        print(f"    {seconds:6.2f}  {name}", flush=True)


def run_shape(shape: str, folder: str, args: argparse.Namespace) -> None:
    hf_folder = os.path.join(folder, f"{shape}-marian")
    weights = write_marian_folder(hf_folder, shape)
    checkpoint = os.path.join(folder, f"{shape}.safetensors")
    print(f"{shape}: float32 weights {weights / 2**20:,.0f} MB (device {args.device}; {load_average()})", flush=True)
    converted = measure("convert", hf_folder, text=checkpoint)
    baseline = measure("whole file", checkpoint)
    goal = shape == "big" and args.device == "cpu"
    report("whole file", baseline, baseline=baseline, weights=weights, goal=goal)
    report("convert", converted, baseline=baseline, weights=weights, goal=goal)
    text = sentence_of(checkpoint, TOKENS)
    for what in ("load float32", "load bfloat16", "info", "translate"):
        device = "cpu" if what == "info" else args.device
        report(what, measure(what, checkpoint, device, text), baseline=baseline, weights=weights, goal=goal)
    if args.device.startswith("cuda"):
        context = measure("cuda context", checkpoint, args.device)
        print(f"  CUDA context alone: +{context['grown'] / 2**20:,.0f} MB of host memory (in every {args.device} "
              f"figure above)", flush=True)
    print(f"  ({load_average()})", flush=True)  # times on a shared machine depend on it
    if not args.no_window:
        report_window(checkpoint, args, goal=goal, text=text)
    if not args.keep:
        shutil.rmtree(hf_folder)
        os.remove(checkpoint)


def main() -> None:
    if sys.argv[1:2] == ["--window"]:
        checkpoint, device, text, launched = sys.argv[2:6]
        print(json.dumps(window_case(checkpoint, device, text, float(launched))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (loading, translating, the window)")
    parser.add_argument("--no-window", action="store_true", help="skip the window's times")
    parser.add_argument("--runs", type=int, default=1, help="fresh window processes to time (default 1)")
    parser.add_argument("--window-only", metavar="CHECKPOINT", help="time only the window, on this converted "
                                                                     "checkpoint (one --keep wrote)")
    parser.add_argument("--keep", metavar="FOLDER", help="write the folders and checkpoints here (default: a "
                                                         "temporary folder, removed after each shape)")
    args = parser.parse_args()
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            parser.exit(1, "real_size: error: --device cuda, but torch sees no CUDA device here\n")
    if args.window_only:
        print(f"window on {args.window_only} (device {args.device}; {load_average()})", flush=True)
        report_window(args.window_only, args, goal=False, text=sentence_of(args.window_only, TOKENS))
        return
    folder = args.keep or tempfile.mkdtemp()
    for shape in args.shapes:
        run_shape(shape, folder, args)


if __name__ == "__main__":
    main()
