"""How fast attnviz starts, in fresh processes (median of --repeats each):

- launch → the window is shown (it says it is loading while torch and the model load);
- launch → the first heatmap of the default demo is drawn;
- `attnviz --help`;
- beside `python -c "import torch"`, the floor any start that needs torch pays.

    QT_QPA_PLATFORM=offscreen python benchmarks/startup.py [--repeats 5]

The app reports its own times when ATTNVIZ_STARTUP_PROBE holds the launch time (attnviz/gui/app.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(argv: list[str], env: dict | None = None) -> tuple[float, str]:
    started = time.time()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.strip()[-500:]}")
    return time.time() - started, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
    shown, heatmap, helps, floors = [], [], [], []
    for _ in range(args.repeats):
        env["ATTNVIZ_STARTUP_PROBE"] = repr(time.time())
        _, out = launch([sys.executable, "-m", "attnviz.cli"], env)
        times = dict(line.split() for line in out.splitlines() if line.split()[0] in ("shown", "heatmap"))
        shown.append(float(times["shown"]))
        heatmap.append(float(times["heatmap"]))
        helps.append(launch([sys.executable, "-m", "attnviz.cli", "--help"])[0])
        floors.append(launch([sys.executable, "-c", "import torch"])[0])
    floor = statistics.median(floors)
    print(f"median of {args.repeats} fresh processes      seconds   × the torch-import floor")
    for name, values, goal in (("launch → window shown", shown, 1.0),
                               ("launch → first heatmap (default demo)", heatmap, 3.0),
                               ("attnviz --help", helps, 0.5), ('python -c "import torch" (floor)', floors, None)):
        median = statistics.median(values)
        verdict = "" if goal is None else f"   goal ≤ {goal:.1f} s: {'met' if median <= goal else 'NOT met'}"
        print(f"{name:<40} {median:7.2f}   {median / floor:5.2f}×{verdict}")


if __name__ == "__main__":
    main()
