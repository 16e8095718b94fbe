"""MeshHarness: several RouterCores in one process, wired back to back, no sockets, no tasks.

Routers are joined by inter-router connections made exactly as the network layer makes them:
one side's engine comes from `new_outgoing_engine` and is opened by `core.connect` (with a
Connector), the other is accepted by `core.accept` on an inter-router Listener. Clients are
plain engines as in RouterHarness. `pump()` moves bytes and events until everything is quiet;
`advance(seconds)` moves the virtual clock in steps, ticking every core whose deadline passed;
`converge()` advances until every router reaches every other and knows the same addresses.
`handle` is the hook through which every batch of events reaches a core: a harness that ends a
connection its core failed on overrides it and calls `drop`, as the network layer does.

    h = MeshHarness()
    h.router("A"); h.router("B"); h.link("A", "B", cost=1)
    h.converge()
    producer, consumer = h.client("A", "p"), h.client("B", "c")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from router.amqp.connection import Connection, ConnectionConfig
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.core.connections import new_engine, new_outgoing_engine
from router.core.router import RouterCore
from router.testing.routerharness import Client

CLIENTS = Listener(name="amqp", port=5672)
INTER_ROUTER = Listener(name="inter-router", port=5673, role="inter-router")
EDGE = Listener(name="edge", port=5674, role="edge")


@dataclass
class Wire:
    """Two engines back to back: each end belongs to a core or to a client."""

    a: Connection
    b: Connection
    a_core: RouterCore | None
    b_core: RouterCore | None
    a_client: Client | None = None
    b_client: Client | None = None
    name: str = ""

    def ends(self) -> tuple[tuple[Connection, Connection, RouterCore | None, Client | None], ...]:
        return ((self.a, self.b, self.b_core, self.b_client), (self.b, self.a, self.a_core, self.a_client))


class MeshHarness:
    def __init__(self, now: float = 1_000_000.0, **router: Any) -> None:
        self.now = now
        self.cores: dict[str, RouterCore] = {}
        self.wires: list[Wire] = []
        self.router_defaults = router
        self.taps: dict[int, list[Callable[[list[Any]], None]]] = {}  # id(core) -> event observers
        self.frozen: set[int] = set()  # id(core) of routers stopped (SIGSTOP): they read, write and tick nothing
        # id(engine) -> called with every chunk of bytes the engine writes (a recording of what it
        # sends: bench/fuzzseeds.py; a tap on the wire, as compiled engines cannot be subclassed)
        self.recorders: dict[int, Callable[[bytes], None]] = {}

    def tap(self, router_id: str, observer: Callable[[list[Any]], None]) -> None:
        """Call `observer` with every batch of events the router's engines hand to its core."""
        self.taps.setdefault(id(self.cores[router_id]), []).append(observer)

    # --- building the network ---------------------------------------------------------------

    def router(self, router_id: str, instance: int | None = None, mode: Literal["standalone", "interior", "edge"] = "interior", **config: Any) -> RouterCore:
        section = RouterSection(id=router_id, mode=mode, **self.router_defaults)
        config.setdefault("listeners", (CLIENTS, INTER_ROUTER, EDGE) if mode == "interior" else (CLIENTS,))
        core = RouterCore(RouterConfig(router=section, **config), instance=instance)
        self.cores[router_id] = core
        return core

    def link(
        self, a: str, b: str, cost: int = 1, b_cost: int | None = None, pump: bool = True, **settings: Any
    ) -> Wire:  # fmt: skip
        """An inter-router connection from `a` (connector, cost `cost`) to `b` (listener, cost
        `b_cost`, default the same). `settings`: connection settings of both ends (e.g.
        socket_buffer_bytes)."""
        core_a, core_b = self.cores[a], self.cores[b]
        connector = Connector(name=f"to-{b}", host="127.0.0.1", port=5673, cost=cost, **settings)
        listener = INTER_ROUTER.model_copy(update={"cost": b_cost if b_cost is not None else cost, **settings})
        engine_a = new_outgoing_engine(core_a.config, connector)
        engine_b = new_engine(core_b.config, listener)
        core_b.accept(engine_b, listener)
        core_a.connect(engine_a, connector, self.now)
        wire = Wire(engine_a, engine_b, core_a, core_b, name=f"{a}->{b}")
        self.wires.append(wire)
        if pump:
            self.pump()
        return wire

    def uplink(self, edge: str, interior: str, pump: bool = True) -> Wire:
        """An edge connection from edge router `edge` (connector, role edge) to `interior`."""
        core_e, core_i = self.cores[edge], self.cores[interior]
        connector = Connector(name=f"up-{interior}", host="127.0.0.1", port=5674, role="edge")
        engine_e = new_outgoing_engine(core_e.config, connector)
        engine_i = new_engine(core_i.config, EDGE)
        core_i.accept(engine_i, EDGE)
        core_e.connect(engine_e, connector, self.now)
        wire = Wire(engine_e, engine_i, core_e, core_i, name=f"{edge}=>{interior}")
        self.wires.append(wire)
        if pump:
            self.pump()
        return wire

    def client(self, router_id: str, name: str, listener: Listener = CLIENTS, **cfg: Any) -> Client:
        core = self.cores[router_id]
        router_side = new_engine(core.config, listener)
        core.accept(router_side, listener)
        engine = Connection(ConnectionConfig(container_id=name, **cfg))
        client = Client(name, engine, router_side)
        self.wires.append(Wire(engine, router_side, None, core, a_client=client, name=f"{name}@{router_id}"))
        engine.open()
        self.pump()
        client.session = engine.begin_session()
        self.pump()
        return client

    def wire_between(self, a: str, b: str) -> Wire:
        core_a, core_b = self.cores[a], self.cores[b]
        for wire in self.wires:
            if {id(wire.a_core), id(wire.b_core)} == {id(core_a), id(core_b)}:
                return wire
        raise KeyError(f"no connection between {a} and {b}")

    def cut(self, wire: Wire) -> None:
        """The TCP connection drops: both ends see end of stream at once."""
        self.wires.remove(wire)
        for engine, core, client in ((wire.a, wire.a_core, wire.a_client), (wire.b, wire.b_core, wire.b_client)):
            engine.receive_data(b"", self.now)
            events = engine.events()
            if core is not None:
                core.handle(engine, events, self.now)
            elif client is not None:
                client.on_events(events)
        self.pump()

    def kill(self, router_id: str) -> None:
        """A router dies: every connection to it drops."""
        core = self.cores.pop(router_id)
        for wire in [w for w in self.wires if core in (w.a_core, w.b_core)]:
            self.wires.remove(wire)
            for engine, other_core, client in ((wire.a, wire.a_core, wire.a_client), (wire.b, wire.b_core, wire.b_client)):
                if other_core is core:
                    continue
                engine.receive_data(b"", self.now)
                events = engine.events()
                if other_core is not None:
                    other_core.handle(engine, events, self.now)
                elif client is not None:
                    client.on_events(events)
        self.pump()

    def freeze(self, router_id: str) -> None:
        """The router stops (SIGSTOP): its connections stay open, but it reads, writes and ticks
        nothing; bytes sent to it wait."""
        self.frozen.add(id(self.cores[router_id]))

    def thaw(self, router_id: str) -> None:
        """The router runs again (SIGCONT): the bytes that waited for it can be read now."""
        self.frozen.discard(id(self.cores[router_id]))

    def handle(self, wire: Wire, core: RouterCore, engine: Connection, events: list[Any]) -> None:
        """A batch of events of `engine` (an end of `wire`) into its `core` (a subclass may end a
        connection the core failed on: `drop`)."""
        core.handle(engine, events, self.now)

    def drop(self, wire: Wire, engine: Connection) -> None:
        """The network layer ends `engine`'s connection (an end of `wire`) because its core
        failed on it: what the engine had left to write is never written, the core gets the end
        of stream and forgets the connection, and the other end sees the connection drop (a
        client's engine, or another router's: it loses its neighbour)."""
        self.wires.remove(wire)
        for _, end, core, client in wire.ends():
            end.receive_data(b"", self.now)
            events = end.events()
            if end is engine:
                assert core is not None
                try:  # (the network layer feeds the end of stream; the core may fail on it too)
                    core.handle(engine, events, self.now)
                except Exception:
                    pass
                core.forget(engine, self.now)
            elif core is not None:
                core.handle(end, events, self.now)
            elif client is not None:
                client.on_events(events)
        self.pump()

    # --- running ------------------------------------------------------------------------------

    def pump(self, rounds: int = 100_000) -> None:
        for _ in range(rounds):
            moved = False
            for wire in list(self.wires):
                for src, dst, dst_core, dst_client in wire.ends():
                    src_core = wire.a_core if src is wire.a else wire.b_core
                    if self.frozen and (id(dst_core) in self.frozen or id(src_core) in self.frozen):
                        continue
                    data = src.data_to_send()
                    if data:
                        moved = True
                        if self.recorders:
                            recorder = self.recorders.get(id(src))
                            if recorder is not None:
                                recorder(bytes(data))
                        dst.receive_data(data, self.now)
                    events = dst.events()
                    if events:
                        moved = True
                        if dst_core is not None:
                            for observer in self.taps.get(id(dst_core), ()):
                                observer(events)
                            self.handle(wire, dst_core, dst, events)
                            if wire not in self.wires:  # (dropped: its core failed on it)
                                break
                        elif dst_client is not None:
                            dst_client.on_events(events)
            for core in self.cores.values():
                core.take_touched()
                held = core.held_output
                if held and id(core) not in self.frozen:
                    # The wire takes every byte at once: as a network layer whose socket took
                    # all, release the next frames the core holds (router.core.holding).
                    for engine in list(held):
                        held.discard(engine)
                        core.set_output_blocked(engine, False, self.now)
                    moved = True
            if not moved:
                return
        raise AssertionError("mesh harness never went quiet")

    def advance(self, seconds: float, step: float = 0.001) -> None:
        """Move the clock by `seconds`, ticking every core when its deadline passes (a core
        whose deadline stays in the past moves the clock by `step` at most)."""
        end = self.now + seconds
        while True:
            running = [c for c in self.cores.values() if id(c) not in self.frozen]
            for core in running:
                deadline = core.next_deadline()
                if deadline is not None and deadline <= self.now:
                    core.tick(self.now)
            self.pump()
            if self.now >= end:
                return
            due = [d for d in (c.next_deadline() for c in running) if d is not None]
            nxt = min([end, *[d for d in due if d > self.now]])
            if any(d <= self.now for d in due):
                nxt = min(nxt, self.now + step)
            self.now = nxt

    def converged(self) -> bool:
        """Every router reaches every other, and all hold the same address -> routers table."""
        interiors = {rid: core for rid, core in self.cores.items() if not core.mesh.edge}
        ids = set(interiors)
        tables: list[dict[str, set[str]]] = []
        for rid, core in interiors.items():
            node = core.mesh.node
            if node is None:
                if len(ids) > 1:
                    return False
                tables.append({})
                continue
            if set(node.routes.reachable) != ids - {rid}:
                return False
            table = {a: set(r) for a, r in node.address_table().items()}
            for address in node.local_addresses:
                table.setdefault(address, set()).add(rid)
            tables.append(table)
        return all(t == tables[0] for t in tables)

    def converge(self, limit_s: float = 60.0) -> float:
        """Advance until converged; returns the virtual seconds it took."""
        start = self.now
        while not self.converged():
            if self.now - start > limit_s:
                raise AssertionError(f"no convergence in {limit_s} s: " + ", ".join(
                    f"{rid}: {sorted(c.mesh.routes.reachable)}" for rid, c in self.cores.items()))
            self.advance(0.25)
        return self.now - start
