"""How big a pickle would become, measured from its opcodes before anything is unpickled.

A pickle of a few hundred bytes can ask for gigabytes: ``bytearray(8_000_000_000)`` is one allowed call,
and a chain of lists each holding ten references to the one before (the "billion laughs") is tiny on disk
but has 10**40 elements to anything that walks, hashes or prints it. The unpicklers cannot see this
coming, so :func:`check_pickle_size` replays the opcodes on a stack of :class:`_Node` records that count
what each object would hold if written out in full (shared references counted every time), and refuses
the file once that count passes a budget proportional to the file's own size. The replay touches each
opcode once, so it takes time linear in the pickle, whatever the pickle claims.
"""

from __future__ import annotations

import io
import pickletools
from pathlib import Path

from ..errors import CheckpointError

# Calls whose integer argument is a count of elements or bytes to make (bytes(n), bytearray(n), range(n)).
_SIZED_CALLS = frozenset({"bytes", "bytearray", "range", "list", "tuple", "set", "frozenset", "str"})
_INT_PUSHES = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})
_STRING_PUSHES = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
                            "BINSTRING", "STRING"})
# Opcodes that add to an object already on the stack instead of making a new one.
_MUTATORS = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})
MAX_NESTING = 1000  # open MARKs at once; real checkpoints nest a few dozen levels
MIN_BUDGET = 1 << 20  # elements any file may make, however small it is
BYTES_FACTOR = 16  # and per byte of the file


class _Node:
    """One object on the replayed stack: how many elements it stands for, and what a size check needs."""

    __slots__ = ("items", "size", "value")

    def __init__(self, size: int = 1, value: object = None, items: list | None = None):
        self.size, self.value, self.items = size, value, items


def size_budget(file_size: int) -> int:
    """Elements a file of ``file_size`` bytes may unpickle into."""
    return MIN_BUDGET + BYTES_FACTOR * file_size


def check_pickle_size(path: Path, data: bytes, budget: int, pickles: int = 8) -> None:
    """Raise :class:`CheckpointError` if the pickles at the start of ``data`` would build more than
    ``budget`` elements. Malformed data ends the replay quietly: loading reports the damage."""
    stream = io.BytesIO(data)
    for _ in range(pickles):  # torch's legacy format is several pickles in a row
        try:
            _replay(path, pickletools.genops(stream), budget)
        except CheckpointError:
            raise
        except Exception:  # noqa: BLE001 - not (or no more) pickle data
            return
        if stream.tell() >= len(data):
            return


def _replay(path: Path, opcodes, budget: int) -> None:
    stack: list[_Node] = []
    marks: list[int] = []  # stack heights at each open MARK
    memo: dict[int, _Node] = {}
    for opcode, arg, _position in opcodes:
        name = opcode.name
        if name == "MARK":
            marks.append(len(stack))
            if len(marks) > MAX_NESTING:
                raise CheckpointError(path, f"refused: its pickle nests more than {MAX_NESTING} levels deep; "
                                            f"nothing from it was run")
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]
            continue
        if name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[int(arg)])
            continue
        if name == "DUP":
            stack.append(stack[-1])
            continue
        popped = _pop(stack, marks, opcode.stack_before)
        if name in _MUTATORS:
            target = popped[0]
            target.size += sum(node.size for node in popped[1:])
            _check(path, target, budget)
            stack.append(target)
            continue
        node = _made(name, arg, popped)
        _check(path, node, budget)
        stack.extend(node for _ in opcode.stack_after)
        if name == "STOP":
            return


def _pop(stack: list[_Node], marks: list[int], before: list) -> list[_Node]:
    """The nodes an opcode consumes, in stack order; a mark and what lies above it are consumed together."""
    if pickletools.stackslice in before:
        mark = marks.pop()
        above = stack[mark:]
        del stack[mark:]
        below = before.index(pickletools.markobject)
    else:
        above, below = [], len(before)
    taken = stack[len(stack) - below:] if below else []
    del stack[len(stack) - below:]
    return taken + above


def _made(name: str, arg: object, popped: list[_Node]) -> _Node:
    size = 1 + sum(node.size for node in popped)
    if name in _INT_PUSHES:
        return _Node(value=arg if isinstance(arg, int) else None)
    if name in _STRING_PUSHES:
        return _Node(value=arg if isinstance(arg, str) else None)
    if name == "GLOBAL":
        return _Node(value=str(arg).split(" ", 1)[-1])
    if name == "STACK_GLOBAL":
        return _Node(value=popped[1].value if len(popped) == 2 else None)
    if name.startswith("TUPLE"):
        return _Node(size, items=popped)
    if name == "REDUCE" and len(popped) == 2 and popped[0].value in _SIZED_CALLS:
        counts = [node.value for node in popped[1].items or () if isinstance(node.value, int)]
        size += max((abs(count) for count in counts), default=0)
    return _Node(size)


def _check(path: Path, node: _Node, budget: int) -> None:
    if node.size > budget:
        raise CheckpointError(path, f"refused: its pickle would build more than {budget:,} elements from a file "
                                    f"this small (a decompression bomb?); nothing from it was run")
