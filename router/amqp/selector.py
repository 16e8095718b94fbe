"""JMS message selectors (the apache.org:selector-filter:string filter, apache-filters.xml):
parsing into a small tree, and evaluating it over a message's fields.

Owns: the grammar (the SQL-92 subset of JMS 1.1 §3.8.1: literals, identifiers, comparison,
arithmetic, AND/OR/NOT with three-valued logic, [NOT] BETWEEN, [NOT] LIKE ... [ESCAPE],
[NOT] IN, IS [NOT] NULL), `parse(text)` (SelectorError naming the position), `render(node)`
(text that parses back to the same tree), and `evaluate(node, lookup)`.
Identifiers are resolved by the caller's `lookup(name)` (router.amqp.filters maps the JMS and
`amqp.*` header names and application-properties).

Bounds, because a selector comes from a peer: at most MAX_SELECTOR_CHARS characters and
MAX_DEPTH levels of nesting (parentheses, NOT, unary signs). Chains of AND, OR, + and * are
kept flat (lists), so neither parsing nor evaluation recurses deeper than the nesting. Integer
arithmetic wraps to 64 bits as Java's long does, so no value grows with the selector; LIKE is
matched without backtracking regular expressions (linear in the value for a given pattern).
Must not touch: message bytes (the caller reads fields), links, routing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

MAX_SELECTOR_CHARS: Final = 4096
MAX_DEPTH: Final = 32
LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1

Node = tuple[Any, ...]  # ("lit", v) ("id", name) ("and"|"or", [n]) ("not", n) ("neg", n)
# ("cmp", op, a, b) ("arith", first, [(op, n)]) ("between", negated, e, lo, hi)
# ("like", negated, id, pattern, escape) ("in", negated, id, (str, ...)) ("null", negated, id)

_KEYWORDS: Final = frozenset(("NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"))
_COMPARE: Final = ("<>", "<=", ">=", "=", "<", ">")
_DIGITS: Final = "0123456789"


class SelectorError(ValueError):
    """A selector that is not valid (or too big): `position` is the 0-based character offset."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(f"invalid selector at position {position}: {message}")
        self.position = position
        self.message = message


def _wrap(value: int) -> int:
    """Java long arithmetic: two's complement, 64 bits."""
    return ((value - LONG_MIN) & 0xFFFFFFFFFFFFFFFF) + LONG_MIN


# --- tokens ----------------------------------------------------------------------------------------

Token = tuple[str, Any, int]  # (kind, value, position): kinds "num", "str", "id", "kw", "op", "end"


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\f":
            i += 1
        elif c == "'":
            start, i, parts = i, i + 1, []
            while True:
                j = text.find("'", i)
                if j < 0:
                    raise SelectorError(start, "unterminated string literal")
                parts.append(text[i:j])
                if j + 1 < n and text[j + 1] == "'":  # '' is a quote inside the literal
                    parts.append("'")
                    i = j + 2
                    continue
                i = j + 1
                break
            out.append(("str", "".join(parts), start))
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _number(text, i, out)
        elif c.isalpha() or c in "_$":
            start = i
            while i < n and (text[i].isalnum() or text[i] in "_$."):
                i += 1
            word = text[start:i]
            if not word.isascii() and not word.isidentifier():
                raise SelectorError(start, f"bad identifier {word!r}")
            upper = word.upper()
            out.append(("kw", upper, start) if upper in _KEYWORDS else ("id", word, start))
        else:
            for op in (*_COMPARE, "(", ")", ",", "+", "-", "*", "/"):
                if text.startswith(op, i):
                    out.append(("op", op, i))
                    i += len(op)
                    break
            else:
                raise SelectorError(i, f"unexpected character {c!r}")
    out.append(("end", None, n))
    return out


def _number(text: str, i: int, out: list[Token]) -> int:
    start, n = i, len(text)
    if text.startswith(("0x", "0X"), i):
        i += 2
        while i < n and text[i] in "0123456789abcdefABCDEF":
            i += 1
        digits = text[start + 2 : i]
        if not digits:
            raise SelectorError(start, "bad hexadecimal literal")
        value: int | float = int(digits, 16)
        if i < n and text[i] in "lL":
            i += 1
    else:
        while i < n and text[i] in _DIGITS:
            i += 1
        exact = True
        if i < n and text[i] == ".":
            exact = False
            i += 1
            while i < n and text[i] in _DIGITS:
                i += 1
        if i < n and text[i] in "eE":
            j = i + 1
            if j < n and text[j] in "+-":
                j += 1
            if j < n and text[j] in _DIGITS:
                exact = False
                i = j
                while i < n and text[i] in _DIGITS:
                    i += 1
        literal = text[start:i]
        if exact:
            value = int(literal)
            if i < n and text[i] in "lL":
                i += 1
        else:
            value = float(literal)
            if i < n and text[i] in "fFdD":
                i += 1
    if isinstance(value, int) and value > LONG_MAX + 1:  # (+1: the magnitude of LONG_MIN)
        raise SelectorError(start, "integer literal out of range")
    if i < n and (text[i].isalnum() or text[i] in "_$."):
        raise SelectorError(i, "bad numeric literal")
    out.append(("num", value, start))
    return i


# --- parsing ---------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, kind: str, value: Any) -> bool:
        token = self.tokens[self.at]
        if token[0] == kind and token[1] == value:
            self.at += 1
            return True
        return False

    def expect(self, kind: str, value: Any, what: str) -> None:
        if not self.accept(kind, value):
            raise SelectorError(self.peek()[2], f"expected {what}")

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SelectorError(self.peek()[2], f"nested deeper than {MAX_DEPTH} levels")

    def or_(self) -> Node:
        items = [self.and_()]
        while self.accept("kw", "OR"):
            items.append(self.and_())
        return items[0] if len(items) == 1 else ("or", items)

    def and_(self) -> Node:
        items = [self.not_()]
        while self.accept("kw", "AND"):
            items.append(self.not_())
        return items[0] if len(items) == 1 else ("and", items)

    def not_(self) -> Node:
        if self.accept("kw", "NOT"):
            self.deeper()
            node = ("not", self.not_())
            self.depth -= 1
            return node
        return self.predicate()

    def predicate(self) -> Node:
        left = self.sum()
        token = self.peek()
        if token[0] == "op" and token[1] in _COMPARE:
            self.at += 1
            return ("cmp", token[1], left, self.sum())
        if token[0] == "kw" and token[1] == "IS":
            self.at += 1
            negated = self.accept("kw", "NOT")
            self.expect("kw", "NULL", "NULL")
            return ("null", negated, left)
        negated = self.accept("kw", "NOT")
        token = self.peek()
        if token[0] == "kw" and token[1] == "BETWEEN":
            self.at += 1
            low = self.sum()
            self.expect("kw", "AND", "AND")
            return ("between", negated, left, low, self.sum())
        if token[0] == "kw" and token[1] in ("LIKE", "IN"):
            if left[0] != "id":
                raise SelectorError(token[2], f"{token[1]} needs an identifier on its left")
            self.at += 1
            if token[1] == "IN":
                return ("in", negated, left, self.strings())
            pattern = self.take()
            if pattern[0] != "str":
                raise SelectorError(pattern[2], "LIKE needs a string pattern")
            escape = None
            if self.accept("kw", "ESCAPE"):
                esc = self.take()
                if esc[0] != "str" or len(esc[1]) != 1:
                    raise SelectorError(esc[2], "ESCAPE needs a string of one character")
                escape = esc[1]
            _check_pattern(pattern[1], escape, pattern[2])
            return ("like", negated, left, pattern[1], escape)
        if negated:
            raise SelectorError(token[2], "expected BETWEEN, LIKE or IN after NOT")
        return left

    def strings(self) -> tuple[str, ...]:
        self.expect("op", "(", "'('")
        items: list[str] = []
        while True:
            token = self.take()
            if token[0] != "str":
                raise SelectorError(token[2], "IN needs a list of string literals")
            items.append(token[1])
            if self.accept("op", ")"):
                return tuple(items)
            self.expect("op", ",", "',' or ')'")

    def sum(self) -> Node:
        first = self.product()
        rest: list[tuple[str, Node]] = []
        while True:
            token = self.peek()
            if token[0] == "op" and token[1] in "+-":
                self.at += 1
                rest.append((token[1], self.product()))
            else:
                return ("arith", first, rest) if rest else first

    def product(self) -> Node:
        first = self.unary()
        rest: list[tuple[str, Node]] = []
        while True:
            token = self.peek()
            if token[0] == "op" and token[1] in "*/":
                self.at += 1
                rest.append((token[1], self.unary()))
            else:
                return ("arith", first, rest) if rest else first

    def unary(self) -> Node:
        token = self.peek()
        if token[0] == "op" and token[1] in "+-":
            self.at += 1
            following = self.peek()
            if token[1] == "-" and following[0] == "num" and following[1] == LONG_MAX + 1:
                self.at += 1  # the one literal that fits only negated
                return ("lit", LONG_MIN)
            self.deeper()
            inner = self.unary()
            self.depth -= 1
            if token[1] == "+":
                return inner
            if inner[0] == "lit" and isinstance(inner[1], (int, float)) and not isinstance(inner[1], bool):
                return ("lit", _wrap(-inner[1]) if isinstance(inner[1], int) else -inner[1])
            return ("neg", inner)
        return self.primary()

    def primary(self) -> Node:
        token = self.take()
        kind, value, pos = token
        if kind == "num":
            if isinstance(value, int) and value > LONG_MAX:
                raise SelectorError(pos, "integer literal out of range")  # only -9223372036854775808 fits
            return ("lit", value)
        if kind == "str":
            return ("lit", value)
        if kind == "id":
            return ("id", value)
        if kind == "kw" and value in ("TRUE", "FALSE"):
            return ("lit", value == "TRUE")
        if kind == "op" and value == "(":
            self.deeper()
            node = self.or_()
            self.depth -= 1
            self.expect("op", ")", "')'")
            return node
        if kind == "end":
            raise SelectorError(pos, "unexpected end of selector")
        raise SelectorError(pos, f"unexpected {value!r}")


def _check_pattern(pattern: str, escape: str | None, pos: int) -> None:
    if escape is None:
        return
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            if i + 1 >= len(pattern):
                raise SelectorError(pos, "LIKE pattern ends with its escape character")
            i += 1
        i += 1


def parse(text: str) -> Node:
    """The tree of a selector; SelectorError when it is invalid, longer than MAX_SELECTOR_CHARS
    or nested deeper than MAX_DEPTH."""
    if not isinstance(text, str):
        raise SelectorError(0, "a selector must be a string")
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(MAX_SELECTOR_CHARS, f"longer than {MAX_SELECTOR_CHARS} characters")
    parser = _Parser(text)
    if parser.peek()[0] == "end":
        raise SelectorError(0, "empty selector")
    node = parser.or_()
    token = parser.peek()
    if token[0] != "end":
        raise SelectorError(token[2], f"unexpected {token[1]!r}")
    return node


# --- rendering (for tests and diagnostics) ---------------------------------------------------------


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "0.0"
    return str(value)


def render(node: Node) -> str:
    """Selector text for `node`, fully parenthesised: parse(render(n)) == n."""
    kind = node[0]
    if kind == "lit":
        text = _literal(node[1])
        return f"({text})" if text.startswith("-") else text
    if kind == "id":
        return str(node[1])
    if kind in ("and", "or"):
        return "(" + f" {kind.upper()} ".join(render(n) for n in node[1]) + ")"
    if kind == "not":
        return f"(NOT {render(node[1])})"
    if kind == "neg":
        return f"(-{render(node[1])})"
    if kind == "cmp":
        return f"({render(node[2])} {node[1]} {render(node[3])})"
    if kind == "arith":
        return "(" + render(node[1]) + "".join(f" {op} {render(n)}" for op, n in node[2]) + ")"
    neg = " NOT" if node[1] else ""
    if kind == "between":
        return f"({render(node[2])}{neg} BETWEEN {render(node[3])} AND {render(node[4])})"
    if kind == "like":
        escape = f" ESCAPE {_literal(node[4])}" if node[4] is not None else ""
        return f"({render(node[2])}{neg} LIKE {_literal(node[3])}{escape})"
    if kind == "in":
        return f"({render(node[2])}{neg} IN (" + ", ".join(_literal(s) for s in node[3]) + "))"
    assert kind == "null"
    return f"({render(node[2])} IS{neg} NULL)"


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
            return _wrap(a + b)
        if op == "-":
            return _wrap(a - b)
        if op == "*":
            return _wrap(a * b)
        if b == 0:
            return None
        quotient = abs(a) // abs(b)  # Java truncates towards zero
        return _wrap(quotient if (a < 0) == (b < 0) else -quotient)
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


Lookup = Callable[[str], Any]


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
        return _wrap(-number) if isinstance(number, int) else -number
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
