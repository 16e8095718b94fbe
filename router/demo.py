"""The router demo: a mesh of three routers, each a `router run` process on loopback.

    A ---1--- B ---1--- C          A's way to C: through B (cost 2), not the direct link (5)
    \\________5________/

Starts routers A, B and C at once (interior, the embedded defaults but for ephemeral ports and
an inter-router listener), then writes the connectors of the triangle above into their files and
has them applied by SIGHUP, without a restart (ports are ephemeral: a router's neighbours learn
its port only once it listens). It waits until the mesh has formed,
and shows it with the topology CLI's tables (routers, links, the least-cost tree, A's routes).
Then a receiver on C and a sender on A pass messages, every one with its outcome. Router B is
killed (SIGKILL) in the middle of a stream of messages: deliveries in flight through B come back
released (the sender learns each one's fate), A's route to C moves to the direct link, and the
traffic goes on along it. The survivors then stop with SIGTERM (exit 0). Under a minute; `--fast`
passes fewer messages (the test runs it).
Must not touch: anything of the routers' own (it is a client of them, over sockets).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import yaml
from rich.console import Console

from .amqp.message import Message
from .net.client import Receiver, Sender, SendTracker, connect
from .net.management_client import management_session

ROUTERS = ("A", "B", "C")
# (the router that dials, the one it dials, the link's cost); each dials routers started before it.
LINKS = (("B", "A", 1), ("C", "B", 1), ("C", "A", 5))
ADDRESS = "demo/orders"
START_TIMEOUT_S = 15.0
DEMO_TIMEOUT_S = 60.0  # the whole demo: it must never hang
POLL_S = 0.1  # asking a router's management again: there is no event across processes


@dataclass
class DemoResult:
    """What the demo saw: outcomes per phase and A's next hop to C before and after B died."""

    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    hop_before: str | None = None
    hop_after: str | None = None
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    elapsed_s: float = 0.0


class RouterProcess:
    """One `router run -c FILE` child process: its listeners' ports from its `listening` lines."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = directory
        self.ports: dict[str, int] = {}
        self.process: trio.Process | None = None

    async def start(self, config: dict[str, Any]) -> None:
        path = self.directory / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = (self.directory / f"{self.name}.log").open("w")
        command = [sys.executable, "-m", "router.cli.main", "run", "-c", str(path), "--log-level", "warning"]
        # Run from the demo's directory: `-m` puts the working directory first on the path, and
        # from a checkout that would be its interpreted sources instead of the installed build.
        self.process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=log, cwd=self.directory)
        log.close()
        assert self.process.stdout is not None
        buffer = b""
        with trio.fail_after(START_TIMEOUT_S):
            while len(self.ports) < len(config["listeners"]):
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    raise RuntimeError(f"router {self.name} exited before listening; see {self.name}.log")
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    words = line.decode().split()
                    if len(words) == 3 and words[0] == "listening":  # listening NAME amqp://HOST:PORT
                        self.ports[words[1]] = int(words[2].rsplit(":", 1)[1])

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Write a new configuration and have the running router apply it (SIGHUP)."""
        (self.directory / f"{self.name}.yaml").write_text(yaml.safe_dump(config))
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.kill()

    async def stop(self) -> int | None:
        """SIGTERM and wait (a router that does not stop in time is killed)."""
        if self.process is None:
            return None
        if self.running:
            self.process.terminate()
        with trio.move_on_after(10):
            return await self.process.wait()
        self.process.kill()
        return await self.process.wait()


def router_config(name: str, routers: dict[str, RouterProcess], *, linked: bool = True) -> dict[str, Any]:
    return {
        "router": {"id": name, "mode": "interior"},
        "listeners": [{"name": "amqp", "port": 0}, {"name": "inter", "port": 0, "role": "inter-router"}],
        "connectors": [
            {"name": f"to-{peer}", "host": "127.0.0.1", "port": routers[peer].ports["inter"], "cost": cost}
            for dialler, peer, cost in LINKS if dialler == name and linked
        ],
    }  # fmt: skip


async def network_from(port: int) -> Any:
    """The network as the router on `port` sees it (topology.cli.gather)."""
    from topology.cli.gather import gather

    async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
        return await gather(mgmt)


async def wait_for_route(port: int, destination: str, next_hop: str, reachable: set[str]) -> Any:
    """Until the router on `port` reaches every router in `reachable` and goes to `destination`
    through `next_hop`; returns the network it then reports."""
    while True:
        network = await network_from(port)
        seen = {rid for rid, info in network.routers.items() if info.reachable}
        routes = network.routes_of(network.bus)
        if reachable <= seen and routes.get(destination, (None,))[0] == next_hop:
            return network
        await trio.sleep(POLL_S)


def show(console: Console, title: str, network: Any, *, full: bool) -> None:
    from topology.cli import render

    console.rule(title)
    if full:
        console.print(render.routers_table(network))
        console.print(render.links_table(network))
        console.print(render.tree(network, network.bus))
    console.print(render.routes_table(network, network.bus))


async def accept_all(receiver: Receiver, seen: list[int]) -> None:
    while True:
        delivery = await receiver.receive()
        seen.append(1)
        receiver.accept(delivery)


async def outcomes_of(trackers: list[SendTracker]) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    for tracker in trackers:
        outcomes[type(await tracker.wait()).__name__] += 1
    return outcomes


async def send(sender: Sender, count: int, label: str) -> list[SendTracker]:
    return [await sender.start_send(Message.value(f"{label} {i}")) for i in range(count)]


def outcome_line(phase: str, outcomes: Counter[str]) -> str:
    parts = ", ".join(f"{n} {what.lower()}" for what, n in sorted(outcomes.items()))
    return f"[bold]{phase}[/]: {sum(outcomes.values())} sent, {parts}"


async def run_demo(count: int, console: Console, directory: Path) -> DemoResult:
    result = DemoResult()
    started = time.monotonic()
    routers = {name: RouterProcess(name, directory) for name in ROUTERS}
    try:
        with trio.fail_after(DEMO_TIMEOUT_S):
            # All three start at once, without connectors (the ports are ephemeral: nobody knows
            # the others' yet); then each file gets its connectors and SIGHUP applies it live.
            async with trio.open_nursery() as nursery:
                for name in ROUTERS:
                    nursery.start_soon(routers[name].start, router_config(name, routers, linked=False))
            for name in ROUTERS:
                console.print(f"router {name}: amqp://127.0.0.1:{routers[name].ports['amqp']} "
                              f"(inter-router on port {routers[name].ports['inter']})")  # fmt: skip
            for name in ROUTERS:
                routers[name].reconfigure(router_config(name, routers))
            console.print("connectors added to the files of B and C, applied by SIGHUP (no restart): "
                          + ", ".join(f"{a} -> {b} (cost {cost})" for a, b, cost in LINKS))  # fmt: skip
            a_port, c_port = routers["A"].ports["amqp"], routers["C"].ports["amqp"]
            network = await wait_for_route(a_port, "C", "B", set(ROUTERS))
            result.hop_before = network.routes_of("A")["C"][0]
            show(console, "the mesh, as router A sees it", network, full=True)
            async with connect("127.0.0.1", c_port) as consumer, connect("127.0.0.1", a_port) as producer:
                receiver = await consumer.open_receiver(ADDRESS, credit=100)
                seen: list[int] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(accept_all, receiver, seen)
                    sender = await producer.open_sender(ADDRESS)
                    console.rule(f"traffic: a sender on A, a receiver on C, address {ADDRESS}")
                    result.outcomes["through B"] = await outcomes_of(await send(sender, count, "via B"))
                    console.print(outcome_line("A -> B -> C", result.outcomes["through B"]))
                    # B dies in the middle of a stream of messages.
                    trackers = await send(sender, count // 2, "before the kill")
                    routers["B"].kill()
                    console.print("[bold red]router B killed[/] (SIGKILL) with messages in flight")
                    trackers += await send(sender, count // 2, "after the kill")
                    result.outcomes["B killed"] = await outcomes_of(trackers)
                    failed = sum(n for what, n in result.outcomes["B killed"].items() if what != "Accepted")
                    console.print(outcome_line("while B died", result.outcomes["B killed"])
                                  + " (not accepted: in flight through B when it died; the sender was told)")  # fmt: skip
                    network = await wait_for_route(a_port, "C", "C", {"A", "C"})
                    result.hop_after = network.routes_of("A")["C"][0]
                    show(console, "after B died: A goes to C directly", network, full=False)
                    result.outcomes["resent"] = await outcomes_of(await send(sender, failed, "resent"))
                    console.print(outcome_line("A -> C, the ones B lost, sent again", result.outcomes["resent"]))
                    result.outcomes["direct"] = await outcomes_of(await send(sender, count, "direct"))
                    console.print(outcome_line("A -> C", result.outcomes["direct"]))
                    nursery.cancel_scope.cancel()
            console.rule("stopping")
            for name, router in routers.items():
                result.exit_codes[name] = await router.stop()
            console.print(", ".join(f"{n}: exit {c}" + (" (killed)" if n == "B" else "") for n, c in result.exit_codes.items()))
    finally:
        for router in routers.values():
            router.kill()
            if router.process is not None:
                with trio.move_on_after(5):
                    await router.process.wait()
    result.elapsed_s = time.monotonic() - started
    console.print(f"demo finished in {result.elapsed_s:.1f} s")
    return result


DEFAULT_COUNT = 200
FAST_COUNT = 20


def demo(count: int = DEFAULT_COUNT, console: Console | None = None) -> int:
    """Run the demo in a temporary directory (the routers' configurations and logs); exit code 0
    when the traffic moved from B to the direct link and the survivors stopped cleanly."""
    with tempfile.TemporaryDirectory(prefix="router-demo-") as directory:
        result = trio.run(run_demo, count, console or Console(), Path(directory))
    moved = result.hop_before == "B" and result.hop_after == "C"
    return 0 if moved and result.exit_codes.get("A") == 0 and result.exit_codes.get("C") == 0 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--count", type=int, default=DEFAULT_COUNT, help="messages per phase")
    parser.add_argument("--fast", action="store_true", help=f"fewer messages ({FAST_COUNT} per phase)")
    args = parser.parse_args()
    raise SystemExit(demo(FAST_COUNT if args.fast else args.count))


if __name__ == "__main__":
    main()
