"""A deterministic in-process network of TopologyNodes: a virtual clock, links with a delay, and
switches to lose, drop, rewrite or inject messages. No sockets, no threads, no real time.

Every control message crosses a link as bytes (`encode_body` / `decode_body`), as it would on an
inter-router connection; `codec=False` passes the message objects instead (the bench uses it to
build large networks quickly). Links are FIFO: a message is delivered `delay` seconds after it
was sent, and a link that goes down loses what is in flight (a new connection starts empty).

    net = Network()
    net.add("A"); net.add("B"); net.link("A", "B", cost=2)
    net.run_until_converged()
    assert net.node("A").routes.next_hops == {"B": "B"}

Routers are named by their id; `add(name, router_id=...)` gives two routers one id (a
configuration error the protocol must report). The clock only moves forward, to the next
message or node deadline. `problems()` says why the network has not converged yet
(topology_converged.py); `rounds` counts the longest chain of control messages since
`reset_rounds()` (bench/topology.py). The links and the traffic counters are in topology_links.py.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

from topology.codec import MalformedMessage, decode_body, encode_body
from topology.config import TopologyConfig
from topology.graph import LinkState
from topology.messages import ControlMessage, Hello, Unsupported
from topology.node import TopologyNode

from .topology_converged import ConvergenceCheck
from .topology_links import Link, Stats


class Network:
    """Routers and links on a virtual clock (seconds, starting at 0)."""

    def __init__(self, config: TopologyConfig | None = None, *, delay: float = 0.001, seed: int = 0,
                 codec: bool = True) -> None:  # fmt: skip
        self.config = config or TopologyConfig()
        self.delay = delay
        self.codec = codec
        self.now = 0.0
        self.rng = random.Random(seed)
        self.stats = Stats()
        self.nodes: dict[str, TopologyNode] = {}
        self.links: dict[frozenset[str], Link] = {}
        self._adjacent: dict[str, dict[str, Link]] = {}
        self._events: dict[str, list[Any]] = {}  # name -> every event taken from the node
        self._order = itertools.count()
        self._queue: list[tuple[float, int, str, str, int, int, Any]] = []  # messages in flight
        self._timers: list[tuple[float, int, str, int]] = []  # (deadline, n, name, epoch)
        self._epoch: dict[str, int] = {}  # bumped when a router is replaced (restart)
        self._instances = itertools.count(1)
        # Causal depth: a message sent by a router is one more than the deepest it received
        # (HELLOs aside); `rounds` = the deepest delivered since reset_rounds().
        self._depth: dict[str, int] = {}
        self.rounds = 0
        self.addresses: dict[str, set[str]] = {}  # name -> the local addresses it should have
        self._convergence = ConvergenceCheck()  # problems(): keeps the routes the truth gives

    # --- building ------------------------------------------------------------------------------

    def add(self, name: str, *, router_id: str | None = None, instance: int | None = None,
            addresses: Iterable[str] = ()) -> TopologyNode:  # fmt: skip
        """A new router (not yet linked); `addresses` are its local mobile addresses."""
        if name in self.nodes:
            raise ValueError(f"router {name} exists")
        node = TopologyNode(router_id or name, next(self._instances) if instance is None else instance, self.config)
        self.nodes[name] = node
        self._adjacent.setdefault(name, {})
        self._events.setdefault(name, [])
        self._epoch[name] = self._epoch.get(name, 0) + 1
        self.addresses[name] = set()
        self.set_addresses(name, added=addresses)
        return node

    def set_addresses(self, name: str, added: Iterable[str] = (), removed: Iterable[str] = ()) -> None:
        """Consumers for `added` appeared at router `name`, the last ones for `removed` went."""
        added, removed = list(added), list(removed)
        self.nodes[name].set_local_addresses(added=added, removed=removed)
        self.addresses[name] |= set(added)
        self.addresses[name] -= set(removed)
        self._after(name)

    def link(self, a: str, b: str, cost: int = 1, cost_b: int | None = None, *, delay: float | None = None) -> Link:
        """Connect a and b (a's end configures `cost`, b's end `cost_b`, default the same)."""
        key = frozenset((a, b))
        if key in self.links:
            raise ValueError(f"{a}-{b} already linked")
        link = Link(a, b, cost, cost if cost_b is None else cost_b, self.delay if delay is None else delay)
        self.links[key] = link
        self._adjacent[a][b] = self._adjacent[b][a] = link
        self._connect(link)
        return link

    def build(self, text: str, *, delay: float | None = None) -> None:
        """Routers and links from ASCII art (router/testing/topology_art.py syntax, two-way only)."""
        from .topology_art import parse_topology

        states = parse_topology(text)
        for name in sorted(states):
            if name not in self.nodes:
                self.add(name)
        for a, state in sorted(states.items()):
            for b, cost in state.peers.items():
                if a < b:
                    self.link(a, b, cost, states[b].peers[a], delay=delay)

    def _connect(self, link: Link) -> None:
        link.up, link.generation = True, link.generation + 1
        for name in (link.a, link.b):
            peer = link.other(name)
            self.nodes[name].neighbour_up(self.nodes[peer].router_id, link.cost(name), now=self.now)
            self._after(name)

    # --- switches ------------------------------------------------------------------------------

    def get_link(self, a: str, b: str) -> Link:
        return self.links[frozenset((a, b))]

    def cut(self, a: str, b: str) -> None:
        """The connection drops: both ends learn at once, messages in flight are lost."""
        link = self.get_link(a, b)
        if link.up:
            link.up = False
            for name in (a, b):
                self.nodes[name].neighbour_down(self.nodes[link.other(name)].router_id, now=self.now)
                self._after(name)

    def restore(self, a: str, b: str) -> None:
        link = self.get_link(a, b)
        if not link.up:
            self._connect(link)

    def unlink(self, a: str, b: str) -> None:
        self.cut(a, b)
        link = self.links.pop(frozenset((a, b)))
        del self._adjacent[link.a][link.b], self._adjacent[link.b][link.a]

    def restart(self, name: str, *, instance: int | None = None, addresses: Iterable[str] = ()) -> TopologyNode:
        """Replace a router by a new instance of it: its connections drop and come back."""
        old = self.nodes[name]
        links = [link for link in self._adjacent[name].values() if link.up]
        for link in links:
            self.cut(link.a, link.b)
        del self.nodes[name]
        node = self.add(name, router_id=old.router_id, instance=instance, addresses=addresses)
        for link in links:
            self._connect(link)
        return node

    def inject(self, sender: str, receiver: str, body: bytes | ControlMessage | Unsupported) -> None:
        """Deliver `body` to `receiver` as if `sender` (a linked neighbour) had sent it now."""
        link = self.get_link(sender, receiver)
        self._push(self.now, sender, receiver, link.generation, 0, body)

    # --- running -------------------------------------------------------------------------------

    def reset_rounds(self) -> None:
        """Count protocol rounds from now: the longest chain of control messages (HELLOs aside),
        each sent in reaction to the one before, delivered from here on."""
        self._depth.clear()
        self.rounds = 0

    def _after(self, name: str) -> None:
        """After any call into a node: put its output on the links, re-arm its timer."""
        node = self.nodes[name]
        for to, message in node.take_outgoing():
            if to is None:
                peers = [p for p, link in self._adjacent[name].items() if link.up]
            else:
                peers = [p for p, link in self._adjacent[name].items() if self.nodes[p].router_id == to]
            for peer in peers:
                self._send(name, peer, message)
        self._events[name].extend(node.take_events())
        deadline = node.next_deadline()
        if deadline < math.inf:
            heapq.heappush(self._timers, (deadline, next(self._order), name, self._epoch[name]))

    def _send(self, sender: str, receiver: str, message: ControlMessage) -> None:
        link = self._adjacent[sender][receiver]
        self.stats.sent += 1
        self.stats.by_opcode[message.OPCODE] = self.stats.by_opcode.get(message.OPCODE, 0) + 1
        if not link.up or (link.drop is not None and link.drop(sender, receiver, message)):
            self.stats.lost += 1
            return
        if link.loss and self.rng.random() < link.loss:
            self.stats.lost += 1
            return
        if link.rewrite is not None:
            message = link.rewrite(sender, receiver, message)
        body = encode_body(message) if self.codec else message
        depth = 0 if isinstance(message, Hello) else self._depth.get(sender, 0) + 1
        self._push(self.now + link.delay, sender, receiver, link.generation, depth, body)

    def _push(self, when: float, sender: str, receiver: str, generation: int, depth: int, body: Any) -> None:
        heapq.heappush(self._queue, (when, next(self._order), sender, receiver, generation, depth, body))

    def next_time(self) -> float:
        t_msg = self._queue[0][0] if self._queue else math.inf
        t_tick = self._timers[0][0] if self._timers else math.inf
        return max(self.now, min(t_msg, t_tick))

    def step(self) -> bool:
        """Deliver the next message or run the next timer; False when nothing is left."""
        t_msg = self._queue[0][0] if self._queue else math.inf
        t_tick = self._timers[0][0] if self._timers else math.inf
        if t_msg == t_tick == math.inf:
            return False
        if t_msg <= t_tick:
            when, _, sender, receiver, generation, depth, body = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            link = self._adjacent[sender].get(receiver)
            if link is None or not link.up or link.generation != generation:
                self.stats.lost += 1
                return True
            if isinstance(body, bytes):
                try:
                    message: ControlMessage | Unsupported = decode_body(body)
                except MalformedMessage:
                    self.stats.malformed += 1
                    return True
            else:
                message = body
            self.stats.delivered += 1
            if depth > self._depth.get(receiver, 0):
                self._depth[receiver] = depth
                self.rounds = max(self.rounds, depth)
            self.nodes[receiver].receive(self.nodes[sender].router_id, message, self.now)
            self._after(receiver)
            return True
        deadline, _, name, epoch = heapq.heappop(self._timers)
        node = self.nodes.get(name)
        if node is None or epoch != self._epoch[name] or node.next_deadline() != deadline:
            return True  # a stale timer: the node was called since and re-armed
        self.now = max(self.now, deadline)
        self.stats.ticks += 1
        node.tick(self.now)
        self._after(name)
        return True

    def run_for(self, seconds: float) -> None:
        self.run_until_time(self.now + seconds)

    def run_until_time(self, end: float) -> None:
        while self.next_time() <= end and self.step():
            pass
        self.now = max(self.now, end)

    def run_until(self, predicate: Callable[[], bool], limit: float = 60.0, check_every: float = 0.0) -> float:
        """Run until `predicate()` holds (checked when the clock is about to move on, at most
        once per `check_every`); returns the time it held. AssertionError after `limit` s."""
        end = self.now + limit
        checked = -math.inf
        while True:
            upcoming = self.next_time()
            # Check once every event of this instant is handled, before the clock jumps past
            # the next check time (so the time returned is never late by a whole jump).
            if upcoming > self.now and upcoming >= checked + check_every:
                checked = self.now
                if predicate():
                    return self.now
            if self.now > end or not self.step():
                if predicate():
                    return self.now
                raise AssertionError(f"not reached within {limit} s (now {self.now:.3f})")

    def run_until_converged(self, limit: float = 60.0, check_every: float = 0.002) -> float:
        try:
            return self.run_until(lambda: not self.problems(limit=1), limit, check_every)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.problems()}") from None

    # --- what the network should look like --------------------------------------------------

    def truth(self) -> dict[str, LinkState]:
        """Every router's own link state, by router id (the input all copies must converge to)."""
        return {node.router_id: node.link_state for node in self.nodes.values()}

    def problems(self, names: Iterable[str] | None = None, limit: int = 5) -> list[str]:
        """Why the network has not converged (empty when it has): for each router, the link
        states of its partition, its routes and its address table must match the truth."""
        return self._convergence.problems(self.truth(), self.nodes, self._adjacent, self.addresses, names, limit)

    def events(self, name: str, kind: type | None = None) -> list[Any]:
        """Events the router reported so far (of one type)."""
        return [e for e in self._events[name] if kind is None or isinstance(e, kind)]

    def node(self, name: str) -> TopologyNode:
        return self.nodes[name]
