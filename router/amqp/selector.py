"""JMS message selectors (the apache.org:selector-filter:string filter, apache-filters.xml):
parsing into a small tree (its tokens: selector_tokens.py; evaluating it: selector_eval.py).

Owns: the grammar (the SQL-92 subset of JMS 1.1 §3.8.1: literals, identifiers, comparison,
arithmetic, AND/OR/NOT with three-valued logic, [NOT] BETWEEN, [NOT] LIKE ... [ESCAPE],
[NOT] IN, IS [NOT] NULL), `parse(text)` (SelectorError naming the position) and `render(node)`
(text that parses back to the same tree). The tokenizer and SelectorError are
selector_tokens.py's, evaluation is selector_eval.py's (`evaluate`, `matches`); the names callers
use are re-exported here.
Identifiers are resolved by the caller's `lookup(name)` (router.amqp.filters maps the JMS and
`amqp.*` header names and application-properties).

Bounds, because a selector comes from a peer: at most MAX_SELECTOR_CHARS characters and
MAX_DEPTH levels of nesting (parentheses, NOT, unary signs). Chains of AND, OR, + and * are
kept flat (lists), so neither parsing nor evaluation recurses deeper than the nesting.
Must not touch: message bytes (the caller reads fields), links, routing.
"""

from __future__ import annotations

import math
from typing import Any, Final

from .selector_eval import LONG_MAX, LONG_MIN, Lookup, Node, evaluate, glob_match, like, matches, wrap
from .selector_tokens import COMPARISONS, SelectorError, Token, tokenize

__all__ = ["LONG_MAX", "LONG_MIN", "MAX_DEPTH", "MAX_SELECTOR_CHARS", "Lookup", "Node", "SelectorError",
           "evaluate", "glob_match", "like", "matches", "parse", "render"]  # fmt: skip

MAX_SELECTOR_CHARS: Final = 4096
MAX_DEPTH: Final = 32


# --- parsing ---------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
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
        if token[0] == "op" and token[1] in COMPARISONS:
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
                return ("lit", wrap(-inner[1]) if isinstance(inner[1], int) else -inner[1])
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
