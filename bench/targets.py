"""The router suite's targets: each scenario's headline figure, the bound the project holds it
to, and whether a run met it. `python -m bench router` (and `make bench`) prints them after its
table and saves them with the results, so that a run says at once where it stands.

Owns: the targets (ratios are to the direct client-to-client ceiling measured in the same run)
and reading a result against them. Must not touch: running anything (scenarios.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    scenario: str  # a key of scenarios.run()'s result
    figure: str  # a key of that scenario's result
    at_least: bool  # True: the figure must be >= bound; False: <= bound
    bound: float
    what: str

    def met(self, value: float) -> bool:
        return value >= self.bound if self.at_least else value <= self.bound


TARGETS: tuple[Target, ...] = (
    Target("1_anycast_100b_unsettled", "ratio", True, 0.55, "1. 100 B unsettled, ratio to direct"),
    Target("1_anycast_100b_unsettled", "router_cpu_us_per_msg", False, 0.7, "1. router CPU per 100 B message, us"),
    Target("2_anycast_100b_presettled", "ratio", True, 0.55, "2. 100 B presettled, ratio to direct"),
    Target("3_anycast_10kib_unsettled", "ratio", True, 0.55, "3. 10 KiB unsettled, ratio to direct"),
    Target("4_pingpong_latency", "p50_ratio", False, 2.0, "4. ping-pong p50, router / direct"),
    Target("4_pingpong_latency", "busy_poll_p50_ratio", False, 2.0, "4b. the same, the router busy-polling (50 us)"),
    Target("4_pingpong_latency", "pinned_p50_ratio", False, 2.0,
           "4p. the same placed as the target says: router (default configuration) on a CPU of its own"),
    Target("5_idle_connections", "rss_per_connection_kib", False, 12.0, "5. idle connection, KiB"),
    Target("7_chain_of_3_100b_unsettled", "ratio", True, 0.18, "7. chain of 3, ratio to direct"),
    Target("8_multicast_1_to_2_100b_unsettled", "ratio", True, 0.30, "8. multicast 1 -> 2, ratio to 1 -> 1 direct"),
)


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target whose figure `results` has: what it is, the value, the bound, whether it was
    met (targets of scenarios not run are left out)."""
    found = []
    for target in TARGETS:
        value = results.get(target.scenario, {}).get(target.figure)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append({
                "target": target.what, "value": value, "bound": f"{'>=' if target.at_least else '<='} {target.bound:g}",
                "met": target.met(value),
            })  # fmt: skip
    return found
