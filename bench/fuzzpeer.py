"""Fuzzing what a peer router sends (bench/fuzz.py --peer router|edge|uplink; the suite's
tests/test_fuzz_mesh_peer.py): one connection per input to the fuzzed router of
bench/fuzzseeds.py, and what it must not keep once the connection is gone.

    target = PeerTarget("router")             # or "edge", "uplink"
    inputs = PeerInputs(random.Random(1), [interior_session()])   # bench/fuzzpeerinputs.py
    error = target.run(inputs.next())         # the exception out of the engine or core, or None
    problems = target.held()                  # what the core still holds for it ([]: nothing)

Each input is a list of reads (seconds since the connection came, bytes): the recorded rounds of
a seed, mutated, or all of it regrouped into one to three reads. The clock moves to each read's
time (the core ticked at its deadlines on the way), the standing clients run between reads,
then the stream ends. After it (`held`), with the clock moved past the route computation and
the age at which a router's link state is forgotten: the connection, its peer or uplink, its
neighbour in the topology, routes and routers learnt from it, address-table entries and their
remote destinations, link-route pairs and routes it advertised, held frames and links, and a
footprint of every container the core reaches must be as they were before the first input; the
standing producer's deliveries must all have their outcome (none has a destination any more).
"""


from __future__ import annotations

import ast
import random
import re
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from router.amqp.connection import Connection
from router.amqp.decode import decode_at
from router.amqp.performatives import Close, SaslOutcome
from router.core.connections import new_engine, new_outgoing_engine
from router.testing.meshharness import EDGE, INTER_ROUTER
from router.testing.wire import split_stream
from topology.routes import Routes

from .fuzzpeerinputs import PeerInputs
from .fuzzseeds import UPLINK, FuzzedMesh, Reads, fuzzed_mesh

SETTLE_S = 70.0  # past remote_ls_max_age_s (60): a router's link state is forgotten by then
DEADLINES_MAX = 200  # ticks per step of the clock; more: a deadline that never moves on


# --- the fuzzed router -----------------------------------------------------------------------------


# Not walked: engines (their own fuzzer checks them), computed routes (a value replaced whole;
# what they reach is checked by name), and what is bounded by design whoever fills it: the
# mesh's log of the node's last 256 events, the node's counters (by opcode), the memos of the
# address table (address -> key) and of the paths (choices under the current routes, cleared
# when links change), the failed logins by host (router.amqp.login_throttle).
SKIPPED = (Connection, Routes)
SKIPPED_NAMES = frozenset(("Mesh.events", "TopologyNode.counters", "AddressTable._keys", "Paths.anycast",
                           "Paths.multicast", "Paths.local", "LoginThrottle._hosts"))  # fmt: skip
# An edge router keeps the link routes its last uplink said the mesh serves once it is gone (an
# attach is refused, no container reachable: router.core.uplinks); the next uplink's set
# replaces them. Bounded by what one uplink said, they are not counted as held.
UPLINK_KEPT = frozenset(("Uplinks.route_keys", "LinkRoutes.remote_routes", "LinkRoutes.remote"))


def footprint(root: Any, skipped: frozenset[str] = SKIPPED_NAMES, depth: int = 9) -> dict[str, int]:
    """The length of every container reachable from `root` through the router's objects
    (attributes of instances of router.* and topology.* classes), by path: what a connection
    that is gone may have left behind."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: str, left: int) -> None:
        if id(obj) in seen or left == 0:
            return
        seen.add(id(obj))
        if isinstance(obj, (dict, list, set, frozenset, deque, tuple)):
            sizes[path] = sizes.get(path, 0) + len(obj)
            items = obj.values() if isinstance(obj, dict) else obj
            for n, item in enumerate(items):
                if n >= 1000:
                    break
                walk(item, f"{path}[]", left - 1)
            return
        module = type(obj).__module__
        if not (module.startswith("router.") or module.startswith("topology.")) or isinstance(obj, SKIPPED):
            return
        names = list(getattr(obj, "__dict__", {}))
        for cls in type(obj).__mro__:
            names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
        kind = type(obj).__name__
        for name in names:
            if f"{kind}.{name}" in skipped:
                continue
            value = getattr(obj, name, None)
            if value is not None and not isinstance(value, (str, bytes, int, float, bool)):
                walk(value, f"{path}.{name}", left - 1)

    walk(root, type(root).__name__, depth)
    return sizes


def _closed_with(output: bytes) -> str:
    """How the router's last output ended the connection: its close's condition."""
    pieces = split_stream(output)
    last = pieces[-1] if pieces else b""
    if len(last) > 8 and last[:4] != b"AMQP":
        try:
            performative, _ = decode_at(last, last[4] * 4, len(last))
        except Exception:  # noqa: BLE001
            return "ended (no close)"
        if isinstance(performative, Close):
            error = performative.error
            return f"closed: {error.condition if error is not None else 'no error'}"
        if isinstance(performative, SaslOutcome):
            return f"SASL outcome {performative.code}"
    return "ended (no close)"


class PeerTarget:
    """The fuzzed router of bench.fuzzseeds and one connection per input: accepted on its
    inter-router (`router`) or edge (`edge`) listener, or (`uplink`: the fuzzed router is an
    edge router) its uplink to the peer."""

    def __init__(self, kind: str, warm_up: Reads | None = None) -> None:
        """`warm_up`: an input run once before the footprint is taken (what one ordinary
        session leaves for the rest of the router's life: the route container's session for
        routed links)."""
        self.kind = kind
        self.mesh: FuzzedMesh = fuzzed_mesh(edge=kind == "uplink")
        self.h = self.mesh.h
        self.core = self.mesh.core
        self.listener = {"router": INTER_ROUTER, "edge": EDGE, "uplink": None}[kind]
        self.engine: Connection | None = None
        self.stuck = 0  # deadlines that did not move on after a tick
        self.stats: Counter[str] = Counter()  # how far inputs got, how their connections ended
        refuse = self.core.forwarder._refuse  # (deliveries refused, by reason: counted)

        def counted(inl: Any, delivery_id: int, settled: bool, more: bool, condition: str, description: str) -> None:
            self.stats[f"delivery refused: {description.split(':')[0]}"] += 1
            refuse(inl, delivery_id, settled, more, condition, description)

        try:
            self.core.forwarder._refuse = counted  # type: ignore[method-assign]
        except AttributeError:  # a compiled core's methods stay as they are: refusals not counted by reason
            pass
        if warm_up is not None:
            error = self.run(warm_up)
            assert error is None, error
        self.settle()
        self.standing = set(self.core.connections)
        self.keys = set(self.core.table.entries)
        self.skipped = SKIPPED_NAMES | UPLINK_KEPT if kind == "uplink" else SKIPPED_NAMES
        self.base = footprint(self.core, self.skipped)

    def connection(self) -> Connection:
        core, now = self.core, self.h.now
        if self.listener is None:
            engine = new_outgoing_engine(core.config, UPLINK)
            core.connect(engine, UPLINK, now)
        else:
            engine = new_engine(core.config, self.listener)
            core.accept(engine, self.listener)
        engine.data_to_send()
        return engine

    def run(self, reads: Reads) -> BaseException | None:
        """One input on a connection of its own; the exception out of the engine or the core,
        if any (the connection is then forgotten, as the server does)."""
        h, core = self.h, self.core
        start = h.now
        engine = self.engine = self.connection()
        peered = False
        last = b""
        try:
            for at, data in reads:
                self.advance(start + at)
                engine.receive_data(data, h.now)
                core.handle(engine, engine.events(), h.now)
                last = engine.data_to_send() or last
                state = core.connections.get(engine)
                peered = peered or (state is not None and state.peer is not None)
                h.pump(10_000)
            engine.receive_data(b"", h.now)  # the stream ends, as the server feeds it
            core.handle(engine, engine.events(), h.now)
            last = engine.data_to_send() or last
            h.pump(10_000)
        except Exception as exc:  # noqa: BLE001 - what we are looking for
            core.forget(engine, h.now)  # as the server does (router.net.corepump)
            try:
                h.pump(10_000)
            except AssertionError:  # (never quiet: reported as the input's failure already)
                pass
            return exc
        finally:
            self.stats["peer set up"] += peered
            self.stats[_closed_with(last)] += 1
        return None

    def advance(self, to: float) -> None:
        """The clock to `to`, the core ticked at each deadline on the way."""
        h, core = self.h, self.core
        for _ in range(DEADLINES_MAX):
            deadline = core.next_deadline()
            if deadline is None or deadline > to:
                break
            before = h.now
            h.now = max(h.now, deadline)
            core.tick(h.now)
            h.pump(10_000)
            after = core.next_deadline()
            if after is not None and after <= before:
                self.stuck += 1
                break
        h.now = max(h.now, to)

    def settle(self) -> None:
        """Past the route computation, then past the age of a router's link state (one late
        tick for all the timers on the way, as after a pause of the router), and the route
        computation that follows."""
        h = self.h
        self.advance(h.now + 0.2)
        h.now += SETTLE_S
        self.core.tick(h.now)
        h.pump(10_000)
        self.advance(h.now + 0.2)

    def held(self, deep: bool = True) -> list[str]:
        """What the core still holds for the connection of the last input (after settling the
        clock); [] when nothing. `deep`: the footprint too."""
        core, mesh = self.core, self.core.mesh
        problems = []
        if self.engine is not None and self.engine in core.connections:
            problems.append("its connection")
        elif set(core.connections) != self.standing:
            problems.append(f"connections: {len(core.connections)} (standing {len(self.standing)})")
        relay = core.link_routes.relay
        for name, held in (("peers", mesh.peers), ("data links", mesh.links), ("edges", mesh.edges.edges),
                           ("uplinks", mesh.edges.uplinks), ("band links", mesh.paths.bands),
                           ("link-route pairs", core.link_routes.pairs), ("held output", core.held_output),
                           ("held links", core.forwarder.held_links), ("held routed links", relay.held_links),
                           ("silent neighbours", mesh.liveness.silent)):  # fmt: skip
            if held:
                problems.append(f"{name}: {sorted(map(str, held))[:5]}")
        self.settle()
        node = mesh.node
        if node is not None:
            if node.neighbours:
                problems.append(f"neighbours: {dict(node.neighbours)}")
            if node.routers():
                problems.append(f"routers known: {sorted(node.routers())[:5]}")
            if node.address_table():
                problems.append(f"remote addresses: {sorted(node.address_table())[:5]}")
        if mesh.routes.reachable:
            problems.append(f"routes: {sorted(mesh.routes.reachable)[:5]}")
        if mesh.edges.active is not None:
            problems.append(f"active uplink: {mesh.edges.active}")
        if core.link_routes.remote_routes and self.kind != "uplink":
            problems.append(f"remote link routes: {sorted(core.link_routes.remote_routes)[:5]}")
        keys = set(core.table.entries)
        if keys != self.keys:
            problems.append(f"address table: +{sorted(keys - self.keys)[:5]} -{sorted(self.keys - keys)[:5]}")
        remote = [e.key for e in core.table.entries.values() if e.remote]
        if remote:
            problems.append(f"remote destinations: {remote[:5]}")
        for client in self.mesh.clients:  # (no destination left: each must have its outcome)
            if client.unsettled:
                problems.append(f"{client.name}: {len(client.unsettled)} deliveries without an outcome")
        if deep:
            now = footprint(core, self.skipped)
            grown = {p: (self.base.get(p, 0), n) for p, n in now.items() if n > self.base.get(p, 0)}
            if grown:
                problems.append("grown: " + ", ".join(f"{p} {a}->{b}" for p, (a, b) in sorted(grown.items())[:8]))
        return problems

    def rebase(self) -> None:
        """What is held now is the new normal (after reporting it: later inputs report only
        what they add)."""
        self.keys = set(self.core.table.entries)
        self.base = footprint(self.core, self.skipped)
        self.standing = set(self.core.connections) - {self.engine}


# --- the run ----------------------------------------------------------------------------------------

DEEP_EVERY = 50  # inputs between two footprints (a footprint costs about one input)
SLOW_S = 1.0  # an input that takes longer is saved (most take 2-5 ms)


def _save(where: Path, name: str, reads: Reads, text: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.reads").write_text(repr(reads))  # ast.literal_eval gives the reads back
    (where / f"{name}.txt").write_text(text)


def load_reads(path: Path) -> Reads:
    """An input saved by a run (`crash-N.reads`, `held-N.reads`)."""
    reads: Reads = ast.literal_eval(path.read_text())
    return reads


def run_peer(args: Any, refield: Callable[[bytes], bytes], good_client: Callable[[Any, Any], Any]) -> int:
    """bench/fuzz.py --peer router|edge|uplink: `args.inputs` inputs from `args.seed`; crashes and
    inputs that left something held saved under `args.crashes`. `refield`: the client fuzzer's
    performative field mutation; `good_client(core, config)`: its well-behaved client."""
    from .fuzzseeds import edge_session, interior_session, uplink_session

    seed = {"router": interior_session, "edge": edge_session, "uplink": uplink_session}[args.peer]()
    target = PeerTarget(args.peer, seed)
    good = good_client(target.core, target.core.config)
    good.send(target.h.now)  # (its first message and outcome make what its session keeps)
    target.settle()
    target.rebase()
    inputs = PeerInputs(random.Random(args.seed), [seed], refield)
    crashes: dict[str, int] = {}
    held: dict[str, int] = {}
    recent: deque[Reads] = deque(maxlen=DEEP_EVERY)
    slow, slowest = 0, 0.0
    start = time.perf_counter()
    for n in range(1, args.inputs + 1):
        reads = inputs.next()
        recent.append(reads)
        began = time.perf_counter()
        error = target.run(reads)
        took = time.perf_counter() - began
        slowest = max(slowest, took)
        if took > SLOW_S:  # (inputs of some 75 KB: work out of proportion to them)
            _save(args.crashes, f"slow-{slow}", reads, f"{took:.2f} s")
            print(f"slow {slow} (input {n}): {took:.2f} s", flush=True)
            slow += 1
        if error is not None:
            where = traceback.extract_tb(error.__traceback__)[-1]
            key = f"{type(error).__name__} at {Path(where.filename).name}:{where.lineno}"
            if key not in crashes:
                _save(args.crashes, f"crash-{len(crashes)}", reads, "".join(traceback.format_exception(error)))
                print(f"crash {len(crashes)}: {key} (input {n})", flush=True)
            crashes[key] = crashes.get(key, 0) + 1
        deep = n % DEEP_EVERY == 0
        problems = target.held(deep=deep)
        if problems:
            culprit = reads
            if deep and len(problems) == 1 and problems[0].startswith("grown"):
                culprit = _culprit(args.peer, seed, list(recent)) or reads
            key = re.sub(r"[0-9]+", "N", "; ".join(problems))[:200]
            if key not in held:
                _save(args.crashes, f"held-{len(held)}", culprit, "\n".join(problems))
                print(f"held {len(held)} (input {n}): {'; '.join(problems)[:300]}", flush=True)
            held[key] = held.get(key, 0) + 1
            target.rebase()
        if n % GOOD_EVERY == 0:
            good.send(target.h.now)
        if n % args.report_every == 0 or n == args.inputs:
            elapsed = time.perf_counter() - start
            standing = ", ".join(f"{c.name} {c.got + c.outcomes_seen}" for c in target.mesh.clients)
            print(f"{n:>9,} inputs  {n / elapsed:8,.0f}/s  crashes {sum(crashes.values())}  held {sum(held.values())}  "
                  f"stuck deadlines {target.stuck}  slow {slow} (slowest {slowest * 1000:.0f} ms)  good {good.sent} sent, {good.received} received, "
                  f"{good.accepted} accepted  standing: {standing}", flush=True)  # fmt: skip
    good.pump(target.h.now)
    mesh = target.core.mesh
    reached = dict(mesh.node.counters.received) if mesh.node is not None else {}
    print(f"reached: {dict(target.stats)}; control messages taken by the topology: {reached}; malformed control "
          f"messages: {mesh.malformed_control}; deliveries dropped for a loop in their trace: {mesh.dropped_loop}",
          flush=True)  # fmt: skip
    ok = not crashes and not held and not target.stuck and not slow and good.received == good.sent == good.accepted
    print(("OK" if ok else "FAILED") + f": {args.inputs:,} inputs ({args.peer}), {sum(crashes.values())} crashes, "
          f"{sum(held.values())} held")  # fmt: skip
    return 0 if ok else 1


GOOD_EVERY = 1000


def _culprit(kind: str, seed: Reads, recent: list[Reads]) -> Reads | None:
    """The first of `recent` that leaves the footprint grown on a fresh target, if one does alone."""
    target = PeerTarget(kind, seed)
    for reads in recent:
        target.run(reads)
        if target.held():
            return reads
    return None
