"""The benchmark load generator (bench/loadgen): built with gcc against Proton C, run as real
processes on 127.0.0.1. Direct runs (send -> listen, pingpong -> listen --echo) and runs through
ProtonBroker (receive, echo, outcomes) check counts and the JSON fields, never timing values.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from proton import Message, symbol
from proton.utils import BlockingConnection

from bench.loadgen.build import ToolchainMissing, build
from bench.loadgen.smoke import listening, parse_result, run_direct, run_direct_pingpong

from .support.proton_broker import ProtonBroker

pytestmark = pytest.mark.process

TIMEOUT_S = 20.0  # every loadgen gets --timeout; subprocess waits allow a little more
SEND_FIELDS = {"role", "count", "seconds", "msgs_per_s", "mib_per_s", "accepted", "rejected",
               "released", "modified", "timeout"}  # fmt: skip
RECEIVE_FIELDS = {"role", "count", "seconds", "msgs_per_s", "mib_per_s", "p50_us", "p99_us",
                  "p999_us", "timeout"}  # fmt: skip
PINGPONG_FIELDS = {"role", "count", "seconds", "p50_us", "p99_us", "p999_us", "timeout"}


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build(tmp_path_factory.mktemp("loadgen"))
    except ToolchainMissing as exc:
        pytest.skip(str(exc))


def run(loadgen: Path, *args: str, port: int) -> subprocess.CompletedProcess[str]:
    cmd = [str(loadgen), *args, "--host", "127.0.0.1", "--port", str(port)]
    if "--timeout" not in args:
        cmd += ["--timeout", str(TIMEOUT_S)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S + 10)


def start(loadgen: Path, *args: str, port: int) -> subprocess.Popen[str]:
    cmd = [str(loadgen), *args, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--timeout", str(TIMEOUT_S)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(role: str, proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return parse_result(role, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


# --- direct: no router, no broker ----------------------------------------------------------------


@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
def test_direct_send_listen(loadgen: Path, presettled: bool) -> None:
    result = run_direct(2000, 100, presettled=presettled, timeout_s=TIMEOUT_S, binary=loadgen)
    send, listen = result["send"], result["listen"]
    assert SEND_FIELDS <= send.keys() and RECEIVE_FIELDS <= listen.keys()
    assert send["role"] == "send" and listen["role"] == "listen"
    assert send["count"] == send["sent"] == 2000 and send["presettled"] is presettled
    assert send["accepted"] == (0 if presettled else 2000)
    assert send["rejected"] == send["released"] == send["modified"] == send["other"] == 0
    assert listen["count"] == 2000 and not send["timeout"] and not listen["timeout"]
    assert listen["samples"] == 2000  # a timestamp found in every body
    assert 0 <= listen["p50_us"] <= listen["p99_us"] <= listen["p999_us"] <= listen["max_us"]


def test_direct_pingpong_listen_echo(loadgen: Path) -> None:
    result = run_direct_pingpong(200, 100, timeout_s=TIMEOUT_S, binary=loadgen)
    pingpong, listen = result["pingpong"], result["listen"]
    assert PINGPONG_FIELDS <= pingpong.keys()
    assert pingpong["count"] == pingpong["samples"] == 200 and not pingpong["timeout"]
    assert listen == {"role": "listen", "echo": True, "count": 200, "timeout": False}


def test_listen_without_count_stops_on_sigterm(loadgen: Path) -> None:
    with listening(loadgen, [], TIMEOUT_S) as (server, port):
        send = parse_result("send", run(loadgen, "send", "--address", "a", "--count", "300",
                                         "--size", "4000", port=port))  # fmt: skip
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=TIMEOUT_S)
    assert send["accepted"] == 300
    assert server.returncode == 0, err
    listen = json.loads(out)
    assert listen["count"] == 300 and listen["mib_per_s"] > 0 and not listen["timeout"]


@pytest.mark.interop
def test_listen_scans_any_sections_before_the_body(loadgen: Path) -> None:
    """A Proton client's message with header, annotations, properties (short str8 reply-to) and
    application properties before the data section: listen still finds the timestamp, and
    listen --echo finds the reply-to and sends the bytes back unchanged."""
    body = struct.pack("=q", time.monotonic_ns()) + b"x" * 40  # CLOCK_MONOTONIC, host order

    def message() -> Message:
        return Message(body=body, inferred=True, durable=True, priority=7, reply_to="r",
                       annotations={symbol("x-opt-hop"): 3}, properties={"k": "v"})  # fmt: skip

    with listening(loadgen, ["--count", "1"], TIMEOUT_S) as (server, port):
        conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
        try:
            conn.create_sender("a").send(message())
        finally:
            conn.close()
        out, _ = server.communicate(timeout=TIMEOUT_S)
    listen = json.loads(out)
    assert listen["count"] == listen["samples"] == 1  # the timestamp was found
    assert 0 <= listen["p50_us"] < 60e6

    with listening(loadgen, ["--echo", "--count", "1"], TIMEOUT_S) as (server, port):
        conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
        try:
            replies = conn.create_receiver("r")
            conn.create_sender("requests").send(message())
            reply = replies.receive(timeout=TIMEOUT_S)
            replies.accept()
        finally:
            conn.close()
        out, _ = server.communicate(timeout=TIMEOUT_S)
    assert reply.body == body and reply.reply_to == "r" and reply.priority == 7
    assert json.loads(out)["count"] == 1


# --- errors and time-outs ------------------------------------------------------------------------


def test_connection_refused_is_one_line_and_exit_1(loadgen: Path) -> None:
    with listening(loadgen, ["--count", "1"], TIMEOUT_S) as (server, port):
        server.kill()  # a port that was just ours: nothing listens there now
        server.wait(timeout=TIMEOUT_S)
    done = run(loadgen, "send", "--address", "a", "--count", "1", port=port)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "refused" in done.stderr


def test_bad_arguments_exit_1(loadgen: Path) -> None:
    done = run(loadgen, "send", "--address", "a", "--count", "0", port=1)
    assert done.returncode == 1 and "--count" in done.stderr


# --- through a third-party AMQP peer (python-qpid-proton broker) ---------------------------------


@pytest.mark.interop
def test_send_receive_and_outcomes_through_broker(loadgen: Path) -> None:
    with ProtonBroker.running(timeout_s=TIMEOUT_S) as broker:
        receiver = start(loadgen, "receive", "--address", "q", "--count", "500",
                         "--credit", "50", port=broker.port)  # fmt: skip
        send = parse_result("send", run(loadgen, "send", "--address", "q", "--count", "500",
                                        "--size", "64", "--window", "20", port=broker.port))  # fmt: skip
        received = finished("receive", receiver)
        rejected = parse_result("send", run(loadgen, "send", "--address", "reject/q", "--count",
                                            "30", port=broker.port))  # fmt: skip
        released = parse_result("send", run(loadgen, "send", "--address", "release/q", "--count",
                                            "30", port=broker.port))  # fmt: skip
    assert send["accepted"] == send["count"] == 500
    assert RECEIVE_FIELDS <= received.keys() and received["role"] == "receive"
    assert received["count"] == received["samples"] == 500 and received["mib_per_s"] > 0
    assert 0 <= received["p50_us"] <= received["max_us"] < 60e6  # timestamps survived the broker
    assert rejected["rejected"] == rejected["count"] == 30 and rejected["accepted"] == 0
    assert released["released"] == released["count"] == 30


@pytest.mark.interop
def test_pingpong_echo_through_broker(loadgen: Path) -> None:
    with ProtonBroker.running(timeout_s=TIMEOUT_S) as broker:
        echo = start(loadgen, "echo", "--address", "requests", "--count", "200", port=broker.port)
        pingpong = parse_result("pingpong", run(loadgen, "pingpong", "--address", "requests",
                                                "--reply-address", "replies", "--count", "200",
                                                port=broker.port))  # fmt: skip
        echoed = finished("echo", echo)
    assert PINGPONG_FIELDS <= pingpong.keys() and pingpong["count"] == 200
    assert echoed == {"role": "echo", "echo": True, "count": 200, "timeout": False}


@pytest.mark.interop
def test_timeout_prints_what_it_has_and_exits_2(loadgen: Path) -> None:
    with ProtonBroker.running(timeout_s=TIMEOUT_S) as broker:
        done = run(loadgen, "receive", "--address", "empty", "--count", "10", "--timeout", "0.5",
                   port=broker.port)  # fmt: skip
    assert done.returncode == 2, done.stderr
    result = json.loads(done.stdout)
    assert result["timeout"] is True and result["count"] == 0 and RECEIVE_FIELDS <= result.keys()


@pytest.mark.interop
def test_pairs_drives_many_connections_and_counts_the_window(loadgen: Path) -> None:
    """`loadgen pairs` (bench/pairs.py): 20 producer and 20 consumer connections, pair i on
    pairs-i; it announces the window once every link is attached, then one JSON line in which
    every message sent inside the window arrived and every message sent was accepted."""
    with ProtonBroker.running(timeout_s=TIMEOUT_S) as broker:
        proc = start(loadgen, "pairs", "--pairs", "20", "--rate", "20", "--seconds", "1",
                     "--warmup", "0.2", port=broker.port)  # fmt: skip
        out, err = proc.communicate(timeout=TIMEOUT_S + 10)
    assert proc.returncode == 0, err
    window, line = out.strip().splitlines()
    word, first, last = window.split()
    assert word == "window" and int(last) - int(first) == 1_000_000_000
    result = json.loads(line)
    assert result["role"] == "pairs" and result["pairs"] == 20 and result["timeout"] is False
    assert result["sent_in_window"] == result["received_in_window"] == result["samples"]
    assert 20 * 20 * 0.9 <= result["sent_in_window"] <= 20 * 20 + 20  # a tick may add one per pair
    assert result["accepted"] == result["sent"] and result["rejected"] == result["released"] == 0
    assert 0 <= result["p50_us"] <= result["p99_us"] <= result["max_us"] < 60e6
