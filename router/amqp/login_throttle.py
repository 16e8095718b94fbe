"""A host's repeated failed logins, answered later and later (`LoginThrottle`).

Owns: how long a failed login's outcome is held back, the bounded table of failing hosts, and the
counts management reads (failures, delayed). Used by the AMQP listeners (SASL outcomes) and the
HTTP face's logins alike.
Must not touch: the SASL exchange (sasl.py), checking credentials, the clock, where the delay is
waited out (the connection engine's deadline, the HTTP face).
"""

from __future__ import annotations


class LoginThrottle:
    """Slows down repeated failed logins from one host (sans-IO: time comes in as `now`).

    The first failure from a host is answered at once; each further failure within
    `forget_after_s` of the previous one waits twice as long before its sasl-outcome, from
    `initial_delay_s` up to `max_delay_s`. A success forgets the host. The table of hosts is
    bounded (`max_hosts`, the oldest failures go first), so a flood of hosts costs bounded
    memory; a delay holds back only the failing connection's outcome (the engine's deadline),
    never another connection or the router.
    """

    __slots__ = ("initial_delay_s", "max_delay_s", "forget_after_s", "max_hosts", "_hosts",
                 "failures", "delayed")  # fmt: skip

    def __init__(self, initial_delay_s: float = 0.25, max_delay_s: float = 4.0,
                 forget_after_s: float = 60.0, max_hosts: int = 4096) -> None:  # fmt: skip
        self.initial_delay_s = initial_delay_s
        self.max_delay_s = max_delay_s
        self.forget_after_s = forget_after_s
        self.max_hosts = max_hosts
        # host -> (failures in a row, when the last one was answered); insertion order is the
        # order of the last failure (a host is moved to the end on each), oldest first.
        self._hosts: dict[str, tuple[int, float]] = {}
        self.failures = 0  # failed logins (management)
        self.delayed = 0  # of those, the ones whose outcome was held back

    def failed(self, host: str, now: float) -> float:
        """A login from `host` failed at `now`: how long to hold back its outcome (seconds)."""
        self.failures += 1
        previous = self._hosts.pop(host, None)
        count = 0
        if previous is not None and now - previous[1] <= self.forget_after_s + self.max_delay_s:
            count = previous[0]
        delay = 0.0 if count == 0 else min(self.initial_delay_s * 2 ** min(count - 1, 32), self.max_delay_s)
        while len(self._hosts) >= self.max_hosts:
            del self._hosts[next(iter(self._hosts))]
        self._hosts[host] = (count + 1, now + delay)
        if delay > 0:
            self.delayed += 1
        return delay

    def succeeded(self, host: str) -> None:
        self._hosts.pop(host, None)

    @property
    def hosts(self) -> int:
        """Hosts remembered for their failures now."""
        return len(self._hosts)
