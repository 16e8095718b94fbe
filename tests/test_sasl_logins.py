"""SASL defaults and failed logins (defect: a PLAIN-only listener admitted clients that skipped
SASL; repeated failed logins were not slowed down).

- A listener without ANONYMOUS requires SASL: a client sending the plain AMQP header gets the
  SASL header back and the end of the stream (security §5.1), over a socket; Proton cannot
  connect without SASL either, and the router keeps serving.
- LoginThrottle: the first failure from a host is answered at once, then the delay doubles up
  to its cap; a success or a quiet spell forgets the host; the table of hosts is bounded.
- The engine holds a failed sasl-outcome until its deadline (next_deadline/tick, no sleep)
  and drops what the peer sends meanwhile.
- Over sockets from several loopback hosts (127.0.0.x): a host's repeated failure is held back
  while another host's login and a Proton client on 127.0.0.1 complete; management counts it.
"""

from __future__ import annotations

from functools import partial

import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import ConnectionException
from proton.utils import BlockingConnection

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import Authenticated, AuthenticationFailed
from router.amqp.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, frame
from router.amqp.performatives import SaslInit, SaslOutcome
from router.amqp.login_throttle import LoginThrottle
from router.amqp.sasl import SaslClientConfig, SaslServerConfig
from router.config.models import FailedLogins, Listener, RouterConfig, RouterSection, User
from router.management.metrics import Metrics
from router.net.server import RouterServer

from .support.interop import run_in_thread

TIMEOUT_S = 10.0
HELD_S = 1.0  # the second failure in a row from one host waits this long in the socket tests


def test_throttle_doubles_caps_forgets_and_is_bounded() -> None:
    t = LoginThrottle(initial_delay_s=0.25, max_delay_s=1.0, forget_after_s=60.0, max_hosts=3)
    assert [t.failed("a", 0.0) for _ in range(5)] == [0.0, 0.25, 0.5, 1.0, 1.0]
    assert t.failed("b", 0.0) == 0.0  # another host is not slowed down by a's failures
    t.succeeded("a")
    assert t.failed("a", 1.0) == 0.0  # a success forgets the host
    assert t.failed("a", 2.0) == 0.25
    assert t.failed("a", 2.0 + 62.0) == 0.0  # so does a quiet spell
    for host in ("c", "d", "e", "f"):
        t.failed(host, 100.0)
    assert t.hosts == 3  # bounded: the oldest failures went first
    assert t.failed("a", 100.0) == 0.0
    assert (t.failures, t.delayed) == (14, 5)


def _server(delay: float) -> Connection:
    config = ConnectionConfig(container_id="srv", server=True,
                              sasl_server=SaslServerConfig(mechanisms=("PLAIN",), check_plain=lambda *_: False))  # fmt: skip
    server = Connection(config)
    server.sasl_failure_delay = lambda now, _result: delay
    return server


def test_engine_holds_the_failed_outcome_until_its_deadline() -> None:
    server = _server(2.0)
    server.receive_data(SASL_HEADER, 10.0)
    assert server.data_to_send().startswith(SASL_HEADER)  # header and mechanisms
    server.receive_data(frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00bad"), frame_type=FRAME_SASL), 10.0)
    assert server.data_to_send() == b"" and server.events() == [] and not server.finished
    assert server.next_deadline() == 12.0
    server.receive_data(AMQP_HEADER + b"\x00" * 100_000, 10.5)  # dropped, not buffered
    server.tick(11.9)
    assert server.data_to_send() == b"" and not server.finished
    server.tick(12.0)
    out = server.data_to_send()
    assert out == frame(0, SaslOutcome(code=1), frame_type=FRAME_SASL)
    [failed] = server.events()
    assert isinstance(failed, AuthenticationFailed) and server.finished and server.next_deadline() is None


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0.01, max_value=10.0),
       st.lists(st.tuples(st.floats(min_value=0.0, max_value=3.0), st.binary(max_size=64) | st.none()), max_size=12))  # fmt: skip
def test_held_outcome_comes_once_and_never_early(delay: float, steps: list[tuple[float, bytes | None]]) -> None:
    """Whatever the peer sends and whenever the timer runs: no outcome before the deadline, one
    after it, and the peer's bytes meanwhile are dropped (never answered, never buffered)."""
    server = _server(delay)
    server.receive_data(SASL_HEADER + frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00x"), frame_type=FRAME_SASL), 0.0)
    server.data_to_send()
    now, out, events = 0.0, b"", []
    for dt, data in steps:
        now += dt
        if data is None:
            server.tick(now)
        elif data:
            server.receive_data(data, now)
        out += server.data_to_send()
        events += server.events()
        if now < delay:
            assert out == b"" and events == [] and server.next_deadline() == delay
    server.tick(max(now, delay))
    out += server.data_to_send()
    events += server.events()
    assert out == frame(0, SaslOutcome(code=1), frame_type=FRAME_SASL)
    assert [type(e) for e in events] == [AuthenticationFailed] and server.finished


def test_engine_without_delay_answers_at_once() -> None:
    server = _server(0.0)
    server.receive_data(SASL_HEADER, 0.0)
    server.data_to_send()
    server.receive_data(frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00bad"), frame_type=FRAME_SASL), 0.0)
    assert server.data_to_send() == frame(0, SaslOutcome(code=1), frame_type=FRAME_SASL) and server.finished


def test_a_listener_without_anonymous_requires_sasl() -> None:
    plain = Listener(sasl_mechanisms=("PLAIN",), allow_insecure_plain=True)
    from router.core.connections import engine_config

    config = RouterConfig(listeners=(plain,), users=(User(username="u", password="p"),))
    assert engine_config(config, plain).sasl_server.allow_no_sasl is False  # type: ignore[union-attr]
    anonymous = Listener(sasl_mechanisms=("ANONYMOUS", "PLAIN"), allow_insecure_plain=True)
    assert engine_config(config, anonymous).sasl_server.allow_no_sasl is True  # type: ignore[union-attr]
    strict = Listener(sasl_mechanisms=("ANONYMOUS",), require_sasl=True)
    assert engine_config(config, strict).sasl_server.allow_no_sasl is False  # type: ignore[union-attr]


# --- over sockets ----------------------------------------------------------------------------------


def _config() -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id="sasl-router"),
        listeners=(Listener(name="plain", host="0.0.0.0", port=0, sasl_mechanisms=("PLAIN",), allow_insecure_plain=True),),
        users=(User(username="alice", password="s3cret"),),
        failed_logins=FailedLogins(initial_delay_s=HELD_S, max_delay_s=HELD_S),
    )


async def _raw(port: int, data: bytes) -> bytes:
    """Send `data`, read until the router ends the stream."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        got = b""
        with trio.fail_after(TIMEOUT_S):
            while chunk := await stream.receive_some(65536):
                got += chunk
    return got


async def _login(port: int, source: str, password: str, done: dict[str, object] | None = None) -> object:
    """A SASL PLAIN login from the loopback address `source`: Authenticated or AuthenticationFailed."""
    engine = Connection(ConnectionConfig(container_id=f"c-{source}", sasl_client=SaslClientConfig(
        mechanisms=("PLAIN",), username="alice", password=password)))  # fmt: skip
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    async with stream:
        with trio.fail_after(TIMEOUT_S):
            while True:
                out = engine.data_to_send()
                if out:
                    await stream.send_all(out)
                for event in engine.events():
                    if isinstance(event, (Authenticated, AuthenticationFailed)):
                        if done is not None:
                            done["result"] = event
                        return event
                data = await stream.receive_some(65536)
                engine.receive_data(data, trio.current_time())
                assert data, "the router ended the stream without a sasl-outcome"


def _proton(port: int, **options: object) -> bool:
    try:
        BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S, **options).close()
        return True
    except ConnectionException:
        return False


async def test_plain_only_listener_refuses_clients_that_skip_sasl_and_throttles_per_host() -> None:
    server = RouterServer(_config())
    async with trio.open_nursery() as nursery:
        [(_, _, port)] = await nursery.start(server.run)
        try:
            # Skipping SASL: the SASL header back, then the end of the stream (security §5.1).
            assert await _raw(port, AMQP_HEADER) == SASL_HEADER
            assert not await run_in_thread(partial(_proton, port, sasl_enabled=False))
            assert await run_in_thread(partial(_proton, port, user="alice", password="s3cret", allowed_mechs="PLAIN"))

            # Host A fails once (answered at once), then again: that outcome is held back.
            assert isinstance(await _login(port, "127.0.0.2", "wrong"), AuthenticationFailed)
            held: dict[str, object] = {}
            started = trio.current_time()
            nursery.start_soon(_login, port, "127.0.0.2", "wrong", held)
            with trio.fail_after(TIMEOUT_S):
                while server.core.logins.delayed < 1:  # the router has taken the second attempt
                    await trio.sleep(0.005)
            # Meanwhile other hosts are served at once, and the router carries on.
            assert isinstance(await _login(port, "127.0.0.3", "wrong"), AuthenticationFailed)
            assert isinstance(await _login(port, "127.0.0.4", "s3cret"), Authenticated)
            assert await run_in_thread(partial(_proton, port, user="alice", password="s3cret", allowed_mechs="PLAIN"))
            assert "result" not in held  # A is still waiting for its outcome
            with trio.fail_after(TIMEOUT_S):
                while "result" not in held:
                    await trio.sleep(0.01)
            assert isinstance(held["result"], AuthenticationFailed)
            assert trio.current_time() - started >= HELD_S  # never earlier than its deadline
            logins = server.core.logins
            assert (logins.failures, logins.delayed) == (3, 1) and logins.hosts == 2
            router = server.agent.entity_type("router")  # type: ignore[union-attr]
            [entity] = list(router.entities(server.agent, 0.0))
            assert (entity["failedLogins"], entity["failedLoginsDelayed"], entity["failedLoginHosts"]) == (3, 1, 2)
            scraped = Metrics(server.agent).text().decode()  # type: ignore[arg-type]
            assert "amqp_router_failed_logins_total 3.0" in scraped and "amqp_router_failed_logins_delayed_total 1.0" in scraped
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()
