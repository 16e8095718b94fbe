"""The `log` entity type: the router's Python loggers, whose level management may change.

Owns: the anchors' `enable` syntax (`info+`, `trace,warning+`, `none`, `default`) mapped onto
Python logging levels, and which loggers are shown (the router's root logger as `DEFAULT` and
every `router.*` logger created so far).
Must not touch: handlers and formats (the CLI's `router run` sets them up).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .model import Attribute, EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent


# Python logging levels by the anchors' level names (which have trace and notice too).
LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
          "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}  # fmt: skip
OFF = logging.CRITICAL + 10
ROOT_LOGGER = "router"  # module DEFAULT


def parse_enable(text: Any) -> int:
    """A logging level from the anchors' `enable` syntax: `info+`, `debug`, `trace,warning+`,
    `none`; `default` inherits from the parent logger. Python loggers have one threshold, so a
    list enables from its lowest level up."""
    if not isinstance(text, str):
        raise ManagementError(400, "enable is a string such as 'info+', 'debug+' or 'none'")
    words = [w.strip().lower().rstrip("+") for w in text.split(",") if w.strip()]
    if words in ([], ["none"]):
        return OFF
    if words == ["default"]:
        return logging.NOTSET
    unknown = [w for w in words if w not in LEVELS]
    if unknown:
        raise ManagementError(400, f"unknown log level(s) {unknown}: use {', '.join(LEVELS)} or none")
    return min(LEVELS[w] for w in words)


class LogType(EntityType):
    short_name = "log"
    description = "A logging module (a Python logger of the router); enable sets its level at run time"
    attributes = (
        Attribute("module", "string", "DEFAULT (the router's root logger) or a logger name"),
        Attribute("enable", "string", "Lowest level logged, e.g. info+, debug+, none; default inherits", writable=True),
    )
    operations = ("READ", "UPDATE")

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        names = [n for n, logger in logging.root.manager.loggerDict.items()
                 if isinstance(logger, logging.Logger) and n.startswith(ROOT_LOGGER + ".")]  # fmt: skip
        yield self._entity("DEFAULT")
        for name in sorted(names):
            yield self._entity(name)

    def _entity(self, module: str) -> dict[str, Any]:
        logger = logging.getLogger(ROOT_LOGGER if module == "DEFAULT" else module)
        level = logger.getEffectiveLevel()
        enable = "none" if level > logging.CRITICAL else logging.getLevelName(level).lower() + "+"
        return self.entity(f"log/{module}", f"log/{module}", module=module, enable=enable)

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        module = key.removeprefix("log/")
        logger = logging.root.manager.loggerDict.get(module)
        known = module == "DEFAULT" or (module.startswith(ROOT_LOGGER + ".") and isinstance(logger, logging.Logger))
        return self._entity(module) if known else None

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        unknown = [k for k in attributes if k not in ("enable", "module")]
        if unknown:
            raise ManagementError(400, f"only enable can be changed on a log module (got {unknown})")
        if attributes.get("module", entity["module"]) != entity["module"]:
            raise ManagementError(400, "the module of a log entity cannot be changed")
        if "enable" in attributes:
            level = logging.NOTSET if attributes["enable"] is None else parse_enable(attributes["enable"])
            module = entity["module"]
            logging.getLogger(ROOT_LOGGER if module == "DEFAULT" else module).setLevel(level)
        return self._entity(entity["module"])
