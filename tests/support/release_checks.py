"""What must hold of the core once a connection it failed on is released (router.core.release):
nothing of the connection left anywhere, and nothing left counted for the others."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from router.build_info import module_is_compiled
from router.core.connections import ConnState
from router.core.delivery import SessionMaps
from router.core.router import RouterCore


def assert_nothing_of(core: RouterCore, state: ConnState) -> None:
    """Nothing of `state` remains anywhere in the core."""
    assert state.closed and state.engine not in core.connections
    for entry in core.table.entries.values():
        assert not [out for out in entry.consumers if out.conn is state], entry
        assert not [inl for inl in entry.producers if inl.conn is state], entry
        assert not [f for f in entry.pending if f.in_link is not None and f.in_link.conn is state], entry
    assert not state.out_links and not state.in_links
    assert not [inl for inl in core.bounds.starved if inl.conn is state]
    for other in core.connections.values():
        for session in other.engine.sessions:
            maps = session.context
            if isinstance(maps, SessionMaps):
                for _, fwd in maps.inbound.items():
                    assert fwd.done or fwd.out is None or fwd.out.conn is not state, fwd
                    for copy in fwd.copies or ():
                        assert copy.done or copy.out.conn is not state, (fwd, copy)
    assert state.engine not in core.touched.take()
    assert not core.ending.failed_conns


def assert_quiet(core: RouterCore) -> None:
    """No delivery in flight, no bytes held, no consumer stuck or half way through a delivery."""
    assert core.in_flight() == 0
    assert core.bounds.buffered_total == 0 and core.bounds.holders == 0
    assert core.bounds.stuck_now == 0
    for state in core.connections.values():
        assert state.buffered_bytes == 0 and state.unsettled_out == 0, state
        for out in state.out_links:
            assert out.outstanding == 0 and out.streaming is None and not out.pending, out
            assert out.link.out_delivery < 0, out  # no transfer left with more=true
        for inl in state.in_links:
            assert inl.inflight == 0 and inl.held == 0 and inl.streaming is None, inl


# Fault and Watch replace RouterCore's methods on the instance; a compiled (mypyc) class has no
# instance dict, so on the installed wheel the tests that inject faults skip.
needs_patchable_core = pytest.mark.skipif(
    module_is_compiled("router.core.router"),
    reason="fault injection replaces RouterCore methods; the compiled core's cannot be replaced",
)
needs_patchable_driver = pytest.mark.skipif(
    module_is_compiled("router.net.driver"),
    reason="fault injection replaces a ConnectionDriver method; the compiled driver's cannot be replaced",
)


class InjectedFault(Exception):
    """A bug in the core, as far as the network layer can tell."""


def _setattr(target: Any, name: str, value: Any) -> None:
    setattr(target, name, value)


class Watch:
    """Knows whether the core is handling the `doomed` connection's input right now (core.handle
    and core.first_frame, which a server's connections call as they parse, wrapped through
    `patch`: a test's monkeypatch.setattr to have it undone, plain setattr for a core made per
    example); `armed` turns what a subclass does there on and off."""

    def __init__(self, core: RouterCore, patch: Callable[[Any, str, Any], None] = _setattr) -> None:
        self.doomed: Any = None
        self.armed = True
        self.fired = False
        self.patch = patch
        self._current: Any = None
        handle = core.handle

        def tracking_handle(engine: Any, events: list[Any], now: float) -> None:
            self._current = engine
            try:
                handle(engine, events, now)
            finally:
                self._current = None

        patch(core, "handle", tracking_handle)
        first_frame = core.first_frame

        def tracking_first_frame(link: Any, *fields: Any) -> bool:  # (straight from a server's connection)
            self._current = link.session.conn
            try:
                return first_frame(link, *fields)
            finally:
                self._current = None

        patch(core, "first_frame", tracking_first_frame)

    def in_doomed(self) -> bool:
        return self.armed and self.doomed is not None and self._current is self.doomed


class Fault(Watch):
    """`getattr(unit, name)` raises InjectedFault on its `nth` call while the core handles the
    `doomed` connection's input (once; while `armed`)."""

    def __init__(
        self, core: RouterCore, unit: Any, name: str, nth: int = 1,
        patch: Callable[[Any, str, Any], None] = _setattr,
    ) -> None:  # fmt: skip
        super().__init__(core, patch)
        self.calls = 0
        original = getattr(unit, name)

        def failing(*args: Any, **kwargs: Any) -> Any:
            if not self.fired and self.in_doomed():
                self.calls += 1
                if self.calls >= nth:
                    self.fired = True
                    raise InjectedFault(f"a bug in {name}")
            return original(*args, **kwargs)

        patch(unit, name, failing)
