"""Prometheus's text exposition format (version 0.0.4), written directly.

    family("amqp_router_links", "gauge", "Attached links.", [(" ", 3)])   # " ": no labels
    labelled("address", 'a"b')                     # '{address="a\\"b"} ', a sample's labels

Owns: the format's lines (HELP and TYPE, samples), escaping of help texts and label values,
how numbers are written. Why not the client library's families: they make a Sample tuple and a
labels dict per series and check and escape every name again when written, ~7 us per series:
a router with 10,000 addresses has 50,000 of them, and a scrape held every connection for
0.4-0.8 s. Here a series is one formatted string.
Must not touch: which metrics there are (metrics.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def number(value: float) -> str:
    """A sample's value as the client library writes it (Go's float formatting: `7.0`,
    `1.34217728e+08`), so that what dashboards and scripts match stays as it was."""
    d = float(value)
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    text = repr(d)
    dot = text.find(".")
    if d > 0 and dot > 6:  # Go writes an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    if "\\" in text or '"' in text or "\n" in text:
        return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return text


def labelled(name: str, value: str) -> str:
    """One label as written after a sample's name, with the space before the value."""
    return f'{{{name}="{_escape_label(value)}"}} '


def labels_of(pairs: Iterable[tuple[str, str]]) -> str:
    """Several labels, as labelled() writes one."""
    inner = ",".join(f'{name}="{_escape_label(value)}"' for name, value in pairs)
    return f"{{{inner}}} "


def head(name: str, kind: str, help_text: str) -> str:
    """A family's HELP and TYPE lines."""
    return f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} {kind}\n"


def _sample_line(name: str, labels: str, value: float) -> str:
    """One sample: `labels` as labelled() or labels_of() write them, or " " for none."""
    return f"{name}{labels}{number(value)}\n"


def family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> str:
    """A whole family: its head and one line per (labels, value); a family with no samples is
    still described (as the client library writes it)."""
    return head(name, kind, help_text) + "".join(_sample_line(name, labels, value) for labels, value in samples)
