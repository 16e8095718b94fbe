"""Timers and limits of the topology engine.

Owns: `TopologyConfig`, the protocol's tunables with the anchors' defaults (reference §3.2) and
unit-suffixed names like router/config (`hello_interval_s`). Must not touch: anything else; the
router's configuration schema maps its own fields onto this.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyConfig:
    """Protocol timers, in seconds (docs/mesh-protocol.md, "Timers")."""

    hello_interval_s: float = 1.0  # HELLO to each neighbour (helloIntervalSeconds)
    dead_interval_s: float = 3.0  # a neighbour silent this long is lost (helloMaxAgeSeconds)
    ra_interval_s: float = 30.0  # RA when stable (raIntervalSeconds)
    ra_interval_flux_s: float = 4.0  # RA while in flux (raIntervalFluxSeconds)
    flux_period_s: float = 8.0  # flux lasts this long after my own change (2 x the above)
    remote_ls_max_age_s: float = 60.0  # a router with no RA this long is removed (remoteLsMaxAge)
    request_retry_s: float = 2.0  # an unanswered LSR/MAR is sent again after this
    route_delay_s: float = 0.05  # routes are recomputed this long after the first change

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{f.name} must be a non-negative number of seconds: {value!r}")
            if value == 0 and f.name != "route_delay_s":
                raise ValueError(f"{f.name} must be positive")
        if self.dead_interval_s <= self.hello_interval_s:
            raise ValueError("dead_interval_s must be longer than hello_interval_s")
        # A router's RA is what keeps its link state alive elsewhere: with a shorter max age
        # every router would drop every other one between two adverts, and churn.
        if self.remote_ls_max_age_s <= self.ra_interval_s:
            raise ValueError("remote_ls_max_age_s must be longer than ra_interval_s")
