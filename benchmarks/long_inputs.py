"""Long inputs end to end, in a real window (offscreen), on a 6-layer × 8-head Transformer (d_model 64,
character tokenizer, random weights; the end token's logit is pushed down so greedy decoding runs to
the length asked for).

1. For 32, 128, 256, 512 and 1,024 tokens (source and target alike), forced, greedy and beam search (width 4, the
   window's default): the time from the request to all views drawn (focus heatmap, the layer's heads, all layers ×
   heads, decoding panel) and the app process' peak resident memory after the first run and after them all (a run holds
   the previous result until its own is shown). Each case runs in a fresh process, so each peak is its own. BertViz's
   model_view on this machine kind took 1.27 s at 32 tokens, 13.9 s at 128, 62.7 s at 256 and never drew at 512: the
   last column says how many times faster attnviz is. Then the focus heatmap is zoomed in and out and panned:
   milliseconds per frame (moved and painted).
2. Greedy and beam search at length: the time of one decoding step near step 1,000 against near step 10.

    QT_QPA_PLATFORM=offscreen python benchmarks/long_inputs.py [--device cuda] [--repeats 3] [--modes beam]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.windows import wait_for  # noqa: E402

LENGTHS = (32, 128, 256, 512, 1024)
MODES = ("forced", "greedy", "beam")  # beam: the window's default width, 4
BERTVIZ_SECONDS = {32: 1.27, 128: 13.9, 256: 62.7}  # model_view on this machine kind; never drew at 512
TEXT = "the quick brown fox jumps over a lazy dog "


def model_file(folder: str, max_len: int = 1024) -> str:
    import torch

    from models import build_model, make_config
    from models.storage.checkpoint import save_checkpoint
    from models.text.tokenizers import CharTokenizer

    torch.manual_seed(0)
    tokenizer = CharTokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    config = make_config("transformer-preln", tokenizer.vocab_size, tokenizer.vocab_size, d_model=64, heads=8,
                         d_ff=128, encoder_layers=6, decoder_layers=6, max_len=max_len, dropout=0.0)
    model = build_model(config)
    with torch.no_grad():
        model.output.bias[config.eos_id] = -1e4
    return str(save_checkpoint(os.path.join(folder, "long.safetensors"), model, tokenizer, tokenizer))


def text_of(tokens: int) -> str:
    """A text of ``tokens - 1`` characters: with the end token, ``tokens`` positions."""
    return (TEXT * (tokens // len(TEXT) + 1))[: tokens - 1]


def one_case(mode: str, tokens: int, device: str, repeats: int) -> dict:
    """Open the window, run ``mode`` at ``tokens`` tokens ``repeats`` times; the median time to drawn views."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    application = QApplication.instance() or QApplication(sys.argv[:1])
    from attnviz.gui.app import create_window

    folder = tempfile.mkdtemp()
    settings = QSettings(os.path.join(folder, "bench.ini"), QSettings.Format.IniFormat)
    window = create_window(model_file(folder, max(1024, tokens)), device, settings)
    window.resize(1400, 900)
    window.show()
    wait_for(application, lambda: window.session.model is not None)
    bar = window.views.input_bar
    bar.text.setText(text_of(tokens))
    bar.target.setText(text_of(tokens))
    bar.mode.setCurrentIndex(bar.mode.findData(mode))
    bar.max_len.setValue(tokens)
    bar.debounce.stop()  # the benchmark asks for each run itself
    times, first_peak = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        window.run()
        request = window.session.request
        wait_for(application,
                 lambda request=request: window.session.is_current(request.id) and bool(window.session.results))
        application.processEvents()
        window.grab()  # paints every visible view now
        times.append(time.perf_counter() - start)
        first_peak = first_peak or peak_rss_mb()
    result = window.session.result
    assert len(result.token_ids) == tokens, (len(result.token_ids), tokens)
    frames = pan_and_zoom(application, window.views.focus)
    window.close()
    window.shut_down()
    window.deleteLater()  # torn down while the application exists, as the app's own exit does
    application.processEvents()
    return {"seconds": statistics.median(times), "first_peak_mb": first_peak, "peak_mb": peak_rss_mb(), **frames}


def pan_and_zoom(application, focus) -> dict:
    """Milliseconds per frame of the focus heatmap (median): zooming in step by step to 1/32 of the matrix,
    panning across it, zooming out again; each frame is the view moved and painted (ticks and labels too)."""
    view = focus.plot.getViewBox()
    view.autoRange(padding=0)
    application.processEvents()

    def frame(move) -> float:
        start = time.perf_counter()
        move()
        application.processEvents()
        focus.repaint()
        return time.perf_counter() - start

    zoom_in = [frame(lambda: view.scaleBy((0.8, 0.8))) for _ in range(16)]
    width = view.viewRange()[0][1] - view.viewRange()[0][0]
    pan = [frame(lambda: view.translateBy(x=width / 10, y=width / 20)) for _ in range(30)]
    zoom_out = [frame(lambda: view.scaleBy((1.25, 1.25))) for _ in range(16)]
    return {"zoom_ms": 1e3 * statistics.median(zoom_in + zoom_out), "pan_ms": 1e3 * statistics.median(pan),
            "worst_frame_ms": 1e3 * max(zoom_in + pan + zoom_out)}


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def step_costs(device: str, steps: int = 1010) -> dict:
    """Median seconds of a decoding step at steps 5–34 and 980–1009, greedy and beam 4 (source 32 tokens); thirty
    steps each, so that one slow moment of a busy machine does not decide the ratio."""
    import numpy as np
    import torch

    from attnviz.gui.work import leave_a_core_for_the_gui
    from models.storage.checkpoint import load_checkpoint
    from models.inference.translator import Translator

    leave_a_core_for_the_gui()
    translator = Translator(load_checkpoint(model_file(tempfile.mkdtemp())), device)
    source = translator.source(text_of(32))
    costs = {}
    for mode in ("greedy", "beam"):
        generator = translator.decode(source, mode=mode, beam=4, max_len=steps)
        times = []
        for _ in range(steps - 1):
            start = time.perf_counter()
            next(generator)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        generator.close()
        costs[mode] = (float(np.median(times[5:35])), float(np.median(times[980:1010])))
    return costs


def child(arguments: list[str]) -> dict:
    command = [sys.executable, os.path.abspath(__file__), *arguments]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--case", nargs=2, metavar=("MODE", "TOKENS"), help=argparse.SUPPRESS)
    parser.add_argument("--step-costs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from models.inference.translator import DeviceError, resolve_device

    try:
        resolve_device(args.device)
    except DeviceError as error:
        parser.exit(1, f"long_inputs: error: {error}\n")
    if args.case:
        print(json.dumps(one_case(args.case[0], int(args.case[1]), args.device, args.repeats)))
        return
    if args.step_costs:
        print(json.dumps(step_costs(args.device)))
        return
    common = ["--device", args.device, "--repeats", str(args.repeats)]
    print(f"device {args.device}; each case in its own process; time = median of {args.repeats} runs")
    print("tokens | mode   | request → all views drawn | peak RSS: first run, all runs | BertViz model_view"
          " | attnviz is")
    frames = []
    for tokens in args.lengths:
        for mode in args.modes:
            case = child([*common, "--case", mode, str(tokens)])
            bertviz = BERTVIZ_SECONDS.get(tokens)
            versus = f"{bertviz:6.2f} s" if bertviz else ("never drew" if tokens >= 512 else "not measured")
            ratio = f"{bertviz / case['seconds']:6.1f}× faster" if bertviz else "–"
            memory = f"{case['first_peak_mb']:5.0f} MB, {case['peak_mb']:5.0f} MB"
            print(f"{tokens:6d} | {mode:6s} | {case['seconds']:23.2f} s | {memory:>29s} | {versus:>18s} | {ratio}")
            frames.append((tokens, mode, case))
    print("\nfocus heatmap (tokens × tokens cells): one frame of zoom / pan, moved and painted; 60 fps = 16.7 ms")
    for tokens, mode, case in frames:
        print(f"{tokens:6d} | {mode:6s} | zoom {case['zoom_ms']:5.1f} ms | pan {case['pan_ms']:5.1f} ms | "
              f"worst frame {case['worst_frame_ms']:5.1f} ms")
    costs = child(["--device", args.device, "--step-costs"])
    print("\none decoding step (source 32 tokens): near step 10 vs near step 1,000")
    for mode, (early, late) in costs.items():
        print(f"  {mode:6s}: {early * 1e3:6.2f} ms vs {late * 1e3:6.2f} ms, ratio {late / early:.2f}x (goal <= 2x)")


if __name__ == "__main__":
    main()
