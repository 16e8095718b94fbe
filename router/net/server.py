"""The router's network side: it joins trio sockets to the sans-IO routing core.

    server = RouterServer(config)
    addresses = await nursery.start(server.run)   # [(listener name, host, port), ...]
    ...
    server.shutdown()                             # or cancel run(): both stop gracefully
    server.http_addresses                         # [(http listener name, host, port), ...]

Owns: composing the network side's parts, each with one job. The parts: the core pump (corepump.py:
events into the core, flushing the connections it touched, its timer, the one monotonic clock
`clock` the core is called with, trio's by default; the wall-clock offset is captured once here),
the connection guard (guard.py: one ConnectionDriver per connection, confined to it and released
however it ends, the handshake time-out), the intake (intake.py: TLS and the WebSocket upgrade
before AMQP, the engine registered with the core), the AMQP listeners and connectors (listeners.py,
connectors.py) and their run-time control (control.py: the management agent's ConfigControl, and
`reload`, applying a changed configuration file through the agent), the HTTP listeners
(http_server.py serves router.management.http: management as JSON, /metrics, /healthz) and the
management agent's installation (management_face.py). The router's life cycle (open the listeners,
serve, stop gracefully) is serverlife.py's ServerLifecycle, which RouterServer is.
Must not touch: routing decisions (router.core), protocol rules (router.amqp).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..amqp.connection import Connection
from ..config.models import Connector, Listener, RouterConfig, SslProfile
from .busypoll import busy_poll_in_force, log_busy_poll
from .connectors import Connectors, Dial
from .control import NetControl
from .corepump import Core, CorePump
from .driver import ConnectionDriver
from .flowtask import FlowTask
from .guard import ConnectionGuard
from .intake import ConnectionIntake
from .listeners import AmqpListeners, Bind, ListenerCounters
from .now import run_clock
from .poller import Poller
from .reload import ReloadReport
from .serverlife import SHUTDOWN_FLUSH_S, BoundAddress, ServerLifecycle
from .tls import TlsProfiles

log = logging.getLogger(__name__)


def _setting(busy_poll_us: int | None) -> str:
    return "auto" if busy_poll_us is None else str(busy_poll_us)


__all__ = ["BoundAddress", "Core", "RouterServer"]


class RouterServer(ServerLifecycle):
    """Serves every listener of `config` with one RouterCore and its management agent (or the
    `core` given, for tests, with the `agent` given or none)."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        core: Core | None = None,
        agent: Any = None,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] = time.time,
        drain_s: float = SHUTDOWN_FLUSH_S,
        bind: Bind | None = None,
        dial: Dial | None = None,
    ) -> None:
        """`clock`: the one monotonic clock every `now` given to the core comes from (trio's, so
        that tests may run on trio's mock clock). `wall_clock` is read once, here: the core gets
        the offset between the two for what must be wall time (see router.core.router).
        Construct it inside trio.run (the default clock is trio's). `drain_s`: how long a
        graceful stop lets connections finish closing (their outcomes written) before dropping
        them. `bind` and `dial`: how listeners get their sockets and connectors their streams
        (TCP by default; router.testing.memrouter gives memory streams on trio's mock clock)."""
        super().__init__(drain_s)
        if clock is None:  # trio's, read without finding the run each time (now.run_clock)
            clock = run_clock()
        self.clock = clock
        self.wall_offset = wall_clock() - clock()
        self._installs_agent = False
        if core is None:
            # Imported here rather than at the top so that this module (and the server tests,
            # which may run it on a stand-in core) does not depend on the core's internals.
            from ..core.router import RouterCore

            core = RouterCore(config, wall_offset=self.wall_offset)
            self._installs_agent = agent is None
        self.core: Core = core
        self.pump = CorePump(core, clock)
        self.poller = Poller()
        self.set_busy_poll(config.router.busy_poll_us)
        self.guard = ConnectionGuard(self.pump, self.poller)
        # TlsError (naming the profile and the file) if a profile's files do not load.
        self.tls = TlsProfiles(config.ssl_profiles)
        self.intake = ConnectionIntake(self._config_in_force, core, clock, self.tls, self._listener_counters, self.guard)
        # The connections' handlers: the intake's own (a trampoline here would be one more
        # coroutine frame held by every idle connection).
        self.serve_stream = self.intake.serve_stream
        self.serve_outgoing = self.intake.serve_outgoing
        self._listeners = AmqpListeners(self.intake.serve_stream, bind=bind)
        self._connectors = Connectors(self.intake.serve_outgoing, secure=self.intake.secure_outgoing, dial=dial)
        self.control = NetControl(config, self._listeners, self._connectors, self.tls,
                                  stopping=lambda: self.stopping, after_core=self.pump.after_core)  # fmt: skip
        if self._installs_agent:
            from .management_face import new_agent  # it loads the agent, which reads the core

            # Its ConfigControl is this server (which hands each call to the control), so that
            # what management changes goes through the same methods as the CLI's and tests'.
            agent = new_agent(core, config, self, clock)
        self.agent: Any = agent
        self.control.agent = agent
        for connector in config.connectors:
            self._connectors.add(connector)
        # Flow records (router.net.flowtask), when configured: on the router's own core only.
        self.flow: FlowTask | None = None
        if config.flow.enabled and hasattr(core, "forwarder"):
            from .. import __version__

            self.flow = FlowTask(core, config.flow, clock, __version__)

    @property
    def config(self) -> RouterConfig:
        """The configuration in force (a reload changes its users)."""
        return self.control.config

    @property
    def file_config(self) -> RouterConfig:
        """The last configuration file applied (what reload() diffs a changed file against)."""
        return self.control.file_config

    @property
    def _drivers(self) -> dict[Connection, ConnectionDriver]:
        """Every connection's driver, by engine (tests look at them)."""
        return self.pump.drivers

    def stats(self) -> dict[str, int]:
        """Connections, and how many of them are held back by backpressure right now."""
        return self.guard.stats()

    def _config_in_force(self) -> RouterConfig:
        return self.control.config

    def _listener_counters(self, name: str) -> ListenerCounters:
        return self._listeners.counters(name)

    # --- run-time configuration (the management agent's ConfigControl): control.py's ----------

    def reload(self, new: RouterConfig) -> ReloadReport:
        report = self.control.reload(new)
        configured = new.router.busy_poll_us
        if configured != self.busy_poll_setting:
            before, after = _setting(self.busy_poll_setting), _setting(configured)
            log.info("configuration reload: update router.busy_poll_us %s -> %s", before, after)
            report.applied.append(f"update router.busy_poll_us {before} -> {after}")
            self.set_busy_poll(configured)
        return report

    def create_listener(self, listener: Listener) -> int:
        return self.control.create_listener(listener)

    def delete_listener(self, name: str) -> bool:
        return self.control.delete_listener(name)

    def listener_ports(self) -> dict[str, int]:
        return self.control.listener_ports()

    def listener_counters(self, name: str) -> dict[str, int]:
        return self.control.listener_counters(name)

    @property
    def busy_poll_us(self) -> int:
        """How long the poller looks for work before it sleeps, in force now (router.busy_poll_us)."""
        return round(self.poller.busy_poll_s * 1e6)

    def set_busy_poll(self, configured: int | None) -> None:
        """Set router.busy_poll_us from now on (None: auto, router.net.busypoll)."""
        self.busy_poll_setting = configured
        busy_poll_us, why = busy_poll_in_force(configured)
        self.poller.busy_poll_s = busy_poll_us / 1e6
        log_busy_poll(busy_poll_us, why)

    def busy_poll_counters(self) -> dict[str, int]:
        """The busy polls (router.busy_poll_us): the value in force, polls that found work, that
        found none, microseconds spent."""
        poller = self.poller
        return {"in_force_us": self.busy_poll_us, "caught": poller.busy_caught, "missed": poller.busy_missed,
                "us": int(poller.busy_seconds * 1e6)}  # fmt: skip

    def update_ssl_profile(self, profile: SslProfile) -> None:
        self.control.update_ssl_profile(profile)

    def remove_ssl_profile(self, name: str) -> None:
        self.control.remove_ssl_profile(name)

    def ssl_profile_loads(self, name: str) -> int:
        return self.control.ssl_profile_loads(name)

    def create_connector(self, connector: Connector) -> None:
        self.control.create_connector(connector)

    def delete_connector(self, name: str) -> bool:
        return self.control.delete_connector(name)

    def connector_status(self, name: str) -> tuple[str, str] | None:
        return self.control.connector_status(name)
