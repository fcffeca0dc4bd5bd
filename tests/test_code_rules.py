"""Rules of the code base that a reviewer would otherwise have to remember (docs/ARCHITECTURE.md, "Style")."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("models", "attnviz")


def _sources():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _named_callables() -> set[str]:
    """Names of the functions, methods and classes the product defines whose every argument can be named."""
    names, variadic = set(), set()
    for _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                (variadic if node.args.vararg or node.args.posonlyargs else names).add(node.name)
            elif isinstance(node, ast.ClassDef):
                names.add(node.name)
    # ``forward`` is reached through ``module(...)``; a name defined both ways stays out
    return names - variadic - {"forward", "__init__", "__call__"}


def _positional_count(call: ast.Call) -> int:
    return sum(not isinstance(arg, ast.Starred) for arg in call.args)


def test_calls_to_our_functions_name_arguments_after_the_third():
    ours = _named_callables()
    offenders = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _positional_count(node) <= 3:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ours:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(func)}"
                                 f" with {_positional_count(node)} positional arguments")
    assert not offenders, "name the arguments after the third:\n" + "\n".join(offenders)


def test_the_rule_sees_a_call_that_breaks_it(tmp_path):
    """The scan above must be able to fail: a call shaped like the ones it forbids is found."""
    tree = ast.parse("weight_rows(source, state, 'key', 'layout')\nweights.pick(1, 2, 3, 4)\nf(*rows, 1, 2, 3)\n")
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert [_positional_count(call) for call in calls] == [4, 4, 3]
    assert {"weight_rows", "Checkpoint", "provenance_record"} <= _named_callables()
