"""The engines that may have output since the network layer last looked (it wakes their writers).

Every unit of the core that calls an engine command marks the engine here; RouterCore hands the
set to the network layer (take_touched) after each batch.

Owns: that set. Must not touch: the engines themselves.
"""

from __future__ import annotations

from ..amqp.connection import Connection


class Touched:
    __slots__ = ("_engines", "_last")

    def __init__(self) -> None:
        self._engines: set[Connection] = set()
        self._last: Connection | None = None  # the last engine added to _engines

    def touch(self, engine: Connection) -> None:
        # Most calls touch the engine the previous one did (every delivery of a batch goes to
        # the same consumer): an identity test instead of a set add.
        if engine is not self._last:
            self._engines.add(engine)
            self._last = engine

    def take(self) -> set[Connection]:
        engines, self._engines = self._engines, set()
        self._last = None
        return engines

    def discard(self, engine: Connection) -> None:
        """Nothing more can be written to `engine`."""
        self._engines.discard(engine)
        if self._last is engine:
            self._last = None
