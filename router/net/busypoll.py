"""How long the router busy-polls (router.busy_poll_us) and what it logs about it, at start or
by a reload: the value in force (the setting, or for `null`, the default, AUTO_US when the
router has a CPU of its own), that polling is on, and a warning when the process cannot afford
it (a CPU quota below one CPU, or a host with one CPU).

Why a default that looks at the placement: a request/response round trip through the router is
four wake-ups against two direct, and polling saves the router's two (bench/README.md "Busy
polling": 2.1-2.8x the direct round trip -> 0.7-0.8x with both clients on another CPU), but on
a CPU it shares, polling takes time from the others and spends a quota. A router that may run
on one CPU only, of a host with more, was given that CPU (taskset, systemd's CPUAffinity, a
Kubernetes Guaranteed pod with whole CPUs under the static CPU manager, which pins its
containers to CPUs of their own): there it polls unless a CPU quota below one CPU holds it.

Owns: reading the process's CPU quota (cgroup v2 `cpu.max`, else v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`) and affinity, the value in force and the advice. Must not touch: the
poller (router.net.poller polls).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

log = logging.getLogger("router.net.server")

CGROUP = Path("/sys/fs/cgroup")
AUTO_US: Final = 50  # for a router with a CPU of its own: 200 gained nothing more (bench/README.md)


def cpus_allowed() -> set[int]:
    """The CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        return set(range(os.cpu_count() or 1))


def in_force(configured: int | None, allowed: set[int], host_cpus: int, quota: float | None) -> tuple[int, str]:
    """The busy_poll_us to use, and why (for the log): the setting, or for None (auto) AUTO_US
    when the process may run on one CPU only, of a host with more, and no quota below one CPU
    holds it; else 0."""
    if configured is not None:
        return configured, "router.busy_poll_us"
    if len(allowed) != 1 or host_cpus < 2:
        return 0, "auto: the router shares its CPUs"
    (cpu,) = allowed
    if quota is not None and quota < 1.0:
        return 0, f"auto: pinned to CPU {cpu}, but under a CPU quota of {quota:g} CPUs"
    return AUTO_US, f"auto: pinned to CPU {cpu} of {host_cpus}, a CPU of its own; 0 turns it off"


def busy_poll_in_force(configured: int | None) -> tuple[int, str]:
    """in_force for this process."""
    return in_force(configured, cpus_allowed(), os.cpu_count() or 1, cpu_quota())


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


def log_busy_poll(busy_poll_us: int, why: str) -> None:
    """One line when busy polling is on, and a warning for each reason it should not be."""
    if busy_poll_us == 0:
        return
    log.info("busy polling: %d us of looking for work before each sleep (%s)", busy_poll_us, why)
    for warning in advice(busy_poll_us, cpu_quota(), os.cpu_count() or 1):
        log.warning("busy polling: %s", warning)
