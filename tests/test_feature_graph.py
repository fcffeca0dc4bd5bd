"""The window's features (attnviz/gui/features/) reach one another in one direction only (docs/ARCHITECTURE.md,
"The window's features"): the graph of features reaching features, read from the source, has no cycle.

A feature A reaches a feature B when A's module imports B's, when A names the window's B (``window.viewing``),
when a function of A takes B as a parameter (``viewing``), or when the main window hands B to A's constructor.
Signals a feature emits reach nobody: whoever connects to them reaches the feature."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FEATURES = ROOT / "attnviz" / "gui" / "features"
MAIN_WINDOW = ROOT / "attnviz" / "gui" / "main_window.py"


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted(FEATURES.glob("*.py")) if path.stem != "__init__"}


def _names(modules: dict[str, ast.Module]) -> dict[str, str]:
    """What names each feature (its module's name, and the window's attributes that hold it or its panel)."""
    names = {name: name for name in modules}
    names.update(stats="head_stats", importance_panel="importance")
    return names


def _imported_feature(node: ast.ImportFrom, modules) -> str | None:
    module = node.module or ""
    if node.level == 1 and module.split(".")[0] in modules:  # from .viewing import …
        return module.split(".")[0]
    if module.startswith("attnviz.gui.features."):
        return module.split(".")[3]
    if node.level == 1 and not module:  # from . import viewing
        return next((alias.name for alias in node.names if alias.name in modules), None)
    return None


def _held_by_window(node: ast.Attribute) -> bool:
    """``window.x``, ``self.window.x``, ``main_window.x``: an attribute of the window."""
    owner = node.value
    name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    return "window" in name


def _reached(tree: ast.Module, modules, names) -> set[str]:
    reached = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            reached.add(_imported_feature(node, modules))
        elif isinstance(node, ast.Attribute) and node.attr in names and _held_by_window(node):
            reached.add(names[node.attr])
        elif isinstance(node, ast.arg) and node.arg in names:
            reached.add(names[node.arg])
    return reached - {None}


def _handed(modules, names) -> set[tuple[str, str]]:
    """(A, B) for every feature B the main window hands to the constructor of a feature A."""
    tree = ast.parse(MAIN_WINDOW.read_text(encoding="utf-8"))
    makers = {}  # a name the window imports from features/ → its module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("features."):
            makers.update({alias.asname or alias.name: node.module.split(".")[1] for alias in node.names})
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in makers:
            for value in [*node.args, *(keyword.value for keyword in node.keywords)]:
                held = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
                if held in names:
                    edges.add((makers[node.func.id], names[held]))
    return edges


def feature_graph() -> dict[str, set[str]]:
    modules = _modules()
    names = _names(modules)
    graph = {name: _reached(tree, modules, names) - {name} for name, tree in modules.items()}
    for source, target in _handed(modules, names):
        if source != target:
            graph[source].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as the path that walks it (first node repeated last), or None."""
    state: dict[str, str] = {}  # node → "open" while on the path, "done" once every path from it is walked
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := walk(target)) is not None:
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)) is not None:
            return cycle
    return None


def test_the_rule_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_features_reach_one_another_in_one_direction():
    graph = feature_graph()
    assert {"viewing", "contributions", "opening", "comparing", "sessions"} <= set(graph)
    cycle = find_cycle(graph)
    mutual = sorted(f"{a} ↔ {b}" for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))
    assert cycle is None, f"features reach one another in a cycle: {' → '.join(cycle)} (both ways: {mutual})"


def test_the_graph_sees_what_features_receive():
    """The graph is read, not empty: the features that act on the views' run reach viewing."""
    graph = feature_graph()
    for feature in ("ablation", "opening", "comparing", "exporting", "presenting"):
        assert "viewing" in graph[feature], feature


def test_only_presenting_is_handed_the_window_itself():
    """Features are handed the views and a ``parent`` widget for dialogs; the window itself only where it is what
    the feature lays out (presenting: full screen, the docks)."""
    handed = {name for name, tree in _modules().items() for node in ast.walk(tree)
              if isinstance(node, ast.arg) and node.arg in ("window", "main_window")}
    assert handed == {"presenting"}


def test_the_window_keeps_its_views_as_one_frozen_value(window):
    """The views are the window's one ``views`` value, made by ``setup_views``: nothing sets a view on the window
    from outside, and no feature replaces one."""
    import dataclasses

    from attnviz.gui.layout import Views

    views = window.views
    assert isinstance(views, Views)
    for field in dataclasses.fields(Views):
        assert getattr(views, field.name) is not None, field.name
        assert not hasattr(window, field.name), field.name
    assert views.status_bar is window.statusBar() and views.model_dock is views.docks.model_dock
    with pytest.raises(dataclasses.FrozenInstanceError):
        views.focus = None
