"""Evaluating a parsed JMS selector (router.amqp.selector) over a message's fields.

Owns: `evaluate(node, lookup)` with three-valued logic (None is unknown: JMS 1.1 §3.8.1.2),
`matches`, Java long arithmetic (`wrap`: 64 bits, so no value grows with the selector), and
`like` / `glob_match`, the matcher LIKE and the topic binding share: segments between
any-run wildcards found leftmost in turn, one-item wildcards by a bit-parallel scan, linear in
the value for a given pattern (no backtracking). Chains are flat lists in the tree, so
evaluation recurses only as deep as the selector's nesting, which the parser bounds.
Must not touch: parsing, message bytes (`lookup` reads the fields).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1

Node = tuple[Any, ...]  # ("lit", v) ("id", name) ("and"|"or", [n]) ("not", n) ("neg", n)
# ("cmp", op, a, b) ("arith", first, [(op, n)]) ("between", negated, e, lo, hi)
# ("like", negated, id, pattern, escape) ("in", negated, id, (str, ...)) ("null", negated, id)
Lookup = Callable[[str], Any]


def wrap(value: int) -> int:
    """Java long arithmetic: two's complement, 64 bits."""
    return ((value - LONG_MIN) & 0xFFFFFFFFFFFFFFFF) + LONG_MIN


# --- evaluation: None is "unknown" ------------------------------------------------------------------


def _number_of(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _compare(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    na, nb = _number_of(a), _number_of(b)
    if na is not None and nb is not None:
        if op == "=":
            return na == nb
        if op == "<>":
            return na != nb
        if op == "<":
            return na < nb
        if op == ">":
            return na > nb
        if op == "<=":
            return na <= nb
        return na >= nb
    same = (isinstance(a, bool) and isinstance(b, bool)) or (isinstance(a, str) and isinstance(b, str))
    if same and op in ("=", "<>"):
        return bool(a == b) == (op == "=")
    return False  # JMS 1.1 §3.8.1.2: comparing values of unlike types (or ordering them) is false


def _arith(op: str, a: int | float, b: int | float) -> int | float | None:
    if isinstance(a, int) and isinstance(b, int):
        if op == "+":
            return wrap(a + b)
        if op == "-":
            return wrap(a - b)
        if op == "*":
            return wrap(a * b)
        if b == 0:
            return None
        quotient = abs(a) // abs(b)  # Java truncates towards zero
        return wrap(quotient if (a < 0) == (b < 0) else -quotient)
    fa, fb = float(a), float(b)
    if op == "+":
        return fa + fb
    if op == "-":
        return fa - fb
    if op == "*":
        return fa * fb
    if fb == 0.0:
        return None
    return fa / fb


def like(value: str, pattern: str, escape: str | None) -> bool:
    """SQL LIKE: `%` any run, `_` any one character (glob_match does the matching)."""
    segments: list[list[str | None]] = [[]]  # None stands for `_`
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and i + 1 < len(pattern):
            segments[-1].append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            segments.append([])
        else:
            segments[-1].append(None if c == "_" else c)
        i += 1
    return glob_match(value, segments)


def glob_match(value: Sequence[Any], segments: list[list[Any]]) -> bool:
    """Whether `value` (a string, or a list of words) is segments[0], any run, segments[1], ...,
    any run, segments[-1]; None in a segment matches any one item. The middle segments are
    found leftmost in turn (exact for this kind of pattern: no backtracking across segments),
    each with str.find or a bit-parallel scan: linear in the value for a given pattern."""
    if len(segments) == 1:
        return len(value) == len(segments[0]) and _at(value, 0, segments[0])
    first, last = segments[0], segments[-1]
    if len(first) + len(last) > len(value) or not _at(value, 0, first):
        return False
    pos, stop = len(first), len(value) - len(last)
    for segment in segments[1:-1]:
        found = _find(value, segment, pos, stop)
        if found < 0:
            return False
        pos = found + len(segment)
    return _at(value, stop, last)


def _at(value: Sequence[Any], pos: int, segment: list[Any]) -> bool:
    for offset, item in enumerate(segment):
        if item is not None and value[pos + offset] != item:
            return False
    return True


def _find(value: Sequence[Any], segment: list[Any], pos: int, stop: int) -> int:
    """The first offset in value[pos:stop] where `segment` matches, -1 if none."""
    if not segment:
        return pos
    if isinstance(value, str) and None not in segment:
        return value.find("".join(segment), pos, stop)
    # Shift-and: bit i of `state` says segment[:i + 1] matches the items just read.
    anything = 0
    for i, item in enumerate(segment):
        if item is None:
            anything |= 1 << i
    masks: dict[Any, int] = {}
    for i, item in enumerate(segment):
        if item is not None:
            masks[item] = masks.get(item, anything) | (1 << i)
    goal, state = 1 << (len(segment) - 1), 0
    for at in range(pos, stop):
        state = ((state << 1) | 1) & masks.get(value[at], anything)
        if state & goal:
            return at - len(segment) + 1
    return -1


def evaluate(node: Node, lookup: Lookup) -> Any:
    """The value of `node`: True, False or None (unknown) for a condition."""
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "id":
        return lookup(node[1])
    if kind == "and":
        result: bool | None = True
        for item in node[1]:
            value = evaluate(item, lookup)
            if value is False:
                return False
            if value is not True:
                result = None
        return result
    if kind == "or":
        result = False
        for item in node[1]:
            value = evaluate(item, lookup)
            if value is True:
                return True
            if value is not False:
                result = None
        return result
    if kind == "not":
        value = evaluate(node[1], lookup)
        return (not value) if isinstance(value, bool) else None
    if kind == "cmp":
        return _compare(node[1], evaluate(node[2], lookup), evaluate(node[3], lookup))
    if kind == "neg":
        number = _number_of(evaluate(node[1], lookup))
        if number is None:
            return None
        return wrap(-number) if isinstance(number, int) else -number
    if kind == "arith":
        total = _number_of(evaluate(node[1], lookup))
        for op, item in node[2]:
            operand = _number_of(evaluate(item, lookup))
            if total is None or operand is None:
                return None
            total = _arith(op, total, operand)
        return total
    if kind == "null":
        return (evaluate(node[2], lookup) is None) != node[1]
    value = evaluate(node[2], lookup)
    if value is None:
        return None
    if kind == "between":
        low = _compare(">=", value, evaluate(node[3], lookup))
        high = _compare("<=", value, evaluate(node[4], lookup))
        inside = None if low is None or high is None else (low and high)
    elif kind == "like":
        inside = like(value, node[3], node[4]) if isinstance(value, str) else False
    else:
        assert kind == "in"
        inside = value in node[3] if isinstance(value, str) else False
    return None if inside is None else inside != node[1]


def matches(node: Node, lookup: Lookup) -> bool:
    """Whether a message whose fields `lookup` reads is selected (unknown is not)."""
    return evaluate(node, lookup) is True
