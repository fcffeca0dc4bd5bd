"""Decoder-only language models at the sizes people download: random-weight Hugging Face folders of the
Qwen2.5-0.5B shape (24 layers, 896 wide, 14 query / 2 key-value heads, d_ff 4864, vocabulary 151,936, tied; 494M
parameters) and the Llama-3.2-1B shape (16 layers, 2048 wide, 32 / 8 heads, d_ff 8192, vocabulary 128,256, tied,
Llama-3 rope scaling; 1.24B), built with ``transformers`` and written with ``save_pretrained`` in float32 and in
bfloat16 (no download; the tokenizer.json is a synthetic WordLevel one of the model's vocabulary size). Each
measurement runs in a fresh interpreter and reports its time and how much the process grew above a bare
``import torch``, as a multiple of the float32 weights:

- ``convert``: ``attnviz convert`` of the float32 folder, and of the bfloat16 one (kept in bfloat16);
- ``load``: ``load_checkpoint`` (float32; the bfloat16 checkpoint with ``dtype=bfloat16``);
- ``translate``: ``attnviz translate -c`` of one 40-token prompt (``--dtype bfloat16`` for the bfloat16 one);
- ``window``: the app started on the checkpoint (offscreen, a real QApplication, as benchmarks/real_size.py times
  it): launch → the first heatmap of a 40-token prompt (greedy);
- ``greedy``: greedy decoding with the trace (every head's attention row each step) vs transformers'
  ``generate(output_attentions=True, return_dict_in_generate=True)`` on the same weights (eager attention), in
  ms per token, in one process one after the other.

Goals (the CPU): float32 ≤ torch + 1.25× the float32 weights, bfloat16 ≤ torch + 0.7×, the first heatmap ≤ 8 s
at the Qwen2.5-0.5B shape. ``--quick`` keeps the widths and vocabularies but builds 4 layers (the memory goals are
then measured against those smaller weights). With ``--device cuda`` loading, translating and decoding run on the
GPU (weights read tensor by tensor straight into its memory: the host's growth is the figure to watch).

``--long-prompts`` instead times long prompts in the window (offscreen): a 6-layer decoder-only model with 8 query /
2 key-value heads (d_model 64, characters, random weights) continuing prompts of 1,024, 2,048 and 4,000 tokens
greedily by 16 tokens, from the request to every view drawn, and the process' peak resident memory; beside it, in the
same run, benchmarks/long_inputs.py's encoder-decoder rows at 1,024 source + 1,024 target tokens (forced, greedy), the
long inputs the window already draws fast. Each figure is the median over ``--repeats`` fresh processes of the first
run of each (a later run in the same window overtakes the previous run's source coverage, ALTI+, which the worker
computes after the views are drawn, between two of its units: benchmarks/coverage_wait.py times that).

    python benchmarks/decoder_only.py [--shapes qwen2.5-0.5b llama-3.2-1b] [--quick] [--device cuda]
                                      [--no-window] [--no-greedy] [--tokens 32] [--keep FOLDER]
    QT_QPA_PLATFORM=offscreen python benchmarks/decoder_only.py --long-prompts [1024 2048 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.real_size import load_average, measure_window  # noqa: E402

COMMON = dict(hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False)
SHAPES = {
    "qwen2.5-0.5b": ("Qwen2Config", "Qwen2ForCausalLM",
                     dict(COMMON, vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32_768,
                          rope_theta=1_000_000.0)),
    "llama-3.2-1b": ("LlamaConfig", "LlamaForCausalLM",
                     dict(COMMON, vocab_size=128_256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                          num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131_072,
                          rope_theta=500_000.0, head_dim=64,
                          rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
}
PROMPT_TOKENS = 40
GOALS = {"float32": 1.25, "bfloat16": 0.7}  # growth above torch's import, × the float32 weights
WINDOW_GOAL = 8.0  # seconds, launch → first heatmap, Qwen2.5-0.5B shape on the CPU

MEASURE = """
import json, sys, time
import torch


def peak():  # this process' own high-water mark, in kB
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))


before = peak()
start = time.perf_counter()
what, path, device, dtype, extra = sys.argv[1:6]
if what == "convert":
    from attnviz.cli import main
    assert main(["convert", path, "-o", extra]) == 0
elif what == "load":
    from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint
    load_checkpoint(path, device, dtype=WEIGHT_DTYPES[dtype])
else:
    from attnviz.cli import main
    assert main(["translate", "-c", path, "--device", device, "--dtype", dtype, "--max-len", "8", extra]) == 0
if device.startswith("cuda"):
    torch.cuda.synchronize()
print(json.dumps({"seconds": time.perf_counter() - start, "grown": (peak() - before) * 1024,
                  "torch": before * 1024}))
"""

GREEDY = """
import json, sys, time
import torch
import transformers
from models.storage.checkpoint import load_checkpoint
from models.inference.decoding import Capture, finish, greedy

checkpoint, folder, device, tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prompt = torch.randint(10, 10_000, (40,), generator=torch.Generator().manual_seed(0)).tolist()


def timed(run):
    run(2)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    count = run(tokens)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / count * 1e3, count


model = load_checkpoint(checkpoint, device).model
ours = timed(lambda steps: len(finish(greedy(model, prompt, Capture(max_len=steps)))[0].token_ids))
trace = finish(greedy(model, prompt, Capture(max_len=4)))[0].trace
del model
theirs_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                 attn_implementation="eager").to(device).eval()
ids = torch.tensor([prompt], device=device)


def generate(steps):
    with torch.no_grad():
        out = theirs_model.generate(ids, max_new_tokens=steps, do_sample=False, output_attentions=True,
                                    return_dict_in_generate=True, pad_token_id=0)
    return out.sequences.shape[1] - len(prompt)


theirs = timed(generate)
print(json.dumps({"ours": ours, "theirs": theirs, "kinds": trace.kinds}))
"""


def _run(code: str, *arguments: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO}, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{arguments[0]} failed: {result.stderr.strip()[-1200:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_tokenizer(folder: str, vocab_size: int) -> None:
    """A WordLevel tokenizer.json of ``vocab_size`` tokens (``<unk>`` 0, words ``w1``… split at spaces, the end
    token ``<|endoftext|>`` last), as the ``tokenizers`` library writes one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, **{f"w{index}": index for index in range(1, vocab_size - 1)}, "<|endoftext|>": vocab_size - 1}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # words joined by spaces
    tokenizer.save(os.path.join(folder, "tokenizer.json"))


def write_folders(folder: str, shape: str, layers: int | None) -> tuple[str, str, int]:
    """The float32 and bfloat16 folders of ``shape`` (``layers``: fewer, for --quick); their float32 weights' size."""
    import torch
    import transformers

    config_class, model_class, settings = SHAPES[shape]
    settings = dict(settings, **({"num_hidden_layers": layers} if layers else {}))
    eos = settings["vocab_size"] - 1
    config = getattr(transformers, config_class)(**settings, bos_token_id=None, eos_token_id=eos, pad_token_id=0)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    weights = sum(param.numel() for param in model.parameters()) * 4  # tied: counted once
    paths = []
    for dtype in ("float32", "bfloat16"):
        path = os.path.join(folder, f"{shape}-{dtype}")
        model.to(getattr(torch, dtype)).save_pretrained(path)
        write_tokenizer(path, settings["vocab_size"])
        paths.append(path)
    del model
    return paths[0], paths[1], weights


def report(what: str, result: dict, weights: int, goal: float | None) -> None:
    grown = result["grown"]
    line = (f"  {what:26s} {result['seconds']:7.2f} s  +{grown / 2**20:7,.0f} MB = {grown / weights:.2f}× the "
            f"float32 weights (bare torch {result['torch'] / 2**20:,.0f} MB)")
    if goal is not None:
        line += f"  goal ≤ {goal}×: {'met' if grown <= goal * weights else 'NOT met'}"
    print(line, flush=True)


LONG_PROMPTS = (1024, 2048, 4000)
CONTINUED = 16  # tokens a long prompt is continued by


def long_prompt_model(folder: str, max_len: int) -> str:
    """The long-prompt benchmark's model: 6 layers, 8 query / 2 key-value heads, d_model 64, characters, random
    weights; no end before ``CONTINUED`` tokens, so greedy decoding runs the length asked for."""
    import torch

    from benchmarks.long_inputs import TEXT
    from models import build_model, make_config
    from models.storage.checkpoint import save_checkpoint
    from models.text.tokenizers import CharTokenizer

    torch.manual_seed(0)
    tokenizer = CharTokenizer(sorted(set(TEXT)))
    config = make_config("decoder-only", tokenizer.vocab_size, tokenizer.vocab_size, d_model=64, heads=8, kv_heads=2,
                         d_ff=128, layers=6, max_len=max_len, dropout=0.0, min_output_len=CONTINUED)
    model = build_model(config).eval()
    return str(save_checkpoint(os.path.join(folder, "lm.safetensors"), model, tokenizer, tokenizer))


def long_prompt_case(tokens: int) -> dict:
    """Open the window on the long-prompt model, continue a prompt of ``tokens`` tokens once: the time from the
    request to every view drawn and the process' peak resident memory."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from benchmarks.long_inputs import peak_rss_mb, text_of
    from benchmarks.windows import wait_for

    application = QApplication.instance() or QApplication(sys.argv[:1])
    from attnviz.gui.app import create_window

    folder = tempfile.mkdtemp()
    settings = QSettings(os.path.join(folder, "bench.ini"), QSettings.Format.IniFormat)
    window = create_window(long_prompt_model(folder, tokens + 2 * CONTINUED), "cpu", settings)
    window.resize(1400, 900)
    window.show()
    wait_for(application, lambda: window.session.model is not None)
    bar = window.views.input_bar
    bar.text.setText(text_of(tokens))
    bar.mode.setCurrentIndex(bar.mode.findData("greedy"))
    bar.max_len.setValue(CONTINUED)
    bar.debounce.stop()  # the benchmark asks for each run itself
    start, cpu = time.perf_counter(), time.process_time()
    window.run()
    request = window.session.request
    wait_for(application, lambda: window.session.is_current(request.id) and bool(window.session.results))
    application.processEvents()
    window.grab()  # paints every visible view now
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    trace = window.session.result.trace
    shutil.rmtree(folder, ignore_errors=True)
    kept = trace.attention["dec_self"][0]
    return {"seconds": seconds, "cpu": cpu, "peak_mb": peak_rss_mb(), "shape": list(kept.shape),
            "dtype": str(kept.dtype)}


def long_prompts(lengths: list[int], repeats: int) -> None:
    """The long-prompt rows and the encoder-decoder's long-input rows: each the median of ``repeats`` fresh
    processes' first run."""
    def child(script: str, *arguments: str) -> dict:
        cases = []
        for _ in range(repeats):
            result = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True, cwd=REPO,
                                    env={**os.environ, "PYTHONPATH": REPO, "QT_QPA_PLATFORM": "offscreen"}, check=False)
            if result.returncode != 0:
                raise SystemExit(f"{arguments} failed: {result.stderr.strip()[-1200:]}")
            cases.append(json.loads(result.stdout.strip().splitlines()[-1]))
        cases.sort(key=lambda case: case["seconds"])
        return {**cases[len(cases) // 2], "peak_mb": max(case["peak_mb"] for case in cases)}  # the median, upper

    print(f"request → every view drawn: the first run of a fresh window, median of {repeats} processes "
          f"({load_average()})", flush=True)
    long_inputs = os.path.join(REPO, "benchmarks", "long_inputs.py")
    baseline = {}
    for mode in ("forced", "greedy"):
        case = child(long_inputs, "--repeats", "1", "--case", mode, "1024")
        baseline[mode] = case["seconds"]
        print(f"  encoder-decoder 1,024 + 1,024 tokens, {mode:6s}: {case['seconds']:6.2f} s, peak "
              f"{case['peak_mb']:,.0f} MB", flush=True)
    for tokens in lengths:
        case = child(os.path.abspath(__file__), "--prompt-case", str(tokens))
        print(f"  decoder-only {tokens:5,d}-token prompt + {CONTINUED} greedy: {case['seconds']:6.2f} s "
              f"(CPU {case['cpu']:.2f} s) "
              f"({case['seconds'] / baseline['forced']:.2f}× encoder-decoder forced, "
              f"{case['seconds'] / baseline['greedy']:.2f}× greedy), peak {case['peak_mb']:,.0f} MB, kept "
              f"{case['dtype']} {tuple(case['shape'])} per layer  ({load_average()})", flush=True)


def run_shape(shape: str, folder: str, args: argparse.Namespace) -> None:
    layers = 4 if args.quick else None
    started = time.perf_counter()
    float32_folder, bfloat16_folder, weights = write_folders(folder, shape, layers)
    print(f"{shape}{' (--quick: 4 layers)' if args.quick else ''}: float32 weights {weights / 2**20:,.0f} MB, "
          f"folders written in {time.perf_counter() - started:.0f} s (device {args.device}; {load_average()})",
          flush=True)
    prompt = " ".join(f"w{index}" for index in range(100, 100 + PROMPT_TOKENS))
    checkpoints = {}
    for dtype, source in (("float32", float32_folder), ("bfloat16", bfloat16_folder)):
        checkpoint = os.path.join(folder, f"{shape}-{dtype}.safetensors")
        report(f"convert ({dtype} folder)", _run(MEASURE, "convert", source, "cpu", dtype, checkpoint), weights,
               GOALS[dtype])
        checkpoints[dtype] = checkpoint
        report(f"load ({dtype})", _run(MEASURE, "load", checkpoint, args.device, dtype, ""), weights,
               GOALS[dtype] if args.device == "cpu" else 0.25)
        report(f"translate ({dtype})", _run(MEASURE, "translate", checkpoint, args.device, dtype, prompt), weights,
               GOALS[dtype] if args.device == "cpu" else None)
    if not args.no_window:
        window = measure_window(checkpoints["float32"], args.device, prompt)
        goal = shape == "qwen2.5-0.5b" and args.device == "cpu"
        verdict = f"  goal ≤ {WINDOW_GOAL:g} s: {'met' if window['heatmap'] <= WINDOW_GOAL else 'NOT met'}" if goal \
            else ""
        print(f"  window: launch → first heatmap {window['heatmap']:.2f} s ({PROMPT_TOKENS}-token prompt), → all "
              f"views drawn {window['drawn']:.2f} s, peak {window['peak'] / 2**20:,.0f} MB{verdict}  "
              f"({load_average()})", flush=True)
        timeline = window["timeline"]
        print("    " + ", ".join(f"{name} {timeline[name]:.2f} s" for name in (
            "torch imported", "window built", "model open", "first steps arrived", "run finished") if name in timeline),
            flush=True)
    if not args.no_greedy:
        greedy = _run(GREEDY, checkpoints["float32"], float32_folder, args.device, str(args.tokens))
        (ours, ours_count), (theirs, theirs_count) = greedy["ours"], greedy["theirs"]
        print(f"  greedy, {PROMPT_TOKENS}-token prompt: with the trace {ours:.1f} ms/token ({ours_count} tokens), "
              f"transformers generate(output_attentions=True) {theirs:.1f} ms/token ({theirs_count} tokens): "
              f"ratio {ours / theirs:.2f}×  ({load_average()})", flush=True)
    if not args.keep:
        shutil.rmtree(float32_folder)
        shutil.rmtree(bfloat16_folder)
        for checkpoint in checkpoints.values():
            os.remove(checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--quick", action="store_true", help="4 layers of each shape (same widths and vocabulary)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (loading, translating, decoding)")
    parser.add_argument("--no-window", action="store_true", help="skip the window's time")
    parser.add_argument("--no-greedy", action="store_true", help="skip the comparison with transformers' generate")
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens timed (default 32)")
    parser.add_argument("--keep", metavar="FOLDER", help="write the folders and checkpoints here and keep them")
    parser.add_argument("--long-prompts", type=int, nargs="*", metavar="TOKENS",
                        help=f"time long prompts in the window instead (default {' '.join(map(str, LONG_PROMPTS))})")
    parser.add_argument("--repeats", type=int, default=3, help="--long-prompts: fresh processes per case (median)")
    parser.add_argument("--prompt-case", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prompt_case:
        print(json.dumps(long_prompt_case(args.prompt_case)), flush=True)
        os._exit(0)  # not waiting for the worker's source coverage of the run, which closing the window would
    if args.long_prompts is not None:
        long_prompts(args.long_prompts or list(LONG_PROMPTS), args.repeats)
        return
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            parser.exit(1, "decoder_only: error: --device cuda, but torch sees no CUDA device here\n")
    folder = args.keep or tempfile.mkdtemp()
    for shape in args.shapes:
        run_shape(shape, folder, args)


if __name__ == "__main__":
    main()
