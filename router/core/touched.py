"""The engines that may have output since the network layer last looked (it wakes their writers).

Every unit of the core that calls an engine command marks the engine here; RouterCore hands the
set to the network layer (take_touched) after each batch.

Owns: that set, and the round mark it keeps on each ConnState (`touch_round`). Must not touch:
the engines themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp.connection import Connection

if TYPE_CHECKING:
    from .connections import ConnState


class Touched:
    __slots__ = ("_engines", "_last", "_round")

    def __init__(self) -> None:
        self._engines: set[Connection] = set()
        self._last: Connection | None = None  # the last engine added to _engines
        # Which take() this is: a connection whose touch_round equals it is in _engines already.
        self._round = 1

    def touch(self, engine: Connection) -> None:
        # Most calls touch the engine the previous one did (every delivery of a batch goes to
        # the same consumer): an identity test instead of a set add.
        if engine is not self._last:
            self._engines.add(engine)
            self._last = engine

    def touch_conn(self, state: ConnState) -> None:
        """Mark `state`'s engine: for callers that alternate between connections (a multicast
        delivery's copies), where the identity test of `touch` fails every time and a set add
        hashes the engine; here one compare of ints does, after the first in a round."""
        if state.touch_round != self._round:
            state.touch_round = self._round
            self._engines.add(state.engine)

    def take(self) -> set[Connection]:
        engines, self._engines = self._engines, set()
        self._last = None
        self._round += 1
        return engines

    def discard(self, engine: Connection) -> None:
        """Nothing more can be written to `engine`."""
        self._engines.discard(engine)
        if self._last is engine:
            self._last = None
