"""How fast attnviz starts, in fresh processes (median of --repeats each):

- launch → the window is shown (it says it is loading while torch and the model load);
- launch → torch imported (on a thread of its own) and → the window built (views, worker, menus);
- launch → the first heatmap of the default demo is drawn;
- `attnviz --help`;
- beside `python -c "import torch"`, the floor any start that needs torch pays.

    QT_QPA_PLATFORM=offscreen python benchmarks/startup.py [--repeats 5]

The app's own times come from benchmarks/startup_probe.py, which launches it and follows the launcher's signals.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.startup_probe import PROBED  # noqa: E402


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


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
    probed = {name: [] for name in PROBED}
    helps, floors = [], []
    for _ in range(args.repeats):
        _, out = launch([sys.executable, "-m", "benchmarks.startup_probe", repr(time.time())], env)
        times = dict(line.split() for line in out.splitlines() if line.split()[0] in PROBED)
        for name in PROBED:
            probed[name].append(float(times[name]))
        helps.append(launch([sys.executable, "-m", "attnviz", "--help"])[0])
        floors.append(launch([sys.executable, "-c", "import torch"])[0])
    floor = statistics.median(floors)
    print(f"median of {args.repeats} fresh processes      seconds   × the torch-import floor  ({load_average()})")
    for name, values, goal in (("launch → window shown", probed["shown"], 1.0),
                               ("launch → torch imported", probed["torch"], None),
                               ("launch → window built", probed["built"], None),
                               ("launch → first heatmap (default demo)", probed["heatmap"], 3.0),
                               ("attnviz --help", helps, 0.5), ('python -c "import torch" (floor)', floors, None)):
        median = statistics.median(values)
        verdict = "" if goal is None else f"   goal ≤ {goal:.1f} s: {'met' if median <= goal else 'NOT met'}"
        print(f"{name:<40} {median:7.2f}   {median / floor:5.2f}×{verdict}")
    print(f"({load_average()})")


if __name__ == "__main__":
    main()
