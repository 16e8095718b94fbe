"""Neighbour discovery: the HELLO side of the protocol (reference §3.2, HELLO).

Owns: the table of inter-router connections that are up, what each neighbour's HELLOs said (when
last heard, its instance, whether it lists me) and the dead timer. A neighbour is *two-way* when
its connection is up, it has been heard within its dead interval and its last HELLO listed my id;
only two-way neighbours go into my link state. Must not touch: link-state seqs (linkstate.py),
sending (node.py), I/O.

Dead interval: the configured `dead_interval_s`, stretched for a neighbour whose own hello
interval is longer than ours by the same ratio (so a router configured with a 5 s hello is not
declared dead by one using 1 s / 3 s). A dropped connection (`down`) removes a neighbour at once.
A neighbour this router does not read for now (`hold`: its HELLOs wait unread behind data the
router has no room for) is not judged: it stays as last heard.
A neighbour silent for its dead interval (or never heard within it after its connection came up)
is also reported once by `silent`: its connection is up but useless (a frozen router), and the
node's owner closes it (topology.events.NeighbourSilent).
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Hello


@dataclass(slots=True)
class Neighbour:
    """One inter-router connection that is up."""

    cost: int
    heard_at: float | None = None  # last HELLO received; None: not heard (or dead)
    # Since when this neighbour is unheard, while it is not heard: the connection came up (or
    # its dead interval passed) then. None once reported silent (until a HELLO is heard again).
    waiting_since: float | None = None
    dead_s: float = 0.0
    instance: int | None = None
    lists_me: bool = False

    def alive(self) -> bool:
        return self.heard_at is not None


class NeighbourTable:
    """Connected neighbours and their HELLO state."""

    def __init__(self, me: str, hello_interval_s: float, dead_interval_s: float) -> None:
        self.me = me
        self.hello_interval_s = hello_interval_s
        self.dead_interval_s = dead_interval_s
        self.connected: dict[str, Neighbour] = {}

    def up(self, neighbour_id: str, cost: int, now: float = float("-inf")) -> None:
        """A connection to `neighbour_id` is up (or its cost changed) at `now`."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ValueError(f"link cost must be a positive int: {cost!r}")
        if neighbour_id == self.me:
            raise ValueError("a router cannot be its own neighbour")
        current = self.connected.get(neighbour_id)
        if current is None:
            self.connected[neighbour_id] = Neighbour(cost=cost, dead_s=self.dead_interval_s, waiting_since=now)
        else:
            current.cost = cost

    def down(self, neighbour_id: str) -> bool:
        return self.connected.pop(neighbour_id, None) is not None

    def hello(self, neighbour_id: str, message: Hello, now: float) -> bool:
        """Record a HELLO; True when this neighbour was not heard before (or restarted): an
        immediate HELLO back then makes the link two-way in one round trip, not one interval."""
        neighbour = self.connected[neighbour_id]
        fresh = neighbour.heard_at is None or neighbour.instance != message.instance
        neighbour.heard_at = now
        neighbour.waiting_since = None
        neighbour.instance = message.instance
        neighbour.lists_me = self.me in message.seen
        ratio = self.dead_interval_s / self.hello_interval_s
        neighbour.dead_s = max(self.dead_interval_s, ratio * message.hello_interval_ms / 1000.0)
        return fresh

    def hold(self, neighbour_id: str, now: float) -> None:
        """This router is not reading `neighbour_id`'s connection now (backpressure: its owner
        holds too much from it): its HELLOs wait unread, so its silence would be ours. A heard
        neighbour stays heard, as if a HELLO came now; one not heard stays so."""
        neighbour = self.connected.get(neighbour_id)
        if neighbour is not None and neighbour.heard_at is not None and now > neighbour.heard_at:
            neighbour.heard_at = now

    def expire(self, now: float) -> bool:
        """Forget neighbours silent for longer than their dead interval; True if any were."""
        expired = False
        for neighbour in self.connected.values():
            # The same sum as next_expiry(): `now - heard_at >= dead_s` can be false at the
            # deadline by one rounding step, and a driver ticking at the deadline would spin.
            if neighbour.heard_at is not None and now >= neighbour.heard_at + neighbour.dead_s:
                neighbour.waiting_since = neighbour.heard_at
                neighbour.heard_at, neighbour.lists_me = None, False
                expired = True
        return expired

    def silent(self, now: float) -> list[tuple[str, float]]:
        """Neighbours whose connection is up but that have not been heard for their dead
        interval (since they were last heard, or since the connection came up), each reported
        once: (id, seconds silent)."""
        found = []
        for neighbour_id, n in self.connected.items():
            since = n.waiting_since
            if n.heard_at is None and since is not None and now >= since + n.dead_s:
                n.waiting_since = None
                found.append((neighbour_id, now - since))
        return found

    def next_expiry(self) -> float | None:
        first = None
        for n in self.connected.values():  # polled after every input: no list, no min()
            if n.heard_at is not None:
                t = n.heard_at + n.dead_s
            elif n.waiting_since is not None:
                t = n.waiting_since + n.dead_s
            else:
                continue
            if first is None or t < first:
                first = t
        return first

    def heard(self) -> tuple[str, ...]:
        """Ids to list in my HELLO: neighbours heard within their dead interval."""
        return tuple(sorted(rid for rid, n in self.connected.items() if n.alive()))

    def two_way(self) -> dict[str, int]:
        """My link state's peers: two-way neighbours and the cost I configure for each."""
        return {rid: n.cost for rid, n in sorted(self.connected.items()) if n.alive() and n.lists_me}
