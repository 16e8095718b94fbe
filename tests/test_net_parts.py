"""The network side's parts alone (router/net: corepump.py, guard.py, intake.py, control.py), each
on stand-ins for its collaborators: what each promises the others."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.net.connectors import Connectors
from router.net.control import NetControl
from router.net.corepump import CorePump
from router.net.guard import ConnectionGuard
from router.net.intake import ConnectionIntake, peer_name
from router.net.listeners import AmqpListeners, ListenerCounters
from router.net.reload import ReloadRefused
from router.net.tls import TlsProfiles


class StandInCore:
    """Records the calls the pump makes; `touched` and `deadline` are set by the test."""

    router_id = "stand-in"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.touched: set[Connection] = set()
        self.deadline: float | None = None
        self.paused = False
        self.fail_on: str | None = None
        self.accepted: dict[str, Any] = {}

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if self.fail_on == name:
            raise RuntimeError(f"{name} failed")

    def accept(self, engine: Connection, listener: Listener, *, host: str, tls: Any) -> None:
        self.accepted = {"host": host, "tls": tls}

    def connect(self, engine: Connection, connector: Connector, now: float, *, host: str, tls: Any) -> None:
        self.accepted = {"host": host, "tls": tls}

    def handle(self, engine: Connection, events: list[ev.Event], now: float) -> None:
        self._call("handle", engine, now)

    def take_touched(self) -> set[Connection]:
        touched, self.touched = self.touched, set()
        return touched

    def tick(self, now: float) -> None:
        self._call("tick", now)
        self.deadline = None

    def next_deadline(self) -> float | None:
        return self.deadline

    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None:
        self._call("set_output_blocked", blocked)

    def read_paused(self, engine: Connection) -> bool:
        return self.paused

    def forget(self, engine: Connection, now: float) -> None:
        self._call("forget", engine)

    def shutdown(self, now: float) -> None:
        self._call("shutdown")


class StandInDriver:
    def __init__(self, fail: bool = False) -> None:
        self.flushed = self.aborted = self.resumed = 0
        self.fail = fail

    def flush(self) -> None:
        self.flushed += 1
        if self.fail:
            raise RuntimeError("its engine failed")

    def abort(self) -> None:
        self.aborted += 1

    def resume_reading(self) -> None:
        self.resumed += 1


def engine() -> Connection:
    return Connection(ConnectionConfig(container_id="peer"))


# --- the core pump ------------------------------------------------------------------------------


async def test_the_pump_calls_the_core_with_its_clock_and_flushes_only_the_touched_drivers() -> None:
    core = StandInCore()
    pump = CorePump(core, lambda: 42.0)
    a, b = engine(), engine()
    driver_a, driver_b = StandInDriver(), StandInDriver()
    pump.drivers.update({a: driver_a, b: driver_b})
    core.touched = {a}
    pump.handle(a, [])
    assert core.calls == [("handle", a, 42.0)]
    assert (driver_a.flushed, driver_b.flushed) == (1, 0)


async def test_a_core_failing_on_one_connections_events_still_flushes_the_others() -> None:
    core = StandInCore()
    pump = CorePump(core, trio.current_time)
    a, b = engine(), engine()
    driver_a, driver_b = StandInDriver(), StandInDriver()
    pump.drivers.update({a: driver_a, b: driver_b})
    core.touched = {b}  # queued for b before the core failed on a's events
    core.fail_on = "handle"
    with pytest.raises(RuntimeError, match="handle failed"):
        pump.handle(a, [])
    assert (driver_a.flushed, driver_b.flushed) == (0, 1)


async def test_a_failing_flush_ends_that_connection_only(caplog: pytest.LogCaptureFixture) -> None:
    core = StandInCore()
    pump = CorePump(core, trio.current_time)
    a, b = engine(), engine()
    failing, healthy = StandInDriver(fail=True), StandInDriver()
    pump.drivers.update({a: failing, b: healthy})
    core.touched = {a, b}
    pump.after_core()  # does not raise
    assert (failing.aborted, healthy.aborted, healthy.flushed) == (1, 0, 1)
    assert "failed while flushing" in caplog.text


async def test_a_paused_reader_is_asked_again_after_the_next_call_into_the_core() -> None:
    core = StandInCore()
    pump = CorePump(core, trio.current_time)
    a, driver = engine(), StandInDriver()
    core.paused = True
    assert pump.pauses_reading(a, driver)
    assert driver.resumed == 0
    pump.set_output_blocked(a, True)
    assert driver.resumed == 1 and ("set_output_blocked", True) in core.calls
    pump.after_core()
    assert driver.resumed == 1  # asked once per pause, not at every call


async def test_forget_reaches_the_core_even_when_its_last_events_fail(caplog: pytest.LogCaptureFixture) -> None:
    core = StandInCore()
    core.fail_on = "handle"
    pump = CorePump(core, trio.current_time)
    a = engine()
    a.receive_data(b"AMQP\x00\x01\x00\x00", 0.0)  # a header: the end of stream then makes events
    pump.forget(a, 7)
    assert ("forget", a) in core.calls
    assert "connection 7: the core failed on its last events" in caplog.text


async def test_the_timer_ticks_at_a_deadline_set_by_a_call_after_it_went_to_sleep(autojump_clock: Any) -> None:
    core = StandInCore()
    pump = CorePump(core, trio.current_time)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.timer)
        await trio.sleep(10)  # asleep without a deadline
        assert not [c for c in core.calls if c[0] == "tick"]
        core.deadline = trio.current_time() + 5
        pump.after_core()  # the deadline moved earlier than infinity: the timer wakes and sleeps again
        await trio.sleep(4.9)
        assert not [c for c in core.calls if c[0] == "tick"]
        await trio.sleep(0.2)
        assert [c[0] for c in core.calls] == ["tick"]
        nursery.cancel_scope.cancel()


async def test_drain_waits_until_nothing_is_in_flight(autojump_clock: Any) -> None:
    class DrainingCore(StandInCore):
        left = 2

        def quiesce(self, now: float) -> None:
            self._call("quiesce")

        def in_flight(self) -> int:
            return self.left

    core = DrainingCore()
    pump = CorePump(core, trio.current_time)
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def drain() -> None:
            await pump.drain_in_flight(trio.current_time() + 100)
            done.set()

        nursery.start_soon(drain)
        await trio.sleep(1)
        assert not done.is_set() and ("quiesce",) in core.calls
        core.left = 0
        pump.after_core()  # the call that settled the last one
        await done.wait()
    assert trio.current_time() < 100


# --- the connection guard -----------------------------------------------------------------------


async def test_the_guard_confines_a_failing_registration_and_closes_the_stream(caplog: pytest.LogCaptureFixture) -> None:
    core = StandInCore()
    guard = ConnectionGuard(CorePump(core, trio.current_time))
    ours, theirs = trio.testing.memory_stream_pair()

    def register() -> Connection:
        raise RuntimeError("a bug in the core")

    await guard.run(ours, register, Listener(), "from a test", ListenerCounters())  # does not raise
    assert "connection 1 from a test failed" in caplog.text
    assert await theirs.receive_some(10) == b""  # closed
    assert guard.stats()["connections"] == 0


async def test_the_guard_registers_the_driver_while_it_runs_and_the_core_forgets_it_after(autojump_clock: Any) -> None:
    core = StandInCore()
    pump = CorePump(core, trio.current_time)
    guard = ConnectionGuard(pump)
    ours, theirs = trio.testing.memory_stream_pair()
    registered = engine()
    counters = ListenerCounters()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(guard.run, ours, lambda: registered, Listener(handshake_timeout_s=3), "from a test", counters)
        await trio.sleep(1)
        assert list(pump.drivers) == [registered] and guard.stats()["connections"] == 1
        await trio.sleep(3)  # no open within the handshake time-out: dropped
    assert pump.drivers == {} and counters.handshake_timeouts == 1
    assert ("forget", registered) in core.calls


# --- the intake ---------------------------------------------------------------------------------


def _intake(core: StandInCore, counters: ListenerCounters) -> ConnectionIntake:
    config = RouterConfig(router=RouterSection(id="parts"), listeners=(Listener(port=0),))
    return ConnectionIntake(lambda: config, core, trio.current_time, TlsProfiles(()), lambda name: counters,
                            ConnectionGuard(CorePump(core, trio.current_time)))  # fmt: skip


async def test_the_intake_tells_the_core_the_peer_and_never_serves_plain_on_a_tls_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = StandInCore()
    intake = _intake(core, ListenerCounters())
    ours, theirs = trio.testing.memory_stream_pair()
    await intake.serve_stream(ours, Listener(ssl_profile="missing", handshake_timeout_s=0))
    assert "ssl profile 'missing' is not loaded" in caplog.text and core.accepted == {}
    assert await theirs.receive_some(10) == b""

    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(intake.serve_stream, ours, Listener(handshake_timeout_s=0))
        await trio.testing.wait_all_tasks_blocked()
        assert core.accepted == {"host": peer_name(ours), "tls": None}
        await theirs.aclose()


# --- the control --------------------------------------------------------------------------------


async def test_the_control_refuses_changes_while_stopping_and_a_reload_without_an_agent() -> None:
    stopping = False

    async def handler(stream: trio.abc.Stream, settings: Any) -> None:
        pass

    config = RouterConfig(router=RouterSection(id="parts"))
    control = NetControl(config, AmqpListeners(handler), Connectors(handler), TlsProfiles(()),
                         stopping=lambda: stopping, after_core=lambda: None)  # fmt: skip
    with pytest.raises(ReloadRefused, match="without a management agent"):
        control.reload(config)
    stopping = True
    with pytest.raises(ReloadRefused, match="shutting down"):
        control.reload(config)
    with pytest.raises(RuntimeError, match="shutting down"):
        control.create_listener(Listener(port=0))
    with pytest.raises(RuntimeError, match="shutting down"):
        control.create_connector(Connector(name="c", host="127.0.0.1", port=1))
    assert control.listener_ports() == {} and control.connector_status("c") is None
    assert control.current_config() is config
