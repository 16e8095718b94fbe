"""Routers with an HTTP listener, a small HTTP client and the management CLI, for the tests.

    async with managed_router() as router:        # in process: AMQP and HTTP on 127.0.0.1, ephemeral ports
        status, headers, body = await router.http("GET", "/management/listener")
        router.amqp_port, router.server, router.id

    with router_with_http(tmp_path, "cli-router") as proc:   # `router run` as a subprocess
        result = cli("stat", "links", "--json", "-b", proc.bus)  # `router ...`, output captured
        with live_traffic(proc.amqp_port, "orders", 3):          # links that stay attached
            ...

The HTTP client is urllib in a worker thread (the router keeps running on the trio thread);
every request has a time-out, so a hung router fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import yaml
from prometheus_client.parser import text_string_to_metric_families

from router.amqp.message import Message
from router.config.models import HttpListener, Listener, RouterConfig, RouterSection
from router.net.client import connect
from router.net.server import RouterServer

from .router_process import RouterProcess, router_command, router_env

MEDIA_TYPE = "application/amqp-management+json"
HTTP_TIMEOUT_S = 5.0


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def _request(url: str, method: str, body: bytes | None, headers: dict[str, str]) -> Response:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read())
    except urllib.error.HTTPError as error:  # every non-2xx status lands here
        with error:
            return Response(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


@dataclass
class ManagedRouter:
    server: RouterServer
    amqp_port: int
    http_port: int

    @property
    def id(self) -> str:
        return self.server.config.router.id

    async def http(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> Response:
        """`body` is sent as JSON with the management media type; `raw` as given."""
        sent = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", MEDIA_TYPE)
        url = f"http://127.0.0.1:{self.http_port}{path}"
        with trio.fail_after(HTTP_TIMEOUT_S + 1):
            return await trio.to_thread.run_sync(_request, url, method, data, sent)


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def management_config(router_id: str = "mgmt-router") -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=router_id),
        listeners=(Listener(name="amqp", host="127.0.0.1", port=0),),
        http=(HttpListener(name="http", host="127.0.0.1", port=0),),
    )


@asynccontextmanager
async def managed_router(config: RouterConfig | None = None) -> AsyncIterator[ManagedRouter]:
    """A RouterServer with one AMQP and one HTTP listener, stopped (gracefully) on exit."""
    server = RouterServer(config or management_config())
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.run)
        try:
            yield ManagedRouter(server, addresses[0][2], server.http_addresses[0][2])
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()


# --- `router run` with an HTTP listener, and the CLI -----------------------------------------------

CLI_TIMEOUT_S = 30.0


@dataclass
class ProcessRouter:
    process: RouterProcess
    id: str

    @property
    def amqp_port(self) -> int:
        return self.process.ports["amqp"]

    @property
    def http_port(self) -> int:
        return self.process.ports["http"]

    @property
    def bus(self) -> str:
        return f"127.0.0.1:{self.amqp_port}"


@contextmanager
def router_with_http(directory: Path, router_id: str, *, prefix: tuple[str, ...] = (), **config: Any) -> Iterator[ProcessRouter]:
    """`router run` on a file with an AMQP listener `amqp` and an HTTP listener `http` (both on
    127.0.0.1, port 0; `config` adds sections or replaces these), under the command `prefix` (e.g.
    taskset); stopped with SIGTERM on exit, which must end it with code 0. `process.ports` has
    every listener's port by name."""
    settings: dict[str, Any] = {
        "router": {"id": router_id},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0}],
        "http": [{"name": "http", "host": "127.0.0.1", "port": 0}],
        **config,
    }
    path = directory / f"{router_id}.yaml"
    path.write_text(yaml.safe_dump(settings))
    process = RouterProcess(path, listeners=len(settings["listeners"]) + len(settings["http"]), prefix=prefix)
    process.start()  # waits for the AMQP and the HTTP listeners' lines
    try:
        yield ProcessRouter(process, router_id)
    finally:
        if process.proc is not None and process.proc.poll() is None:
            code = process.stop()
            assert code == 0, f"router exited with {code}:\n{process.output}"
        process.kill()


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`router ARGS...` as a subprocess, its output captured as text."""
    return subprocess.run(
        router_command(*args), input=stdin, capture_output=True, text=True, env=router_env(), timeout=CLI_TIMEOUT_S,
        check=False,
    )  # fmt: skip


def cli_json(*args: str, stdin: str | None = None) -> Any:
    """`router ARGS...`, which must succeed; its stdout parsed as JSON."""
    result = cli(*args, stdin=stdin)
    assert result.returncode == 0 and result.stderr == "", result
    return json.loads(result.stdout)


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The failed command's only stderr line (which starts with `error:`); nothing on stdout."""
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr and result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@contextmanager
def live_traffic(port: int, address: str, count: int, timeout_s: float = 10.0) -> Iterator[str]:
    """A client (trio, in a thread of its own) that sends `count` messages to `address` through
    the router on `port`, its receiver accepting each, and keeps both links attached until the
    block ends. Yields the client's container id."""
    ready, done = threading.Event(), threading.Event()
    failures: list[BaseException] = []
    container: list[str] = []

    async def main() -> None:
        async with connect("127.0.0.1", port) as client:
            container.append(client.engine.config.container_id)
            receiver = await client.open_receiver(address, credit=count)
            sender = await client.open_sender(address)
            for i in range(count):
                tracker = await sender.start_send(Message.value(i))
                receiver.accept(await receiver.receive())
                await tracker.wait()
            ready.set()
            await trio.to_thread.run_sync(done.wait)

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(timeout_s), "the traffic did not flow in time"
        if failures:
            raise failures[0]
        yield container[0]
    finally:
        done.set()
        thread.join(timeout_s)
