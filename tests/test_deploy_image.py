"""The router image (`make image`, deploy/Containerfile): two containers form a mesh over the
image's own configuration path and pass messages with outcomes. Skips, saying why, when no
container engine is installed, the image has not been built, or the engine cannot start a
container here (e.g. no permission to set resource limits in a nested container)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from router.net.client import connect
from router.net.management_client import management_session

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = os.environ.get("ROUTER_IMAGE", f"localhost/amqp-mesh-router:{VERSION}")
NODE_TYPE = "org.apache.qpid.dispatch.router.node"
ADDRESS_TYPE = "org.apache.qpid.dispatch.router.address"

pytestmark = pytest.mark.process


def engine() -> str:
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if path is not None and subprocess.run([path, "info"], capture_output=True, timeout=30).returncode == 0:
            return path
    pytest.skip("no working container engine (podman or docker)")


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def container_engine() -> str:
    tool = engine()
    if run(tool, "image", "inspect", IMAGE).returncode != 0:
        pytest.skip(f"image {IMAGE} is not built (make image)")
    probe = run(tool, "run", "--rm", "--network=none", IMAGE, "version")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"{Path(tool).name} cannot start a container here: {last}")
    assert probe.stdout.strip() == VERSION
    return tool


def config(router_id: str, client_port: int, *, listen_mesh: bool, dial: int | None) -> str:
    listeners = [{"name": "amqp", "host": "0.0.0.0", "port": client_port}]
    if listen_mesh:
        listeners.append({"name": "inter-router", "host": "127.0.0.1", "port": 55671, "role": "inter-router"})
    connectors = [] if dial is None else [{"name": "a", "host": "127.0.0.1", "port": dial, "role": "inter-router"}]
    return yaml.safe_dump({
        "router": {"id": router_id, "mode": "interior", "hello_interval_s": 0.2, "dead_interval_s": 0.8},
        "listeners": listeners, "connectors": connectors,
    })


@pytest.fixture
def pod(container_engine: str, tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Routers A and B in one pod (one network namespace): B dials A's inter-router port."""
    name = f"router-smoke-{uuid.uuid4().hex[:8]}"
    created = run(container_engine, "pod", "create", "--name", name, "-p", "127.0.0.1::5672", "-p", "127.0.0.1::5673")
    assert created.returncode == 0, created.stderr
    try:
        for router_id, port, listen, dial in (("A", 5672, True, None), ("B", 5673, False, 55671)):
            path = tmp_path / f"{router_id}.yaml"
            path.write_text(config(router_id, port, listen_mesh=listen, dial=dial))
            path.chmod(0o644)
            started = run(container_engine, "run", "-d", "--pod", name, "--name", f"{name}-{router_id}",
                          "-v", f"{path}:/etc/router/router.yaml:ro,Z", IMAGE)
            assert started.returncode == 0, started.stderr
        ports = run(container_engine, "pod", "inspect", name, "--format", "{{json .InfraConfig.PortBindings}}")
        bindings = yaml.safe_load(ports.stdout)
        yield int(bindings["5672/tcp"][0]["HostPort"]), int(bindings["5673/tcp"][0]["HostPort"])
    finally:
        logs = run(container_engine, "logs", f"{name}-A").stderr
        run(container_engine, "pod", "rm", "--force", "--time", "10", name)
        print(logs[-2000:])


async def wait_for(port: int, type: str, found: Callable[[dict[str, Any]], bool]) -> None:
    """Until router `port` has an entity of `type` for which `found` holds."""
    with trio.fail_after(30):
        while True:
            try:
                async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
                    if any(found(row) for row in await mgmt.query_dicts(type)):
                        return
            except OSError:
                pass  # the container is still starting
            await trio.sleep(0.2)  # polling management across processes: no event to wait for


async def test_two_containers_mesh_and_pass_messages(pod: tuple[int, int]) -> None:
    port_a, port_b = pod
    await wait_for(port_a, NODE_TYPE, lambda row: row["id"] == "B" and bool(row.get("nextHop")))
    router = [sys.executable, "-m", "router.cli.main"]
    receiver = subprocess.Popen([*router, "receive", "smoke", "-b", f"127.0.0.1:{port_b}", "-n", "20", "--timeout", "20",
                                 "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A knows B's consumer before anything is sent (else the messages would be released).
        await wait_for(port_a, ADDRESS_TYPE, lambda row: row.get("address") == "smoke" and row.get("remoteCount", 0) > 0)
        sent = await trio.to_thread.run_sync(lambda: run(*router, "send", "smoke", "-b", f"127.0.0.1:{port_a}", "-n", "20",
                                                         "--timeout", "20"))
        assert sent.returncode == 0, sent.stderr
        assert "accepted" in sent.stdout
        out, err = receiver.communicate(timeout=30)
        assert receiver.returncode == 0, err
        assert "20" in out
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
