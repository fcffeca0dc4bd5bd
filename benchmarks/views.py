"""How fast the app's views follow the data, on a 6-layer × 8-head Transformer (random weights).

For 20, 100 and 500 source tokens (and as many target tokens, forced), times:
- "update after a run": the session takes the result and every view is redrawn (focus heatmap, the
  layer's head grid, the model view of all layers × heads, the decoding panel), painted once;
- "layer switch" and "head switch": the selection changes and the affected views repaint.
A switch must not rebuild plots: the script checks that every thumbnail item survives a switch.

    QT_QPA_PLATFORM=offscreen python benchmarks/views.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from models import build_model, make_config
from models.storage.checkpoint import save_checkpoint
from models.inference.decoding import finish
from models.text.tokenizers import CharTokenizer


def model_file(folder: str) -> str:
    torch.manual_seed(0)
    tokenizer = CharTokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    config = make_config("transformer-preln", tokenizer.vocab_size, tokenizer.vocab_size, d_model=64, heads=8,
                         d_ff=128, encoder_layers=6, decoder_layers=6, max_len=1024)
    return str(save_checkpoint(os.path.join(folder, "bench.safetensors"), build_model(config), tokenizer, tokenizer))


def timed(application, action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        application.processEvents()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import tempfile

    application = QApplication.instance() or QApplication(sys.argv[:1])
    from attnviz.gui.app import create_window
    from attnviz.state.session import RunSettings

    folder = tempfile.mkdtemp()
    settings = QSettings(os.path.join(folder, "bench.ini"), QSettings.Format.IniFormat)
    window = create_window(model_file(folder), "cpu", settings)
    window.resize(1400, 900)
    window.show()
    while window.session.model is None:
        application.processEvents()
    translator = window.worker_thread.worker.translator
    print("tokens | update after a run | layer switch | head switch | plots rebuilt by a switch")
    for length in (20, 100, 500):
        text = ("abcdefghij" * 60)[:length - 1]  # + </s> = length source tokens
        source = translator.source(text)
        results = finish(translator.decode(source, mode="forced", target_ids=translator.target(text)))
        window.session.new_request(RunSettings(text=text))

        def update():
            window.session.accept_results(window.session.request.id, results)
            window.session.replace_selection(kind="cross", layer=0, head=0)
            window.viewing.refresh(rebuild=True)

        run_time = timed(application, update, args.repeats)
        items = [image for _, image in window.views.head_grid.cells + window.views.model_view.cells]
        layer = iter(range(10_000))
        layer_time = timed(application, lambda: window.select(layer=next(layer) % 6), args.repeats)
        head = iter(range(10_000))
        head_time = timed(application, lambda: window.select(head=next(head) % 8), args.repeats)
        rebuilt = items != [image for _, image in window.views.head_grid.cells + window.views.model_view.cells]
        print(f"{length:6d} | {run_time * 1e3:15.1f} ms | {layer_time * 1e3:9.1f} ms | {head_time * 1e3:8.1f} ms | "
              f"{'YES (bug)' if rebuilt else 'no'}")
    window.close()


if __name__ == "__main__":
    main()
