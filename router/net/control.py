"""The network layer's side of configuration at run time: the management agent's ConfigControl
(listeners, connectors and ssl profiles created and deleted while the router runs) and applying a
changed configuration file.

    control = NetControl(config, listeners, connectors, tls, stopping=..., after_core=...)
    control.agent = agent                  # once the agent exists (it is given this control)
    port = control.create_listener(listener)
    report = control.reload(new_config)    # what changed goes through the agent (reload.py)

Owns: the configuration in force (`config`: what new connections get; `file_config`: the last
file applied, which a reload diffs against), refusing changes while the router stops, and what
management reads of listeners (ports, refusal counters), connectors (status) and ssl profiles
(loads).
Must not touch: the accept loops and dialling themselves (listeners.py, connectors.py), the
rules of a reload (reload.py), the core (but for flushing after a change: `after_core`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.models import Connector, Listener, RouterConfig, SslProfile
from .connectors import Connectors
from .listeners import AmqpListeners
from .reload import ReloadRefused, ReloadReport, apply_reload, plan_reload
from .tls import TlsProfiles


class NetControl:
    def __init__(
        self,
        config: RouterConfig,
        listeners: AmqpListeners,
        connectors: Connectors,
        tls: TlsProfiles,
        *,
        stopping: Callable[[], bool],
        after_core: Callable[[], None],
    ) -> None:
        """`stopping()`: the router is shutting down (changes are refused); `after_core()`: to
        call after a change that may have made the core queue output."""
        self.config = config
        self.file_config = config  # what reload() diffs a changed file against
        self.listeners = listeners
        self.connectors = connectors
        self.tls = tls
        self.stopping = stopping
        self.after_core = after_core
        self.agent: Any = None  # the management agent, which reload() goes through (none: refused)

    def current_config(self) -> RouterConfig:
        return self.config

    def reload(self, new: RouterConfig) -> ReloadReport:
        """Apply a changed configuration file (router.net.reload has the rules): the changes
        since the last file applied go through the management agent. ReloadRefused (nothing
        applied) if `new` changes the router's identity or the router is shutting down."""
        if self.stopping():
            raise ReloadRefused("the router is shutting down")
        if self.agent is None:
            raise ReloadRefused("this router runs without a management agent")
        plan = plan_reload(self.file_config, new, self.listeners.ports())
        self.file_config = new
        report = apply_reload(self.agent, plan)
        # New logins use the new users (the credential store is chosen per connection).
        self.config = self.config.model_copy(update={"users": new.users, "users_file": new.users_file})
        self.after_core()  # a dropped connector or a changed rule may have queued output
        return report

    # --- listeners -------------------------------------------------------------------------------

    def create_listener(self, listener: Listener) -> int:
        """Open `listener` now and return its bound port (OSError if it cannot bind)."""
        if self.stopping():
            raise RuntimeError("the router is shutting down")
        return self.listeners.open(listener)

    def delete_listener(self, name: str) -> bool:
        """Stop accepting on listener `name` (False if there is none). Its connections go on:
        see router/net/listeners.py."""
        return self.listeners.close(name)

    def listener_ports(self) -> dict[str, int]:
        """The bound port of every open AMQP listener, by name."""
        return self.listeners.ports()

    def listener_counters(self, name: str) -> dict[str, int]:
        """Refusals on listener `name` for management: accepts that failed (out of descriptors,
        say), connections dropped for not finishing the handshake in time, WebSocket upgrades refused."""
        counters = self.listeners.counters(name)
        return {"accept_failures": counters.accept_failures, "handshake_timeouts": counters.handshake_timeouts,
                "upgrades_refused": counters.upgrades_refused}  # fmt: skip

    # --- ssl profiles ----------------------------------------------------------------------------

    def update_ssl_profile(self, profile: SslProfile) -> None:
        """Load `profile`'s files now (a new profile, or rotation): new handshakes use them.
        TlsError (a ValueError naming the file) if they do not load; the old material stays."""
        self.tls.update(profile)

    def remove_ssl_profile(self, name: str) -> None:
        self.tls.remove(name)

    def ssl_profile_loads(self, name: str) -> int:
        """How many times profile `name`'s files were loaded (management's `ordinal`)."""
        return self.tls.loads(name)

    # --- connectors ------------------------------------------------------------------------------

    def create_connector(self, connector: Connector) -> None:
        """Start keeping `connector` up now (ValueError if the name is taken)."""
        if self.stopping():
            raise RuntimeError("the router is shutting down")
        self.connectors.add(connector)

    def delete_connector(self, name: str) -> bool:
        """Stop dialling connector `name` and drop its connection (False if there is none)."""
        return self.connectors.remove(name)

    def connector_status(self, name: str) -> tuple[str, str] | None:
        """(CONNECTING | SUCCESS | FAILED, the last error) of connector `name` for management."""
        status = self.connectors.status(name)
        return None if status is None else (status.state, status.last_error)
