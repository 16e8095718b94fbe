"""A mesh of interior routers as `router run` processes on loopback, for process tests.

    with MeshProcesses(tmp_path, "A-B B-C") as mesh:           # edges; "A-B:5" sets a cost
        await mesh.wait_converged()                             # every router reaches all others
        port = mesh.port("A")                                   # A's client listener
        mesh.kill("B"); mesh.restart("B")

Each router gets a client listener `amqp` and, when another router dials it, an inter-router
listener `inter`, both on 127.0.0.1 port 0. Routers start in the order they first appear; for
each edge the router that starts later dials the earlier one (a connector with the edge's
cost), so every connector's target is listening before it dials. After the first start each
configuration file is rewritten with the ports the router got, so a restarted router listens
where its neighbours redial (its id stays the same).
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import TracebackType
from typing import Any

import trio
import yaml

from router.net.client import connect
from router.net.management_client import management_session, node_address

from .processes import STOP_TIMEOUT_S, RouterProcess

NODE_TYPE = "org.apache.qpid.dispatch.router.node"


def parse_edges(spec: str) -> list[tuple[str, str, int]]:
    """'A-B B-C:3' -> [(A, B, 1), (B, C, 3)]."""
    edges = []
    for word in spec.split():
        pair, _, cost = word.partition(":")
        a, b = pair.split("-")
        edges.append((a, b, int(cost or 1)))
    return edges


class MeshProcesses:
    def __init__(self, directory: Path, edges: str, *, hello_interval_s: float = 0.2, dead_interval_s: float = 0.8,
                 extra: dict[str, dict[str, Any]] | None = None, inter_router: dict[str, Any] | None = None,
                 edge_routers: dict[str, list[str]] | None = None) -> None:  # fmt: skip
        self.directory = directory
        self.edges = parse_edges(edges)
        self.order: list[str] = []
        for a, b, _ in self.edges:
            for name in (a, b):
                if name not in self.order:
                    self.order.append(name)
        # Edge routers (mode edge) start after the interiors; each dials its interiors' `edge`
        # listeners, in the order given (one uplink is used at a time).
        self.edge_routers = edge_routers or {}
        self.interiors = list(self.order)
        for name in self.edge_routers:
            self.order.append(name)
        self.timers = {"hello_interval_s": hello_interval_s, "dead_interval_s": dead_interval_s}
        self.extra = extra or {}
        self.inter_router = inter_router or {}  # settings of every inter-router listener and connector
        self.processes: dict[str, RouterProcess] = {}
        self.ports: dict[str, dict[str, int]] = {}

    def _edge_config(self, name: str) -> dict[str, Any]:
        ports = self.ports.get(name, {})
        connectors = [
            {"name": f"up-{interior}", "host": "127.0.0.1", "port": self.ports[interior]["edge"], "role": "edge",
             "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0}
            for interior in self.edge_routers[name]
        ]  # fmt: skip
        config: dict[str, Any] = {
            "router": {"id": name, "mode": "edge", **self.timers},
            "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": ports.get("amqp", 0)}],
            "connectors": connectors,
        }
        config.update(self.extra.get(name, {}))
        return config

    def _config(self, name: str) -> dict[str, Any]:
        if name in self.edge_routers:
            return self._edge_config(name)
        dialled_by_later = any(
            (b == name and self.order.index(a) > self.order.index(b)) or (a == name and self.order.index(b) > self.order.index(a))
            for a, b, _ in self.edges
        )  # fmt: skip
        ports = self.ports.get(name, {})
        listeners: list[dict[str, Any]] = [{"name": "amqp", "host": "127.0.0.1", "port": ports.get("amqp", 0)}]
        if dialled_by_later:
            listeners.append({"name": "inter", "host": "127.0.0.1", "port": ports.get("inter", 0), "role": "inter-router",
                              **self.inter_router})  # fmt: skip
        if any(name in interiors for interiors in self.edge_routers.values()):
            listeners.append({"name": "edge", "host": "127.0.0.1", "port": ports.get("edge", 0), "role": "edge"})
        connectors = []
        for a, b, cost in self.edges:
            for me, other in ((a, b), (b, a)):
                if me == name and self.order.index(other) < self.order.index(me):
                    connectors.append({
                        "name": f"to-{other}", "host": "127.0.0.1", "port": self.ports[other]["inter"], "cost": cost,
                        "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0, **self.inter_router,
                    })  # fmt: skip
        config: dict[str, Any] = {
            "router": {"id": name, "mode": "interior", **self.timers},
            "listeners": listeners,
            "connectors": connectors,
        }
        for key, value in self.extra.get(name, {}).items():
            config[key] = value
        return config

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.yaml"

    def start(self) -> None:
        for name in self.order:
            self._path(name).write_text(yaml.safe_dump(self._config(name)))
            process = RouterProcess(self._path(name), listeners=len(self._config(name)["listeners"]))
            self.ports[name] = process.start()
            self.processes[name] = process
            # Fixed ports from now on: a restart listens where the neighbours redial.
            self._path(name).write_text(yaml.safe_dump(self._config(name)))

    def port(self, name: str) -> int:
        return self.ports[name]["amqp"]

    def kill(self, name: str) -> None:
        """SIGKILL: the router dies without closing anything (its neighbours see the sockets drop)."""
        self.processes[name].kill()

    def stop(self, name: str) -> int:
        return self.processes[name].stop(signal.SIGTERM, STOP_TIMEOUT_S)

    def restart(self, name: str) -> None:
        process = RouterProcess(self._path(name), listeners=len(self._config(name)["listeners"]))
        process.start()
        self.processes[name] = process

    def output(self, name: str) -> str:
        return self.processes[name].output

    async def nodes(self, name: str) -> list[dict[str, Any]]:
        """The router.node entities of router `name` (the routers it knows)."""
        async with connect("127.0.0.1", self.port(name)) as client, management_session(client) as mgmt:
            return await mgmt.query_dicts(NODE_TYPE)

    async def wait_converged(self, routers: list[str] | None = None, timeout_s: float = 15.0) -> None:
        """Until each of `routers` (default: all running) has a next hop to every other one."""
        names = routers or [
            n for n, p in self.processes.items() if n in self.interiors and p.proc is not None and p.proc.poll() is None
        ]
        with trio.fail_after(timeout_s):
            while True:
                done = True
                for name in names:
                    known = {row["id"] for row in await self.nodes(name) if row.get("nextHop")}
                    if not set(names) - {name} <= known:
                        done = False
                        break
                if done:
                    return
                await trio.sleep(0.1)  # polling management: there is no event to wait for across processes

    async def ask(self, via: str, router_id: str, type: str) -> list[dict[str, Any]]:
        """Query `type` on `router_id` through router `via` (management across the mesh)."""
        async with connect("127.0.0.1", self.port(via)) as client, management_session(client) as mgmt:
            return await mgmt.query_dicts(type, address=node_address(router_id))

    def close(self) -> None:
        failures = []
        for name, process in self.processes.items():
            if process.proc is not None and process.proc.poll() is None:
                code = process.stop()
                if code != 0:
                    failures.append(f"{name} exited with {code}:\n{process.output}")
            process.kill()
        assert not failures, "\n".join(failures)

    def __enter__(self) -> MeshProcesses:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            # Which routers had already died, and the routers' own account (pytest shows it
            # beside the traceback).
            codes = {name: process.proc.poll() if process.proc else None for name, process in self.processes.items()}
            for process in self.processes.values():
                process.kill()
            for name, process in self.processes.items():
                print(f"--- router {name}: {'running' if codes[name] is None else f'exited {codes[name]}'}")
                print(process.output)
