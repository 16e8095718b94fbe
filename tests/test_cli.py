"""The `router` command: configuration checks, `router run` start-up and shutdown, and the
`send`/`receive` clients (against the in-memory queue peer, and through a real router).

Commands run as real subprocesses where what matters is what a user sees (stderr, exit codes,
signals, no tracebacks), in process through typer's runner otherwise.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest
import trio
from typer.testing import CliRunner

from router.amqp.sasl import SaslServerConfig
from router.cli.main import app
from router.net.client import ConnectionClosed, connect
from router.testing.peer import start_peer

from .support.router_process import RouterProcess, core_ready, router_command, router_env

needs_core = pytest.mark.skipif(not core_ready(), reason="the routing core cannot route yet")
runner = CliRunner()

GOOD = """
router: {id: r1}
listeners:
  - {name: amqp, host: 127.0.0.1, port: 0}
"""
# Four problems, in three sections.
BAD = """
router: {id: r1, mode: sideways}
listeners:
  - {name: amqp, port: 70000, link_capacity: 0}
limits: {max_connections: x}
"""


def _write(tmp_path: Path, text: str, name: str = "router.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


async def _router(*args: str, timeout: float = 20) -> trio.CompletedProcess[bytes]:
    with trio.fail_after(timeout):
        return await trio.run_process(
            router_command(*args), capture_stdout=True, capture_stderr=True, check=False, env=router_env()
        )


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    chunks = []
    while chunk := await stream.receive_some():
        chunks.append(chunk)
    return b"".join(chunks)


def _text(result: trio.CompletedProcess[bytes]) -> tuple[str, str]:
    return result.stdout.decode(), result.stderr.decode()


# --- help and configuration ---------------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "config", "send", "receive", "demo", "version"):
        assert command in result.output
    for command in (["run"], ["send"], ["receive"], ["config", "check"], ["config", "schema"]):
        assert runner.invoke(app, [*command, "--help"]).exit_code == 0


def test_config_check_accepts_a_good_file(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    result = runner.invoke(app, ["config", "check", str(path)])
    assert result.exit_code == 0
    assert result.output.strip() == f"{path}: ok"


async def test_config_check_reports_each_problem_on_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BAD)
    result = await _router("config", "check", str(path))
    out, err = _text(result)
    assert result.returncode == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 4, err
    assert all(line.startswith(f"{path}: ") for line in lines)
    for field in ("router.mode", "listeners[0].port", "listeners[0].link_capacity", "limits.max_connections"):
        assert sum(field in line for line in lines) == 1, (field, err)
    assert "Traceback" not in out + err


def test_config_check_of_a_missing_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "check", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_config_schema_is_json() -> None:
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert "listeners" in schema["properties"]


# --- router run -----------------------------------------------------------------------------------


async def test_run_with_a_bad_config_fails_fast(tmp_path: Path) -> None:
    path = _write(tmp_path, BAD)
    started = time.monotonic()
    result = await _router("run", "-c", str(path), timeout=10)
    out, err = _text(result)
    assert result.returncode == 2
    assert time.monotonic() - started < 10
    assert len(err.strip().splitlines()) == 4, err
    assert "listening" not in out
    assert "Traceback" not in out + err


async def test_run_on_a_port_in_use_fails_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = _write(tmp_path, f"listeners: [{{name: amqp, host: 127.0.0.1, port: {port}}}]\n")
        result = await _router("run", "-c", str(path), timeout=10)
    out, err = _text(result)
    assert result.returncode == 1
    assert "cannot listen" in err
    assert "Traceback" not in out + err


@needs_core
@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_run_stops_gracefully_on_a_signal(tmp_path: Path, signum: int) -> None:
    config = {"listeners": [{"name": "one", "port": 0}, {"name": "two", "port": 0}]}
    with RouterProcess.running(tmp_path, config) as router:
        assert set(router.ports) == {"one", "two"}
        async with connect("127.0.0.1", router.ports["one"]) as client:
            receiver = await client.open_receiver("anything", credit=5)
            router.send_signal(signum)
            with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                await receiver.receive()
            assert closed.value.condition == "amqp:connection:forced"
        code = await trio.to_thread.run_sync(router.wait, 10.0)
    assert code == 0, router.output
    assert "Traceback" not in router.output
    with pytest.raises(OSError):  # the listeners are gone
        await trio.open_tcp_stream("127.0.0.1", router.ports["one"])


# --- send and receive against the queue peer (no router needed) --------------------------------


async def test_send_then_receive(nursery: trio.Nursery) -> None:
    peer, port = await start_peer(nursery)
    bus = f"127.0.0.1:{port}"
    sent = await _router("send", "q", "-b", bus, "-n", "5")
    out, err = _text(sent)
    assert sent.returncode == 0, err
    assert "sent 5 message(s) to q" in out
    assert "accepted 5" in out.splitlines()
    received = await _router("receive", "q", "-b", bus, "-n", "5", "--timeout", "5")
    out, err = _text(received)
    assert received.returncode == 0, err
    assert out.splitlines() == [f"message {i}" for i in range(5)]
    assert "received 5 message(s) from q" in err
    assert peer.queues["q"] == type(peer.queues["q"])()  # all taken (and accepted)


async def test_send_sizes_and_quiet_receive(nursery: trio.Nursery) -> None:
    _, port = await start_peer(nursery)
    bus = f"127.0.0.1:{port}"
    assert (await _router("send", "big", "-b", bus, "-n", "3", "--size", "100000")).returncode == 0
    received = await _router("receive", "big", "-b", bus, "-n", "3", "--quiet", "--timeout", "5")
    out, _ = _text(received)
    assert received.returncode == 0
    assert out.startswith("received 3 message(s) from big")


async def test_send_reports_outcomes_other_than_accepted(nursery: trio.Nursery) -> None:
    _, port = await start_peer(nursery)
    result = await _router("send", "reject/orders", "-b", f"127.0.0.1:{port}", "-n", "2", "--body", "no")
    out, err = _text(result)
    assert result.returncode == 1
    assert "rejected 2" in out.splitlines()
    assert "2 of 2 message(s) not accepted: 2 rejected (amqp:precondition-failed" in err
    assert "Traceback" not in out + err


async def test_receive_times_out_with_fewer_messages(nursery: trio.Nursery) -> None:
    _, port = await start_peer(nursery)
    result = await _router("receive", "empty", "-b", f"127.0.0.1:{port}", "-n", "3", "--timeout", "0.3")
    out, err = _text(result)
    assert result.returncode == 1
    assert "only 0 of 3 message(s) received" in err


async def test_receive_stops_cleanly_on_ctrl_c(nursery: trio.Nursery) -> None:
    peer, port = await start_peer(nursery)
    process = await nursery.start(
        partial(trio.run_process, router_command("receive", "q", "-b", f"127.0.0.1:{port}"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, env=router_env())
    )  # fmt: skip
    with trio.fail_after(10):  # the receiver is in its loop once it has given credit
        while not any(link.credit for link in peer.receivers.get("q", [])):
            await trio.sleep(0.02)
        process.send_signal(signal.SIGINT)
        out, err = await _read_all(process.stdout), await _read_all(process.stderr)  # a few lines
        code = await process.wait()
    assert code == 0, err
    assert err.decode().startswith("received 0 message(s) from q")
    assert "Traceback" not in (out + err).decode()


async def test_unreachable_router() -> None:
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for command in ("send", "receive"):
        result = await _router(command, "q", "-b", f"127.0.0.1:{port}")
        out, err = _text(result)
        assert result.returncode == 1
        assert err.strip() == f"error: cannot connect to 127.0.0.1:{port}: Connection refused"
        assert "Traceback" not in out + err


async def test_refused_link_and_failed_authentication(nursery: trio.Nursery) -> None:
    sasl = SaslServerConfig(mechanisms=("PLAIN",), check_plain=lambda _z, user, pw: (user, pw) == ("u", "p"))
    _, port = await start_peer(nursery, sasl=sasl)
    bus = f"127.0.0.1:{port}"
    refused = await _router("receive", "", "-b", bus, "--username", "u", "--password", "p")
    out, err = _text(refused)
    assert refused.returncode == 1
    assert err.strip() == (
        f"error: link refused by {bus}: amqp:invalid-field: a receiver needs a source address"
    )
    denied = await _router("send", "q", "-b", bus, "--username", "u", "--password", "wrong")
    out, err = _text(denied)
    assert denied.returncode == 1
    assert err.startswith(f"error: authentication failed at {bus}")
    assert "Traceback" not in out + err


def test_bad_bus_and_conflicting_body_options_are_usage_errors() -> None:
    assert runner.invoke(app, ["send", "q", "-b", "host:port"]).exit_code == 2
    assert runner.invoke(app, ["send", "q", "--size", "3", "--body", "x"]).exit_code == 2


# --- through a real router --------------------------------------------------------------------------


@needs_core
@pytest.mark.process
async def test_send_and_receive_through_router_run(tmp_path: Path) -> None:
    with RouterProcess.running(tmp_path) as router:
        bus = f"127.0.0.1:{router.ports['amqp']}"
        async with trio.open_nursery() as nursery:
            results: dict[str, trio.CompletedProcess[bytes]] = {}

            async def receive() -> None:
                results["receive"] = await _router("receive", "orders", "-b", bus, "-n", "20", "--timeout", "10")

            nursery.start_soon(receive)
            # The sender gets credit once the receiver is attached: no ordering needed here.
            results["send"] = await _router("send", "orders", "-b", bus, "-n", "20")
        assert results["send"].returncode == 0, _text(results["send"])
        assert "accepted 20" in _text(results["send"])[0].splitlines()
        out, err = _text(results["receive"])
        assert results["receive"].returncode == 0, err
        assert sorted(out.splitlines()) == sorted(f"message {i}" for i in range(20))
