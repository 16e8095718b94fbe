"""Out of file descriptors: `router run` raises its soft RLIMIT_NOFILE to the hard limit, and
when accept fails (EMFILE, ENFILE, ENOBUFS, ENOMEM) the listener backs off (10 ms doubling to
1 s) instead of spinning, logs once per interval with a count, counts the failures for
management, and accepts again once descriptors are free. Connections refused at the connection
limit are counted per listener too."""

from __future__ import annotations

import errno
import logging
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import yaml

from router.amqp.message import Message
from router.config.models import Limits, Listener, RouterConfig, RouterSection
from router.net import listeners as listeners_module
from router.net.client import ClientError, connect
from router.net.listeners import ACCEPT_BACKOFF_MAX_S, ACCEPT_BACKOFF_MIN_S, AmqpListeners, bind_tcp
from router.net.server import RouterServer

from .support.router_process import LISTENING, router_command, router_env


class FailingListener:
    """A listening socket whose accept fails with `errno_` the first `failures` times."""

    def __init__(self, inner: trio.SocketListener, failures: int, errno_: int) -> None:
        self.inner, self.socket, self.failures, self.errno = inner, inner.socket, failures, errno_
        self.calls: list[float] = []  # when accept was called

    async def accept(self) -> trio.SocketStream:
        self.calls.append(trio.current_time())
        if len(self.calls) <= self.failures:
            await trio.lowlevel.checkpoint()
            raise OSError(self.errno, "Too many open files")
        return await self.inner.accept()


def failing_bind(failures: int, errno_: int, made: list[FailingListener]) -> Callable[[str, int], list[Any]]:
    def bind(host: str, port: int) -> list[Any]:
        wrapped = [FailingListener(sock, failures, errno_) for sock in bind_tcp(host, port)]
        made.extend(wrapped)
        return wrapped

    return bind


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
async def test_accept_failures_back_off_log_rarely_and_are_counted(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    caplog.set_level(logging.INFO, logger=listeners_module.__name__)
    served = trio.Event()

    async def handler(stream: trio.SocketStream, listener: Listener) -> None:
        served.set()
        await stream.aclose()

    made: list[FailingListener] = []
    listeners = AmqpListeners(handler, bind=failing_bind(60, code, made))
    port = listeners.open(Listener(name="l", host="127.0.0.1", port=0))
    async with trio.open_nursery() as nursery:
        listeners.serve(nursery, nursery)
        client = await trio.open_tcp_stream("127.0.0.1", port)  # waits in the backlog meanwhile
        with trio.fail_after(120):
            await served.wait()
        assert listeners.counters("l").accept_failures == 60
        listeners.close_all()
        await client.aclose()
    (sock,) = made
    calls = sock.calls[:61]  # 60 failures, then the connection (then the next accept waits)
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert gaps[0] == pytest.approx(ACCEPT_BACKOFF_MIN_S)
    assert all(b >= a - 1e-9 for a, b in zip(gaps, gaps[1:]))  # doubling ...
    assert max(gaps) == pytest.approx(ACCEPT_BACKOFF_MAX_S)  # ... up to the cap
    span = calls[-1] - calls[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert 1 <= len(errors) <= span / 10 + 1  # once per 10 s interval, with the count
    assert "failure(s) since the last report" in errors[-1].getMessage()
    assert listeners.counters("l").accept_failures == 0  # closed: nothing kept
    assert any("accepting again" in r.getMessage() for r in caplog.records)


def test_router_run_raises_the_soft_descriptor_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard limit is too low to lower the soft one below it")
    code = "from router.cli.run import raise_fd_limit; import resource; raise_fd_limit(); " \
           "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], env=router_env(), capture_output=True, text=True, timeout=30,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) == (hard if hard != resource.RLIM_INFINITY else 1_048_576)


def test_a_router_out_of_descriptors_backs_off_then_serves_again(tmp_path: Path) -> None:
    """A `router run` with 64 descriptors and 100 clients connecting: accept fails with EMFILE;
    the router logs it once (not ten times a second), and serves again once clients leave."""
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({"router": {"id": "fd"}, "listeners": [{"name": "amqp", "port": 0}]}))
    limit = 64
    proc = subprocess.Popen(
        router_command("run", "-c", str(config)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=router_env(), preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
    )  # fmt: skip
    clients: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        match = LISTENING.match(proc.stdout.readline().strip())
        assert match, "the router did not start"
        port = int(match[3])
        for _ in range(100):
            clients.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(2.0)  # what the router logs while out of descriptors (nothing to wait for)
        for sock in clients:
            sock.close()
        clients.clear()

        async def one_message() -> str:
            with trio.fail_after(10):
                async with connect("127.0.0.1", port) as client:
                    receiver = await client.open_receiver("fd", credit=1)
                    sender = await client.open_sender("fd")
                    tracker = await sender.start_send(Message.value("back"))
                    receiver.accept(await receiver.receive())
                    return type(await tracker.wait()).__name__

        assert trio.run(one_message) == "Accepted"
    finally:
        for sock in clients:
            sock.close()
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert f"open file limit: {limit}" in stderr
    failures = [line for line in stderr.splitlines() if "cannot accept" in line]
    assert 1 <= len(failures) <= 2, "\n".join(failures)
    assert "Too many open files" in failures[0]


async def test_connections_refused_at_the_limit_are_counted_per_listener(nursery: trio.Nursery) -> None:
    config = RouterConfig(router=RouterSection(id="full"), listeners=(Listener(host="127.0.0.1", port=0),),
                          limits=Limits(max_connections=1))  # fmt: skip
    server = RouterServer(config)
    port = (await nursery.start(server.run))[0][2]
    async with connect("127.0.0.1", port):
        for _ in range(2):
            with pytest.raises(ClientError) as refused:
                async with connect("127.0.0.1", port) as extra:
                    await extra.open_receiver("x")
            assert "resource-limit-exceeded" in str(refused.value)
    (listener,) = server.agent.entities("listener")
    assert listener["connectionsRefused"] == 2
    server.shutdown()
