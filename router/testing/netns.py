"""Hosts for multi-site tests: Linux network namespaces joined by veth pairs (root only).

    with Namespaces() as net:
        east = net.add("east")                        # a namespace with its loopback up
        wan = net.add("wan")
        net.link(east, "10.71.1.2", wan, "10.71.1.1")  # a veth pair, one address at each end
        net.hosts(east, {"west.example.net": "10.71.1.1"})  # its own /etc/hosts
        net.command(east)                             # prefix: ["ip", "netns", "exec", NAME]
        stream = await net.open_tcp_stream(east, "10.71.1.2", 5672)  # a socket inside `east`

Every name carries this process's id, so parallel runs do not meet, and everything made is
removed on exit (the namespaces, their veths with them, and /etc/netns/NAME). `available()`
says whether this machine can do it (root, `ip`, network namespaces).

Owns: namespaces, veths, per-namespace hosts files, and sockets opened inside a namespace (a
thread enters it with setns(2) and hands the connected socket to trio: a socket keeps the
namespace it was made in). Must not touch: the router.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from types import TracebackType

import trio

CLONE_NEWNET = 0x40000000
NETNS_RUN = Path("/var/run/netns")
NETNS_ETC = Path("/etc/netns")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@functools.cache
def available() -> str | None:
    """None when namespaces can be made here, else why not (for a skip reason)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    probe = f"probe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot make a network namespace ({getattr(exc, 'stderr', '') or exc})"
    return None


class Namespaces:
    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 100000}"
        self.names: list[str] = []
        self._veths = 0

    def add(self, short: str) -> str:
        name = f"t{self.tag}{short}"[:15]
        _ip("netns", "add", name)
        self.names.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def link(self, a: str, a_address: str, b: str, b_address: str, prefix: int = 24) -> tuple[str, str]:
        """A veth pair between namespaces `a` and `b`, with an address at each end; returns the
        two devices' names (in `a`, in `b`)."""
        self._veths += 1
        left, right = f"v{self.tag}a{self._veths}"[:15], f"v{self.tag}b{self._veths}"[:15]
        _ip("link", "add", left, "netns", a, "type", "veth", "peer", "name", right, "netns", b)
        for ns, dev, address in ((a, left, a_address), (b, right, b_address)):
            _ip("-n", ns, "addr", "add", f"{address}/{prefix}", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        return left, right

    def add_address(self, ns: str, device: str, address: str, prefix: int = 24) -> None:
        """Another address on `device` of `ns` (a second pod of one site, say)."""
        _ip("-n", ns, "addr", "add", f"{address}/{prefix}", "dev", device)

    def hosts(self, ns: str, names: dict[str, str]) -> None:
        """The namespace's /etc/hosts (`ip netns exec` mounts /etc/netns/NAME/hosts over it)."""
        directory = NETNS_ETC / ns
        directory.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", *(f"{address} {name}" for name, address in names.items())]
        (directory / "hosts").write_text("\n".join(lines) + "\n")

    def command(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    async def open_tcp_stream(self, ns: str, host: str, port: int) -> trio.SocketStream:
        """A TCP connection made inside namespace `ns` (from a thread that enters it)."""

        def connect() -> socket.socket:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(NETNS_RUN / ns) as handle:
                if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {ns} failed")
            return socket.create_connection((host, port), timeout=5)

        def in_own_thread() -> socket.socket:
            # A thread of its own (trio's worker threads are reused: one left inside a namespace
            # would resolve and connect there for every later caller); it ends with this call.
            result: list[socket.socket | BaseException] = []

            def run() -> None:
                try:
                    result.append(connect())
                except BaseException as exc:  # handed to the caller
                    result.append(exc)

            thread = threading.Thread(target=run, name=f"netns-{ns}", daemon=True)
            thread.start()
            thread.join()
            if isinstance(result[0], BaseException):
                raise result[0]
            return result[0]

        sock = await trio.to_thread.run_sync(in_own_thread)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

    def close(self) -> None:
        for name in reversed(self.names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
        self.names = []

    def __enter__(self) -> Namespaces:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
