"""rhea (AMQP 1.0 for Node.js) over its WebSocket transport (the ws package), a client we did
not write: messages through a WebSocket listener, plain and over TLS (wss), and through the
WebSocket API of browsers (Node's own), every one accepted,
a 200 000-byte one among them (many AMQP frames, many WebSocket messages). Skips cleanly when
Node.js or the packages are missing: `npm install --prefix tests/rhea` installs them
(tests/rhea/package.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from .tlssupport import make_pki, serving

HERE = Path(__file__).resolve().parent / "rhea"
NODE = shutil.which("node")
COUNT = 20

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(not all((HERE / "node_modules" / name / "package.json").exists() for name in ("rhea", "ws")),
                       reason="rhea or ws is not installed (npm install --prefix tests/rhea)"),
]  # fmt: skip


def ws_listener(**options: Any) -> dict[str, Any]:
    return {"name": "ws", "port": 0, "websocket": True, "websocket_path": "/amqp", **options}


async def run_rhea(url: str, *extra: str, node_options: tuple[str, ...] = ()) -> dict[str, Any]:
    assert NODE is not None
    with trio.fail_after(20):
        done = await trio.run_process([NODE, *node_options, str(HERE / "ws_roundtrip.js"), url, "rhea.ws", str(COUNT), *extra],
                                      capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def assert_all_through(result: dict[str, Any]) -> None:
    assert result["received"] == [f"m{i}" for i in range(COUNT - 1)] + [200_000]
    assert result["accepted"] == COUNT and result["other_outcomes"] == []
    assert result["protocol"] == "amqp"


async def test_rhea_over_websocket() -> None:
    async with serving({"router": {"id": "ws"}, "listeners": [ws_listener()]}) as server:
        assert_all_through(await run_rhea(f"ws://127.0.0.1:{server.listener_ports()['ws']}/amqp"))


async def test_rhea_over_websocket_with_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = {
        "router": {"id": "wss"},
        "ssl_profiles": [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file}],
        "listeners": [ws_listener(ssl_profile="server")],
    }
    async with serving(config) as server:
        assert_all_through(await run_rhea(f"wss://localhost:{server.listener_ports()['ws']}/amqp", "--ca", pki.ca_file))


def node_has_browser_websocket() -> bool:
    """Node.js 20.10+ has the WHATWG WebSocket behind a flag (22+ without it)."""
    assert NODE is not None
    probe = subprocess.run([NODE, "--experimental-websocket", "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)"],
                           capture_output=True, check=False)  # fmt: skip
    return probe.returncode == 0


async def test_rhea_over_a_browsers_websocket() -> None:
    """The WebSocket API of browsers (binaryType arraybuffer, no options), as rhea uses it in a page."""
    if not node_has_browser_websocket():
        pytest.skip("this Node.js has no WHATWG WebSocket")
    async with serving({"router": {"id": "ws"}, "listeners": [ws_listener()]}) as server:
        url = f"ws://127.0.0.1:{server.listener_ports()['ws']}/amqp"
        assert_all_through(await run_rhea(url, "--browser", node_options=("--experimental-websocket",)))
