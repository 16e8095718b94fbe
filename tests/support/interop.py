"""Plumbing for the interoperability tests: Proton's blocking code on its own thread next to
trio, a Proton reactor loop that always ends and always closes its sockets, and a QueuePeer that
records what its engines report.

Proton's Python binding is synchronous (BlockingConnection) or runs its own select loop
(Container), so it runs on a plain named thread that every helper here joins before returning:
no worker thread outlives its test. Every wait has a deadline.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from router.amqp import events as ev
from router.amqp.connection import Connection
from router.testing.peer import QueuePeer

T = TypeVar("T")

THREAD_PREFIX = "interop-proton"
DEFAULT_TIMEOUT_S = 10.0
STOP_WAIT_S = 4.0  # a stopped container closes its connections within run_container's grace


# --- threads -------------------------------------------------------------------------------------


async def run_in_thread(
    fn: Callable[..., T], *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S, stop: threading.Event | None = None
) -> T:
    """Run blocking `fn(*args)` on a fresh thread; await it without blocking trio; re-raise
    what it raised. The thread is joined before this returns.

    `stop` is the event `fn` watches to end early: when the awaiting task is cancelled (the
    test failed elsewhere) it is set and the thread is awaited briefly, so that a failed test
    does not leave its Proton thread running into the next one."""
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn(*args)
        except BaseException as exc:  # handed to the awaiting task
            result["error"] = exc
        finally:
            try:
                trio.from_thread.run_sync(done.set, trio_token=token)
            except trio.RunFinishedError:
                pass

    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "call")
    thread = threading.Thread(target=target, name=f"{THREAD_PREFIX}-{name}", daemon=True)
    thread.start()
    try:
        with trio.fail_after(timeout_s):
            await done.wait()
    except trio.Cancelled:
        if stop is not None:
            stop.set()
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_WAIT_S):
                await done.wait()
        raise
    thread.join(timeout=1.0)
    if "error" in result:
        raise result["error"]
    return result["value"]  # type: ignore[no-any-return]


async def run_proton(container: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run a Proton `Container` (its handler connects in on_start) to completion on a thread;
    ContainerTimeout if it is still busy after `timeout_s`."""
    await run_in_thread(
        functools.partial(run_container, container, timeout_s=timeout_s),
        timeout_s=timeout_s + 2.0,  # run_container gives up first, closing its sockets
    )


@dataclass
class Cranks:
    """Turns the cranks of blocking clients on the one thread that drives them (run_in_thread's)
    until a condition holds; the test's `stop` (set when the test gives up) or the deadline ends
    the wait with TimeoutError. The clients' helpers say what a turn is."""

    deadline: float = field(default_factory=lambda: time.monotonic() + DEFAULT_TIMEOUT_S)
    stop: threading.Event = field(default_factory=threading.Event)

    def turn_until(self, condition: Callable[[], bool], turn: Callable[[], None], what: Any) -> None:
        while not condition():
            if self.stop.is_set():
                raise TimeoutError(f"stopped waiting for {what}")
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            turn()


def proton_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


# --- a bounded Proton reactor loop ----------------------------------------------------------------


class ContainerTimeout(AssertionError):
    """The Proton container still had work when its deadline passed."""


def run_container(
    container: Any,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    stop: threading.Event | None = None,
    on_stop: Callable[[], None] | None = None,
    stop_grace_s: float = 2.0,
) -> None:
    """Run a Proton `Container` on this thread until it has nothing left to do.

    `stop` (set from another thread) makes the loop call `on_stop()` on the container's own
    thread (close listeners and connections there), then wait up to `stop_grace_s` for the
    container to finish by itself. Whatever happens, every socket the container still holds is
    closed before returning; ContainerTimeout is raised if `timeout_s` passed first.
    """
    # process() returns after at most one select(); a short select timeout lets this loop see
    # `stop` and the deadline promptly. Proton's own timers (heartbeats) still fire on time.
    container.timeout = 0.05
    container.start()
    deadline = time.monotonic() + timeout_s
    stopping_until: float | None = None
    timed_out = False
    try:
        while container.process():
            now = time.monotonic()
            if stop is not None and stop.is_set() and stopping_until is None:
                stopping_until = now + stop_grace_s
                if on_stop is not None:
                    on_stop()
            if stopping_until is not None and now > stopping_until:
                break
            if now > deadline:
                timed_out = True
                break
    finally:
        container.stop_events()
        _close_selectables(container)
    if timed_out:
        raise ContainerTimeout(f"Proton container still busy after {timeout_s} s")


def _close_selectables(container: Any) -> None:
    io_handler = getattr(container.global_handler, "base", container.global_handler)
    selector = getattr(io_handler, "_selector", None)
    for selectable in list(getattr(selector, "_selectables", ())):
        selectable.close()


# --- our endpoint, recording ---------------------------------------------------------------------


class RecordingPeer(QueuePeer):
    """A QueuePeer that keeps every event its engines reported, for assertions, and lets a test
    wait for an event without sleeping."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[tuple[Connection, ev.Event]] = []
        self._changed = trio.Event()

    def _on_events(self, engine: Connection, events: list[ev.Event]) -> None:
        self.events.extend((engine, event) for event in events)
        self._changed.set()
        self._changed = trio.Event()
        super()._on_events(engine, events)

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [event for _, event in self.events if isinstance(event, kind)]

    async def wait_for(
        self, predicate: Callable[[], bool], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        """Wait until `predicate()` holds, re-checking whenever an engine reports events."""
        with trio.fail_after(timeout_s):
            while not predicate():
                await self._changed.wait()


async def start_recording_peer(nursery: trio.Nursery, **kwargs: Any) -> tuple[RecordingPeer, int]:
    """Start a RecordingPeer on an ephemeral 127.0.0.1 port; it stops with the nursery."""
    peer = RecordingPeer(**kwargs)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(peer.serve, listeners)
    return peer, listeners[0].socket.getsockname()[1]


# --- leak checks ---------------------------------------------------------------------------------


def socket_fds() -> set[str]:
    """The sockets this process holds open, as "socket:[inode]" (Linux; empty elsewhere)."""
    found: set[str] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for fd in names:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target)
    return found


def listening_tcp_ports() -> set[int]:
    """Local ports of the TCP sockets in LISTEN state that this process holds (Linux)."""
    inodes = {target[8:-1] for target in socket_fds()}
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports
