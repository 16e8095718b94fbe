"""Reading a configuration file: YAML in, a validated RouterConfig out, or a ConfigError whose
lines each name the file, the field and the problem (no tracebacks for users).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .models import FILE_CONTEXT, RouterConfig


class ConfigError(Exception):
    """Every problem found in a configuration, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def problems_of(error: ValidationError, source: str) -> list[str]:
    lines = []
    for item in error.errors():
        # Drop pydantic's internal location parts (e.g. function-after validator names).
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        message = item["msg"].removeprefix("Value error, ")
        value = item.get("input")
        shown = f" (got {json.dumps(value, default=str)[:60]})" if item["type"] not in ("missing", "value_error") and not isinstance(value, dict) else ""
        lines.append(f"{source}: {_location(loc)}: {message}{shown}")
    return lines


def parse_config(data: Any, source: str = "<config>") -> RouterConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: the top level must be a mapping (router:, listeners:, ...)"])
    try:
        return RouterConfig.model_validate(data, context={FILE_CONTEXT: True})
    except ValidationError as exc:
        raise ConfigError(problems_of(exc, source)) from None


def load_config(path: str | Path) -> RouterConfig:
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{source}: cannot read: {exc.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{source}: {where}invalid YAML: {problem}"]) from None
    return parse_config(data, source)


def schema() -> dict[str, Any]:
    return RouterConfig.model_json_schema()
