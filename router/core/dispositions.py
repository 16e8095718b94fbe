"""Dispositions the router owes its peers, batched into ranges (transport §2.7.6).

Owns: collecting, per session, role and settled flag, the outcomes decided while one batch of
input is handled, and writing them as few disposition frames as possible when the batch ends.
Outcomes mostly arrive in delivery-id order with the same state (a consumer accepting a range),
so they are kept as runs: the next id of a run with the same state extends it, with no
per-delivery object; anything out of order is sorted and merged at flush. A session's batches
hang on its SessionMaps and are reused batch after batch: an outcome at low load (one per
batch) costs no key, no hashing and no new batch.
Must not touch: which outcome a delivery gets (settlement.py).
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import i64

from ..amqp.endpoints import ACTIVE
from ..amqp.session import Session
from .delivery import maps_of


class DispositionBatch:
    """The pending dispositions of one (session, role, settled): finished runs in a list (made
    when the first run ends: a lone outcome, the common case at low load, allocates none), the
    run being extended in plain attributes (the common add touches nothing else)."""

    __slots__ = ("session", "role", "settled", "runs", "ordered", "run_first", "run_last", "run_state", "pending")

    def __init__(self, session: Session, role: bool, settled: bool) -> None:
        self.session = session
        self.role = role
        self.settled = settled
        self.runs: list[tuple[int, int, Any]] | None = None  # finished (first, last, state) runs
        self.ordered = True  # every run starts after the previous one ends
        self.run_first: i64 = -1  # -1: no run yet
        self.run_last: i64 = -1
        self.run_state: Any = None
        self.pending = False  # among the Dispositions' batches to take

    def _clear(self) -> None:
        self.runs = None
        self.ordered = True
        self.run_first = self.run_last = -1
        self.run_state = None

    def add(self, delivery_id: i64, state: Any) -> None:
        last = self.run_last
        if delivery_id == last + 1 and last >= 0:
            previous = self.run_state
            if state is previous or state == previous:
                self.run_last = delivery_id
                return
        elif delivery_id <= last:
            self.ordered = False
        if last >= 0:
            runs = self.runs
            if runs is None:
                runs = self.runs = []
            runs.append((self.run_first, last, self.run_state))
        self.run_first = self.run_last = delivery_id
        self.run_state = state

    def ranges(self) -> list[tuple[int, int, Any]]:
        """(first, last, state) ranges covering every delivery added, in delivery-id order."""
        runs = [] if self.runs is None else list(self.runs)
        if self.run_last >= 0:
            runs.append((self.run_first, self.run_last, self.run_state))
        if self.ordered:
            return runs
        # Out of order: the same runs, rebuilt from every delivery in id order. A delivery added
        # twice keeps its latest state: a repeated id would be out of order again (no end).
        latest = {delivery_id: state for first, last, state in runs for delivery_id in range(first, last + 1)}
        rebuilt = DispositionBatch(self.session, self.role, self.settled)
        for delivery_id, state in sorted(latest.items(), key=_delivery_id):
            rebuilt.add(delivery_id, state)
        return rebuilt.ranges()

    def write(self) -> bool:
        """Write the batch as disposition frames; False if the session can take none (we closed
        it or its connection: nothing may follow our close, transport §2.4.3)."""
        session = self.session
        conn = session.conn
        # By identity: an enum's .name is a Python-level property (~1,500 instructions each).
        if session.state.local is not ACTIVE or conn.state.local is not ACTIVE or conn.finished:
            self._clear()
            return False
        if self.runs is None:  # one run (a lone outcome, or consecutive ones): no list to build
            if self.run_last >= 0:
                session.disposition(self.role, self.run_first, self.run_last, state=self.run_state, settled=self.settled)
            self._clear()
            return True
        for first, last, state in self.ranges():
            session.disposition(self.role, first, last, state=state, settled=self.settled)
        self._clear()
        return True


def _delivery_id(item: tuple[int, Any]) -> int:
    return item[0]


class Dispositions:
    """Every pending batch, one per (session, role, settled), each kept on its session's
    SessionMaps; the last batch used is kept at hand, since consecutive outcomes mostly go to
    the same place. A batch is emptied when written (DispositionBatch.write)."""

    __slots__ = ("_pending", "_last")

    def __init__(self) -> None:
        self._pending: list[DispositionBatch] = []
        self._last: DispositionBatch | None = None

    def add(self, session: Session, role: bool, delivery_id: i64, state: Any, settled: bool) -> None:
        batch = self._last
        if batch is None or batch.session is not session or batch.role != role or batch.settled != settled:
            batch = self._batch(session, role, settled)
            self._last = batch
        batch.add(delivery_id, state)

    def _batch(self, session: Session, role: bool, settled: bool) -> DispositionBatch:
        maps = maps_of(session)
        batches = maps.dispositions
        if batches is None:
            batches = maps.dispositions = [None, None, None, None]
        index = (2 if role else 0) + (1 if settled else 0)
        batch: DispositionBatch | None = batches[index]
        if batch is None:
            batch = DispositionBatch(session, role, settled)
            batches[index] = batch
        if not batch.pending:
            batch.pending = True
            self._pending.append(batch)
        return batch

    def take(self) -> list[DispositionBatch]:
        """The pending batches, leaving none (each to be written: that empties it; one not
        written keeps its outcomes for the next take)."""
        batches = self._pending
        if len(batches) == 0:
            return batches  # (empty, and kept: the caller only iterates it)
        self._pending = []
        self._last = None
        for batch in batches:
            batch.pending = False
        return batches
