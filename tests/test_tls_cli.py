"""The command line and TLS: `router run` refuses a profile whose files do not load with one line
(exit 2); `router send` and `router receive` reach a TLS listener with --ssl-ca, and a mutual-TLS
one with --ssl-cert/--ssl-key (SASL EXTERNAL)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from .support.router_process import router_command, router_env
from .tlssupport import Pki, make_pki, serving

pytestmark = pytest.mark.process

TIMEOUT_S = 20.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


async def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(TIMEOUT_S):
        return await trio.run_process(router_command(*args), capture_stdout=True, capture_stderr=True, check=False,
                                      env=router_env())  # fmt: skip


async def test_run_refuses_a_profile_whose_files_do_not_load(pki: Pki, tmp_path: Path) -> None:
    config = {
        "ssl_profiles": [{"name": "site", "cert_file": pki.cert_file, "key_file": str(tmp_path / "gone.key")}],
        "listeners": [{"name": "amqps", "port": 0, "ssl_profile": "site"}],
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    result = await cli("run", "-c", str(path))
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "'site'" in lines[0] and "gone.key" in lines[0], lines


@pytest.mark.parametrize("mutual", [False, True], ids=["server-auth", "mutual-external"])
async def test_send_and_receive_over_tls(pki: Pki, mutual: bool) -> None:
    listener: dict[str, Any] = {"name": "amqps", "port": 0, "ssl_profile": "site"}
    client: list[str] = ["--ssl-ca", pki.ca_file]
    if mutual:
        listener.update(authenticate_peer=True, sasl_mechanisms=["EXTERNAL"], require_sasl=True)
        client += ["--ssl-cert", pki.client_cert, "--ssl-key", pki.client_key]
    config = {
        "router": {"id": "cli-tls"},
        "ssl_profiles": [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file, "ca_file": pki.ca_file}],
        "listeners": [listener],
    }
    async with serving(config) as server:
        bus = f"127.0.0.1:{server.listener_ports()['amqps']}"
        async with trio.open_nursery() as nursery:
            received: list[subprocess.CompletedProcess[bytes]] = []

            async def receive() -> None:
                received.append(await cli("receive", "tls-cli", "-b", bus, "-n", "3", "--timeout", "10", *client))

            nursery.start_soon(receive)
            sent = await cli("send", "tls-cli", "-b", bus, "-n", "3", "--timeout", "10", *client)
        assert sent.returncode == 0, sent.stderr
        assert b"accepted 3" in sent.stdout
        assert received[0].returncode == 0, received[0].stderr
        assert received[0].stdout.decode().count("message") == 3


async def test_a_client_without_the_ca_is_told_why(pki: Pki) -> None:
    config = {
        "ssl_profiles": [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file}],
        "listeners": [{"name": "amqps", "port": 0, "ssl_profile": "site"}],
    }
    async with serving(config) as server:
        result = await cli("send", "q", "-b", f"127.0.0.1:{server.listener_ports()['amqps']}", "--ssl-ca", "/nonexistent/ca.pem")
        assert result.returncode == 2 and b"cannot load the TLS files" in result.stderr
