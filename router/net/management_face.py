"""Wiring the management agent into the network layer.

    agent = new_agent(core, config, server, clock)   # server: the ConfigControl; clock: the core's
    install_management(core, agent)           # the AMQP node at $management, _local/$management
    app = http_app(agent, healthy=..., after_call=...)   # the HTTP listeners' ASGI application

Owns: which agent a router runs (the standard entity types plus `memory`, which reads this
process, and `sslProfile`, whose material the network layer holds) and how the HTTP face is assembled (the agent, its metrics, health).
Must not touch: what the agent or the faces do (router.management).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ..config.models import RouterConfig
from ..management import ConfigControl, ManagementAgent, install
from ..management.http import ManagementApp
from ..management.config_entities import SslProfileType
from ..management.metrics import MemoryType, Metrics


def new_agent(core: Any, config: RouterConfig, control: ConfigControl, clock: Callable[[], float]) -> ManagementAgent:
    """`clock`: the server's (monotonic) clock, the one the core's `now` comes from: uptimes are
    differences of its readings; wall-clock timestamps go through `core.wall_time`."""
    agent = ManagementAgent(core, config, control, clock=clock)
    agent.register(MemoryType())
    agent.register(SslProfileType())
    return agent


def install_management(core: Any, agent: ManagementAgent) -> None:
    install(core, agent)


def http_app(agent: ManagementAgent, *, healthy: Callable[[], bool], after_call: Callable[[], None]) -> ManagementApp:
    return ManagementApp(agent, healthy=healthy, metrics=Metrics(agent), after_call=after_call, sleep=trio.sleep,
                         new_event=trio.Event)
