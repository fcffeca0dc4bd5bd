"""models/ is the headless core: importing all of it, and running the CLI's headless commands, must not
load Qt."""

import subprocess
import sys

QT_MODULES = ("PySide6", "shiboken6", "pyqtgraph", "superqt", "qtpy")

PROBE = """
import pkgutil, importlib, sys
import models
for info in pkgutil.walk_packages(models.__path__, "models."):
    importlib.import_module(info.name)
import attnviz.cli
for name in {modules!r}:
    loaded = [m for m in sys.modules if m == name or m.startswith(name + ".")]
    assert not loaded, f"{{name}} imported: {{loaded[:3]}}"
print("clean", len([m for m in sys.modules if m.startswith("models")]))
"""


def test_models_and_headless_cli_import_no_qt():
    result = subprocess.run([sys.executable, "-c", PROBE.format(modules=QT_MODULES)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("clean")
    assert int(result.stdout.split()[1]) >= 10  # the walk really imported the core's modules
