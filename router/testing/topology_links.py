"""The links of the simulated network (topology_sim.py) and the counters of what it carried.

Owns: `Link` (one connection between two routers: each end's configured cost, a one-way delay,
whether it is up, and the switches that lose, drop or rewrite the messages sent on it), the types
of those switches (`Filter`, `Rewrite`) and `Stats` (messages sent, delivered, lost and malformed,
by opcode, and timer ticks). Must not touch: delivery, the clock and the routers: the Network of
topology_sim.py applies the switches and counts; this module only holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from topology.messages import ControlMessage

Filter = Callable[[str, str, ControlMessage], bool]  # (sender name, receiver name, message)
Rewrite = Callable[[str, str, ControlMessage], ControlMessage]


@dataclass
class Link:
    """A connection between two routers: each end's configured cost, a one-way delay and the
    switches. `drop` and `rewrite` see every message sent on the link while it is up."""

    a: str
    b: str
    cost_a: int
    cost_b: int
    delay: float
    up: bool = True
    loss: float = 0.0  # probability of losing each message (seeded)
    drop: Filter | None = None
    rewrite: Rewrite | None = None
    generation: int = 0  # bumped when the connection is re-established

    def other(self, name: str) -> str:
        return self.b if name == self.a else self.a

    def cost(self, name: str) -> int:
        return self.cost_a if name == self.a else self.cost_b


@dataclass
class Stats:
    sent: int = 0  # messages put on a link
    delivered: int = 0
    lost: int = 0  # by loss, drop or a link going down
    malformed: int = 0  # bodies the receiver could not decode
    ticks: int = 0
    by_opcode: dict[str, int] = field(default_factory=dict)
