"""The engines that may have output since the network layer last looked (it wakes their writers).

Every unit of the core that calls an engine command marks the engine here; RouterCore hands the
list to the network layer (take_touched) after each batch.

Owns: that list, and the round mark it keeps on each ConnState (`touch_round`), which keeps an
engine in the list once per round without a set (a set's add and its iteration were ~600
instructions of a lone message). Must not touch: the engines themselves.
"""

from __future__ import annotations

from ..amqp.connection import Connection
from .connections import ConnState


class Touched:
    __slots__ = ("_engines", "_last", "_round")

    def __init__(self) -> None:
        self._engines: list[Connection] = []
        self._last: Connection | None = None  # the last engine marked
        # Which take() this is: a connection whose touch_round equals it is in _engines already.
        self._round = 1

    def touch(self, engine: Connection) -> None:
        # Most calls touch the engine the previous one did (every delivery of a batch goes to
        # the same consumer): an identity test, nothing more.
        if engine is not self._last:
            self._last = engine
            state = engine.context
            if isinstance(state, ConnState):  # every connection the core has admitted
                self.touch_conn(state)
            elif engine not in self._engines:  # (one the core does not hold: a linear test)
                self._engines.append(engine)

    def touch_conn(self, state: ConnState) -> None:
        """Mark `state`'s engine: for callers that alternate between connections (a multicast
        delivery's copies), where the identity test of `touch` fails every time; one compare of
        ints does, after the first in a round."""
        if state.touch_round != self._round:
            state.touch_round = self._round
            self._engines.append(state.engine)

    def take(self) -> list[Connection]:
        engines, self._engines = self._engines, []
        self._last = None
        self._round += 1
        return engines

    def discard(self, engine: Connection) -> None:
        """Nothing more can be written to `engine` (its round mark stays: not listed again
        in this round)."""
        if engine in self._engines:
            self._engines.remove(engine)
        if self._last is engine:
            self._last = None
