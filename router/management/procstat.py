"""This process's figures as the operating system reports them, read in constant time.

Owns: `process_figures()` (virtual and resident size, start time, CPU seconds, open and maximum
file descriptors, from /proc/self), the figures the `memory` entity and /metrics show under
the names Prometheus's client library gives them (process_*), which dashboards expect.
Why not the client library's collector: it counts open descriptors by listing /proc/self/fd,
one entry per connection: ~8 ms at 10,000 connections, every connection waiting while a
monitor polls. Linux (6.2 and later) gives the count as the size of that directory, read by
one stat(); older kernels report 0 there, and the listing is the fallback.
Must not touch: anything of the router's (plain reads of /proc).
"""

from __future__ import annotations

import os
import resource
from typing import Final

_PROC: Final = "/proc/self"
_PAGE_BYTES: Final = resource.getpagesize()


def _ticks_per_second() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100.0


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


_TICKS: Final = _ticks_per_second()
_BOOT: Final = _boot_time()


def open_fds() -> int | None:
    """Open file descriptors of this process (None where /proc is not there)."""
    try:
        size = os.stat(_PROC + "/fd").st_size
        if size > 0:  # the count itself (Linux 6.2 and later)
            return size
        return len(os.listdir(_PROC + "/fd")) - 1  # (less the listing's own descriptor)
    except OSError:
        return None


def _max_fds() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def process_figures() -> dict[str, float]:
    """{Prometheus name: value} of the figures this platform gives (none without /proc, save
    the descriptor limit)."""
    figures: dict[str, float] = {}
    try:
        with open(_PROC + "/stat", "rb") as stat:
            # After the command's closing parenthesis (a command may contain spaces or one):
            # field 3 (state) is parts[0], so field N is parts[N - 3] (proc(5)).
            parts = stat.read().rsplit(b")", 1)[-1].split()
        figures["process_virtual_memory_bytes"] = float(parts[20])
        figures["process_resident_memory_bytes"] = float(parts[21]) * _PAGE_BYTES
        if _BOOT is not None:
            figures["process_start_time_seconds"] = float(parts[19]) / _TICKS + _BOOT
        figures["process_cpu_seconds_total"] = (float(parts[11]) + float(parts[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        pass
    fds = open_fds()
    if fds is not None:
        figures["process_open_fds"] = float(fds)
    most = _max_fds()
    if most is not None:
        figures["process_max_fds"] = float(most)
    return figures


# (name, kind, help) of each figure, as Prometheus's client library describes them.
PROCESS_FAMILIES: Final = (
    ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
    ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
    ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds."),
    ("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds."),
    ("process_open_fds", "gauge", "Number of open file descriptors."),
    ("process_max_fds", "gauge", "Maximum number of open file descriptors."),
)
