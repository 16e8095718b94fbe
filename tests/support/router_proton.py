"""The single router, end to end: real `router run` processes on loopback, driven by
python-qpid-proton clients, both its blocking API (BlockingConnection, one thread per
connection) and its reactor API (Container + MessagingHandler, every connection of a scenario on
one Container thread). What the tests/test_router_proton_*.py files share: the configuration,
the router fixtures (one router per test module, its listeners and address rules covering every
scenario that needs no router-wide setting; `own_router` for limits and shutdown), running
Proton clients with deadlines, and the Clients handler they build on.

The sans-IO core tests (tests/test_core_*.py) pin the same semantics without sockets; here they
must hold for third-party clients over TCP.

Waiting is always on an event (an outcome, an attach, a flow, a round trip on a connection);
every Proton call and every Container run has a deadline.

A "round trip" below: opening a link on a connection and waiting for the router's answer. The
router handles a connection's frames in order and writes its answers in order, so once the
answer is here, the router has processed everything sent before it on that connection, and
everything it wrote to us before answering has been read.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Data, Delivery, Endpoint, Link, Message, Transport, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption

from .interop import ContainerTimeout, run_container, run_in_thread
from .router_process import RouterProcess, logged_problems, watched


TIMEOUT_S = 10.0  # every Proton blocking call and every Container run
ROUTER_ID = "test-router"
MiB = 1024 * 1024

CONFIG: dict[str, Any] = {
    "router": {"id": ROUTER_ID},
    "listeners": [
        {"name": "amqp", "port": 0},  # link_capacity 1000, max_frame_size 65536 (the defaults)
        {"name": "mid", "port": 0, "link_capacity": 100},  # a full first window fits the byte bound
        {"name": "small", "port": 0, "link_capacity": 10, "max_frame_size": 4096},
        {"name": "tight", "port": 0, "max_sessions_per_connection": 4, "max_links_per_connection": 3},
    ],
    "addresses": [
        {"prefix": "closest", "distribution": "closest"},
        {"prefix": "mc", "distribution": "multicast"},
        {"pattern": "news.*.all", "distribution": "multicast"},
        {"pattern": "wide/#", "distribution": "multicast"},
    ],
}


# --- routers -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    with RouterProcess.running(tmp_path_factory.mktemp("router"), CONFIG) as router:
        yield router


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    yield from watched(shared_router)


@pytest.fixture
def own_router(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], RouterProcess]]:
    """Start routers of the test's own (for router-wide settings); they stop after the test,
    which fails if one of them logged an error."""
    started: list[RouterProcess] = []
    with contextlib.ExitStack() as stack:

        def start(config: dict[str, Any]) -> RouterProcess:
            directory = tmp_path / f"router{len(started)}"
            directory.mkdir()
            process = stack.enter_context(RouterProcess.running(directory, {"router": {"id": ROUTER_ID}, **config}))
            started.append(process)
            return process

        yield start
    for process in started:
        assert not logged_problems(process.stderr), process.output


def url(router: RouterProcess, listener: str = "amqp") -> str:
    return f"amqp://127.0.0.1:{router.ports[listener]}"


# --- running Proton --------------------------------------------------------------------------------


async def run_clients(handler: MessagingHandler, timeout_s: float = TIMEOUT_S) -> None:
    """Run a Container for `handler` on a thread of its own: the Container is created, run and
    torn down on that thread (Proton objects are thread-affine)."""

    def run() -> None:
        try:
            run_container(Container(handler), timeout_s=timeout_s)
        except ContainerTimeout as exc:  # say where the scenario stood
            state = {k: v for k, v in vars(handler).items() if isinstance(v, (int, str, list, dict, set, Counter))}
            raise ContainerTimeout(f"{exc}; {type(handler).__name__} {_short(state)}") from None
        finally:
            _drop_proton_objects(handler)

    await run_in_thread(run, timeout_s=timeout_s + 3.0)


def _is_proton(value: Any) -> bool:
    return isinstance(value, (Endpoint, Delivery, Transport))


def _drop_proton_objects(handler: MessagingHandler) -> None:
    """Let go of the connections, links and deliveries a handler kept, on the Container's own
    thread: a test reads only plain values afterwards."""
    for name, value in list(vars(handler).items()):
        if _is_proton(value) or (isinstance(value, list) and any(_is_proton(v) for v in value)):
            setattr(handler, name, None)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 2000 else text[:2000] + "..."


async def run_threads(*fns: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> list[Any]:
    """Run blocking functions at the same time, each on its own thread; return their results."""
    results: list[Any] = [None] * len(fns)

    async def one(i: int) -> None:
        results[i] = await run_in_thread(fns[i], timeout_s=timeout_s)

    async with trio.open_nursery() as nursery:
        for i in range(len(fns)):
            nursery.start_soon(one, i)
    return results


def condition(endpoint_or_disposition: Any) -> tuple[str | None, str | None]:
    c = getattr(endpoint_or_disposition, "remote_condition", None) or getattr(
        endpoint_or_disposition, "condition", None
    )
    return (c.name, c.description) if c is not None else (None, None)


class SettleSecond(LinkOption):
    def apply(self, link: Any) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND


class Capability(LinkOption):
    """A Proton link whose source (`terminus="source"`) or target asks for `capability`."""

    def __init__(self, capability: str, terminus: str = "source") -> None:
        self.capability = capability
        self.terminus = terminus

    def apply(self, link: Any) -> None:
        capabilities = getattr(link, self.terminus).capabilities
        capabilities.put_array(False, Data.SYMBOL)
        capabilities.enter()
        capabilities.put_symbol(symbol(self.capability))
        capabilities.exit()


class Clients(MessagingHandler):
    """Base for the Container scenarios. `connect()` remembers every connection; `finish()`
    closes them all (the Container then ends). An error the router reports is recorded and ends
    the scenario unless the test expects it (`expected_errors`)."""

    expected_errors = False

    def __init__(self, router: RouterProcess, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.router = router
        self.connections: list[Any] = []
        self.errors: list[tuple[str, str | None, str | None]] = []
        self.done = False

    def connect(self, container: Any, listener: str = "amqp", **kwargs: Any) -> Any:
        conn = container.connect(url(self.router, listener), reconnect=False, **kwargs)
        self.connections.append(conn)
        return conn

    def finish(self) -> None:
        self.done = True
        for conn in self.connections:
            if not conn.state & Endpoint.LOCAL_CLOSED:
                conn.close()

    def probe(self, container: Any, conn: Any, name: str) -> Any:
        """Start a round trip on `conn` (see the module docstring): on_link_opened follows."""
        return container.create_receiver(conn, f"probe.{name}.{id(self)}.{time.monotonic_ns()}", name=name)

    def _error(self, kind: str, what: Any) -> None:
        self.errors.append((kind, *condition(what)))
        if not self.expected_errors:
            self.finish()

    def on_link_error(self, event: Any) -> None:
        self._error("link", event.link)

    def on_session_error(self, event: Any) -> None:
        self._error("session", event.session)

    def on_connection_error(self, event: Any) -> None:
        self._error("connection", event.connection)

    def on_transport_error(self, event: Any) -> None:
        self._error("transport", event.transport)

    def check(self) -> None:
        assert self.done, "the scenario did not finish"
        assert not self.errors, self.errors


class RequestResponse(Clients):
    """Proton's request/response pattern on one Container: the client's dynamic receiver gets a
    reply address; requests carry it as reply_to; the service answers through the anonymous
    relay. All `n` requests at once, or (`one_at_a_time`) each after the previous reply, so
    that every message travels alone. Done when every response came and every request and
    response was told accepted (`accepted`, 2n)."""

    def __init__(self, router: RouterProcess, service: str, n: int, *, one_at_a_time: bool = False) -> None:
        super().__init__(router)
        self.service, self.n, self.one_at_a_time = service, n, one_at_a_time
        self.reply_to: str | None = None
        self.responses: list[tuple[Any, Any]] = []
        self.sent = 0
        self.accepted = 0

    def on_start(self, event: Any) -> None:
        container = event.container
        server = self.connect(container)
        self.requests = container.create_receiver(server, self.service)
        self.answers = container.create_sender(server, None)
        client = self.connect(container)
        self.replies = container.create_receiver(client, None, dynamic=True)
        self.asker = container.create_sender(client, self.service)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.replies:
            self.reply_to = self.replies.remote_source.address
            self._ask()

    def on_sendable(self, event: Any) -> None:
        if event.sender == self.asker:
            self._ask()

    def _ask(self) -> None:
        if self.reply_to is None or self.asker.credit == 0:
            return
        wanted = len(self.responses) + 1 if self.one_at_a_time else self.n
        while self.sent < min(wanted, self.n) and self.asker.credit > 0:
            self.asker.send(Message(body=f"request {self.sent}", reply_to=self.reply_to, correlation_id=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        msg = event.message
        if event.receiver == self.requests:
            self.answers.send(Message(address=msg.reply_to, correlation_id=msg.correlation_id, body=msg.body.upper()))
        else:
            self.responses.append((msg.correlation_id, msg.body))
            self._ask()
            self._finish_when_done()

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        self._finish_when_done()

    def _finish_when_done(self) -> None:
        if len(self.responses) == self.n and self.accepted == 2 * self.n and not self.done:
            self.finish()


def trace_frames(transport: Any, into: list[str]) -> None:
    """Record every AMQP frame `transport` reads or writes ("<- @transfer..." / "-> @flow...")."""
    transport.trace(Transport.TRACE_FRM)
    transport.tracer = lambda _transport, line: into.append(line)


def performatives(frames: list[str], direction: str) -> Counter[str]:
    """How many frames of each performative went `direction` ("<-" in, "->" out)."""
    counts: Counter[str] = Counter()
    for line in frames:
        _, sep, rest = line.partition(f"{direction} @")
        if sep:
            counts[rest.split("(", 1)[0]] += 1
    return counts



A, R, RE, M = Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED
