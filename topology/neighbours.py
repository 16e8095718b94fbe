"""Neighbour discovery: the HELLO side of the protocol (reference §3.2, HELLO).

Owns: the table of inter-router connections that are up, what each neighbour's HELLOs said (when
last heard, its instance, whether it lists me) and the dead timer. A neighbour is *two-way* when
its connection is up, it has been heard within its dead interval and its last HELLO listed my id;
only two-way neighbours go into my link state. Must not touch: link-state seqs (linkstate.py),
sending (node.py), I/O.

Dead interval: the configured `dead_interval_s`, stretched for a neighbour whose own hello
interval is longer than ours by the same ratio (so a router configured with a 5 s hello is not
declared dead by one using 1 s / 3 s). A dropped connection (`down`) removes a neighbour at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Hello


@dataclass(slots=True)
class Neighbour:
    """One inter-router connection that is up."""

    cost: int
    heard_at: float | None = None  # last HELLO received; None: not heard (or dead)
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

    def up(self, neighbour_id: str, cost: int) -> None:
        """A connection to `neighbour_id` is up (or its cost changed)."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ValueError(f"link cost must be a positive int: {cost!r}")
        if neighbour_id == self.me:
            raise ValueError("a router cannot be its own neighbour")
        current = self.connected.get(neighbour_id)
        if current is None:
            self.connected[neighbour_id] = Neighbour(cost=cost, dead_s=self.dead_interval_s)
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
        neighbour.instance = message.instance
        neighbour.lists_me = self.me in message.seen
        ratio = self.dead_interval_s / self.hello_interval_s
        neighbour.dead_s = max(self.dead_interval_s, ratio * message.hello_interval_ms / 1000.0)
        return fresh

    def expire(self, now: float) -> bool:
        """Forget neighbours silent for longer than their dead interval; True if any were."""
        expired = False
        for neighbour in self.connected.values():
            # The same sum as next_expiry(): `now - heard_at >= dead_s` can be false at the
            # deadline by one rounding step, and a driver ticking at the deadline would spin.
            if neighbour.heard_at is not None and now >= neighbour.heard_at + neighbour.dead_s:
                neighbour.heard_at, neighbour.lists_me = None, False
                expired = True
        return expired

    def next_expiry(self) -> float | None:
        first = None
        for n in self.connected.values():  # polled after every input: no list, no min()
            if n.heard_at is not None:
                t = n.heard_at + n.dead_s
                if first is None or t < first:
                    first = t
        return first

    def heard(self) -> tuple[str, ...]:
        """Ids to list in my HELLO: neighbours heard within their dead interval."""
        return tuple(sorted(rid for rid, n in self.connected.items() if n.alive()))

    def two_way(self) -> dict[str, int]:
        """My link state's peers: two-way neighbours and the cost I configure for each."""
        return {rid: n.cost for rid, n in sorted(self.connected.items()) if n.alive() and n.lists_me}
