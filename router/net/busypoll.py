"""What the router logs about busy polling (router.busy_poll_us) when it is set, at start or by a
reload: that it is on, and a warning when the process cannot afford it (a CPU quota below one
CPU, or a host with one CPU).

Owns: reading the process's CPU quota (cgroup v2 `cpu.max`, else v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`) and the advice. Must not touch: the poller (router.net.poller polls).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("router.net.server")

CGROUP = Path("/sys/fs/cgroup")


def cpu_quota(root: Path = CGROUP) -> float | None:
    """CPUs' worth of time the process's cgroup may use (e.g. 0.5), or None without a quota."""
    try:
        quota, _, period = (root / "cpu.max").read_text().strip().partition(" ")
        return None if quota == "max" else int(quota) / int(period or "100000")
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us < 0 else quota_us / period_us
    except (OSError, ValueError, ZeroDivisionError):
        return None


def advice(busy_poll_us: int, quota: float | None, host_cpus: int) -> list[str]:
    """Why busy polling would cost more than it saves here (empty: nothing against it). A router
    pinned to one CPU of its own (taskset, or a Kubernetes Guaranteed pod under the static CPU
    manager) is the case polling is for; a quota of a whole CPU or more never throttles a router
    that polls on one thread. What hurts: a quota below one CPU, and a host with one CPU, where
    nothing else runs while the router polls."""
    if busy_poll_us == 0:
        return []
    found = []
    if quota is not None and quota < 1.0:
        found.append(
            f"the router runs under a CPU quota of {quota:g} CPUs: busy polling spends it, and a throttled router "
            "waits for the next quota period; set router.busy_poll_us to 0 or give the router a whole CPU"
        )
    if host_cpus < 2:
        found.append(
            "this host has one CPU: while the router polls nothing else runs on it (a client here cannot "
            "answer); set router.busy_poll_us to 0"
        )
    return found


def log_busy_poll(busy_poll_us: int) -> None:
    """One line when busy polling is on, and a warning for each reason it should not be."""
    if busy_poll_us == 0:
        return
    log.info("busy polling: %d us of looking for work before each sleep (router.busy_poll_us)", busy_poll_us)
    for warning in advice(busy_poll_us, cpu_quota(), os.cpu_count() or 1):
        log.warning("busy polling: %s", warning)
