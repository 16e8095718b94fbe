"""Pending LSR/MAR requests: aggregation on the way out, breadcrumbs for the way back.

Owns, for one kind of request (link state or mobile addresses): which targets I want for myself,
which neighbours asked me for which target (the breadcrumbs an answer follows back, hop by hop),
and when I last sent a request for each target (so that many requests for the same target
crossing one router leave it as one). Must not touch: deciding what is wanted (linkstate.py,
mobile.py), sending (node.py), I/O.

Why: the anchors route each LSR/MAR to the owner and each answer back to the requester, so a
change seen by N routers costs N round trips to one router, each as long as the path. Here an
answer comes from the first router on the path that holds a good enough copy, and requests that
meet on the way are merged: a change costs at most one request and one answer per router
(docs/mesh-protocol.md, "Requests").
"""

from __future__ import annotations

Key = tuple[int, int]  # (instance, seq): a copy at this point or later is wanted


class RequestTable:
    """Requests of one kind, per target router."""

    def __init__(self, retry_s: float) -> None:
        self.retry_s = retry_s
        self.wanted: set[str] = set()  # targets I want a copy of for myself
        self._crumbs: dict[str, dict[str, tuple[Key, float]]] = {}  # target -> asker -> (key, until)
        self._sent: dict[str, tuple[Key, float]] = {}  # target -> (key, when) of my last request

    def add_crumb(self, target: str, neighbour: str, key: Key, now: float) -> None:
        """`neighbour` asked for `target` at `key`: remember it until an answer or a timeout."""
        askers = self._crumbs.setdefault(target, {})
        old = askers.get(neighbour)
        askers[neighbour] = (max(key, old[0]) if old else key, now + 2 * self.retry_s)

    def take_crumbs(self, target: str, have: Key) -> list[str]:
        """Neighbours whose request `have` satisfies; they are forgotten."""
        askers = self._crumbs.get(target)
        if not askers:
            return []
        done = [n for n, (key, _) in askers.items() if key <= have]
        for neighbour in done:
            del askers[neighbour]
        if not askers:
            del self._crumbs[target]
        return done

    def should_send(self, target: str, key: Key, now: float) -> bool:
        """False while a request for `target` at `key` or later went out less than retry_s ago."""
        last = self._sent.get(target)
        return last is None or last[0] < key or now >= last[1] + self.retry_s

    def mark_sent(self, target: str, key: Key, now: float) -> None:
        self._sent[target] = (key, now)

    def forget(self, target: str) -> None:
        self.wanted.discard(target)
        self._crumbs.pop(target, None)
        self._sent.pop(target, None)

    def forget_neighbour(self, neighbour: str) -> None:
        for target in list(self._crumbs):
            self._crumbs[target].pop(neighbour, None)
            if not self._crumbs[target]:
                del self._crumbs[target]

    def expire(self, now: float) -> None:
        """Drop breadcrumbs past their time (the asker retries on its own) and old send marks."""
        for target in list(self._crumbs):
            askers = self._crumbs[target]
            for neighbour in [n for n, (_, until) in askers.items() if until <= now]:
                del askers[neighbour]
            if not askers:
                del self._crumbs[target]
        for target in [t for t, (_, when) in self._sent.items() if now >= when + self.retry_s]:
            del self._sent[target]
