"""JMS message selectors: the tokens of a selector's text (parsing them: selector.py).

Owns: splitting the text into numbers, string literals, identifiers, keywords and operators,
each with its position; the literals' own rules ('' inside a string, hexadecimal and long/float
suffixes, integers within a long's magnitude); `SelectorError`, which names the position.
Must not touch: the grammar (selector.py), evaluation (selector_eval.py), message bytes.
"""

from __future__ import annotations

from typing import Any, Final

from .selector_eval import LONG_MAX

KEYWORDS: Final = frozenset(("NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"))
COMPARISONS: Final = ("<>", "<=", ">=", "=", "<", ">")  # longest first: "<>" is not "<" then ">"
_DIGITS: Final = "0123456789"


class SelectorError(ValueError):
    """A selector that is not valid (or too big): `position` is the 0-based character offset."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(f"invalid selector at position {position}: {message}")
        self.position = position
        self.message = message


Token = tuple[str, Any, int]  # (kind, value, position): kinds "num", "str", "id", "kw", "op", "end"


def tokenize(text: str) -> list[Token]:
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
            out.append(("kw", upper, start) if upper in KEYWORDS else ("id", word, start))
        else:
            for op in (*COMPARISONS, "(", ")", ",", "+", "-", "*", "/"):
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
