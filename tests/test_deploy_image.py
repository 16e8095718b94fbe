"""The router image (`make image`, deploy/Containerfile): two containers form a mesh over the
image's own configuration path and pass messages with outcomes. Skips, saying why, when no
container engine is installed, the image has not been built, or the engine cannot start a
container here (e.g. no permission to set resource limits in a nested container). Where it
cannot, a second test still runs the image's content: its compiled router as the image's user,
chrooted into the image's file system (needs root and podman).
"""

from __future__ import annotations

import os
import shutil
import socket
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


# Where the host forbids setrlimit, podman's runtimes fail on the limits podman always sets;
# this runtime drops them (deploy/image/runc-without-rlimits, needs runc).
NO_RLIMITS_RUNTIME = ROOT / "deploy" / "image" / "runc-without-rlimits"


@pytest.fixture(scope="module")
def container_engine() -> list[str]:
    tool = engine()
    if run(tool, "image", "inspect", IMAGE).returncode != 0:
        pytest.skip(f"image {IMAGE} is not built (make image)")
    command = [tool]
    probe = run(*command, "run", "--rm", "--network=none", IMAGE, "version")
    if probe.returncode != 0 and "setrlimit" in probe.stderr and Path(tool).name == "podman" and shutil.which("runc"):
        command = [tool, "--runtime", str(NO_RLIMITS_RUNTIME)]
        probe = run(*command, "run", "--rm", "--network=none", IMAGE, "version")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"{Path(tool).name} cannot start a container here: {last}")
    assert probe.stdout.strip() == VERSION
    return command


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
def pod(container_engine: list[str], tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Routers A and B in one pod (one network namespace): B dials A's inter-router port."""
    name = f"router-smoke-{uuid.uuid4().hex[:8]}"
    created = run(*container_engine, "pod", "create", "--name", name, "-p", "127.0.0.1::5672", "-p", "127.0.0.1::5673")
    assert created.returncode == 0, created.stderr
    try:
        for router_id, port, listen, dial in (("A", 5672, True, None), ("B", 5673, False, 55671)):
            path = tmp_path / f"{router_id}.yaml"
            path.write_text(config(router_id, port, listen_mesh=listen, dial=dial))
            path.chmod(0o644)
            started = run(*container_engine, "run", "-d", "--pod", name, "--name", f"{name}-{router_id}",
                          "-v", f"{path}:/etc/router/router.yaml:ro,Z", IMAGE)
            assert started.returncode == 0, started.stderr
        ports = run(*container_engine, "pod", "inspect", name, "--format", "{{json .InfraConfig.PortBindings}}")
        bindings = yaml.safe_load(ports.stdout)
        yield int(bindings["5672/tcp"][0]["HostPort"]), int(bindings["5673/tcp"][0]["HostPort"])
    finally:
        logs = run(*container_engine, "logs", f"{name}-A").stderr
        run(*container_engine, "pod", "rm", "--force", "--time", "10", name)
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


async def pass_messages(port_a: int, port_b: int) -> None:
    """A and B have formed a mesh; 20 messages sent to A reach a consumer on B, each accepted."""
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
        assert "accepted 20" in sent.stdout
        out, err = receiver.communicate(timeout=30)
        assert receiver.returncode == 0, err
        assert "received 20 message(s)" in out
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


async def test_two_containers_mesh_and_pass_messages(pod: tuple[int, int]) -> None:
    await pass_messages(*pod)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def image_root(tmp_path: Path) -> Iterator[Path]:
    """The image's file system, writable (a created, never started container), for hosts where
    the engine cannot start containers: the routers run from it with chroot, as the image's user."""
    tool = shutil.which("podman")
    if tool is None or os.geteuid() != 0 or shutil.which("chroot") is None:
        pytest.skip("needs podman and root (chroot into the image's file system)")
    if run(tool, "image", "inspect", IMAGE).returncode != 0:
        pytest.skip(f"image {IMAGE} is not built (make image)")
    name = f"router-fs-{uuid.uuid4().hex[:8]}"
    assert run(tool, "create", "--name", name, IMAGE).returncode == 0
    try:
        mounted = run(tool, "mount", name)
        assert mounted.returncode == 0, mounted.stderr
        yield Path(mounted.stdout.strip())
    finally:
        run(tool, "umount", name)
        run(tool, "rm", name)


async def test_the_image_file_system_runs_a_mesh(image_root: Path) -> None:
    """The image's compiled router, as uid 10001, on host loopback: two routers mesh and pass
    messages (the network is the host's; what this proves is the image's content)."""
    port_a, port_b, mesh = free_port(), free_port(), free_port()
    for router_id, port, listen, dial in (("A", port_a, True, None), ("B", port_b, False, mesh)):
        text = config(router_id, port, listen_mesh=listen, dial=dial).replace("0.0.0.0", "127.0.0.1")
        (image_root / "tmp" / f"{router_id}.yaml").write_text(text.replace("port: 55671", f"port: {mesh}"))
    compiled = run("chroot", "--userspec=10001:10001", str(image_root), "/opt/router/bin/python", "-I", "-c",
                   "import router.core.router as m; print(m.__file__)")
    assert compiled.stdout.strip().endswith(".so"), compiled
    processes = [
        subprocess.Popen(["chroot", "--userspec=10001:10001", str(image_root), "/opt/router/bin/router", "run", "-c",
                          f"/tmp/{router_id}.yaml"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for router_id in ("A", "B")
    ]
    try:
        await pass_messages(port_a, port_b)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                code = process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            output = process.stdout.read() if process.stdout else ""
            assert code == 0, output
