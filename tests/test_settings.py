"""Settings the user edited or damaged: each bad value falls back to its default with a notice, good ones
are read with their types (a real QSettings INI file)."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from attnviz.state.settings import SettingsReader


def test_bad_values_fall_back_and_good_ones_are_read(tmp_path):
    path = tmp_path / "attnviz.ini"
    path.write_text("[run]\nbeam=abc\nmax_len=4.5\nmode=sideways\ntext=hello\n[window]\ngeometry=hello\n"
                    "[view]\nmasks=perhaps\ncolormap=magma\n[files]\nrecent=a.safetensors\n[big]\nnumber=123456789012345678901\n")
    reader = SettingsReader(QSettings(str(path), QSettings.Format.IniFormat))
    assert reader.integer("run/beam", 4, 2, 32) == 4
    assert reader.integer("run/max_len", 100, 1, 4096) == 100
    assert reader.integer("big/number", 7, 1, 10) == 7
    assert reader.choice("run/mode", "greedy", ("greedy", "beam", "forced")) == "greedy"
    assert reader.text("run/text") == "hello"
    assert reader.blob("window/geometry") is None
    assert reader.boolean("view/masks", True) is True
    assert reader.choice("view/colormap", "viridis", ("viridis", "magma")) == "magma"
    assert reader.strings("files/recent") == ["a.safetensors"]
    assert reader.integer("run/missing", 3, 1, 5) == 3
    assert len(reader.problems) == 6 and reader.problems[0] == "run/beam='abc' is not valid; using 4"
