"""Table-driven endpoint states for connections, sessions and links (transport §2.4.6, §2.5.5,
§2.6.3).

Every endpoint has a local half (what we sent) and a remote half (what the peer sent), each
UNINIT -> ACTIVE -> CLOSED, driven by the open-like frame (open, begin, attach) and the
close-like frame (close, end, detach). A transition not in the table is an error: for the
remote half it is the peer's protocol violation (the caller answers with the condition below);
for the local half it is a misuse of the engine by the application. Also the numbers endpoints
are known by on the wire: the lowest free channel of a connection, handle of a session.
Must not touch: frames, windows, credit.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Final

from .errors import ILLEGAL_STATE, LocalUsageError, ProtocolError


class State(IntEnum):
    UNINIT = 0
    ACTIVE = 1
    CLOSED = 2


class Input(IntEnum):
    OPEN = 0  # open, begin, attach
    CLOSE = 1  # close, end, detach


class Action(IntEnum):
    NONE = 0
    SEND_OPEN = 1
    SEND_CLOSE = 2
    SEND_OPEN_THEN_CLOSE = 3  # closing what we never opened: transport §2.4.1, §2.6.3


UNINIT: Final = State.UNINIT
ACTIVE: Final = State.ACTIVE
CLOSED: Final = State.CLOSED

# (state, input) -> (action, next state)
LOCAL_TABLE: Final[dict[tuple[State, Input], tuple[Action, State]]] = {
    (UNINIT, Input.OPEN): (Action.SEND_OPEN, ACTIVE),
    (ACTIVE, Input.CLOSE): (Action.SEND_CLOSE, CLOSED),
    (UNINIT, Input.CLOSE): (Action.SEND_OPEN_THEN_CLOSE, CLOSED),
}
REMOTE_TABLE: Final[dict[tuple[State, Input], tuple[Action, State]]] = {
    (UNINIT, Input.OPEN): (Action.NONE, ACTIVE),
    (ACTIVE, Input.CLOSE): (Action.NONE, CLOSED),
}


class Halves:
    """The local and remote state of one endpoint."""

    __slots__ = ("local", "remote", "kind")

    def __init__(self, kind: str) -> None:
        self.local = UNINIT
        self.remote = UNINIT
        self.kind = kind  # "connection", "session" or "link": names errors

    def local_input(self, what: Input) -> Action:
        step = LOCAL_TABLE.get((self.local, what))
        if step is None:
            raise LocalUsageError(
                f"cannot {what.name.lower()} a {self.kind} whose local state is {self.local.name}",
                ILLEGAL_STATE,
            )
        self.local = step[1]
        return step[0]

    def remote_input(self, what: Input, frame_name: str, condition: str) -> None:
        step = REMOTE_TABLE.get((self.remote, what))
        if step is None:
            raise ProtocolError(
                f"{frame_name} received on a {self.kind} whose remote state is "
                f"{self.remote.name}",
                condition,
                self.kind,
            )
        self.remote = step[1]

    @property
    def both_closed(self) -> bool:
        return self.local is CLOSED and self.remote is CLOSED

    def __repr__(self) -> str:
        return f"{self.kind}(local={self.local.name}, remote={self.remote.name})"


def claim_number(taken: dict[int, Any], endpoint: Any, limit: int, what: str, bound: str) -> int:
    """The lowest number not in `taken` and at most `limit`, now `endpoint`'s there (a session's
    channel, transport §2.5.1; a link's handle, §2.6.2); LocalUsageError naming `what` and the
    `bound` that limits it when every one is taken."""
    for number in range(len(taken) + 1):
        if number not in taken:
            if number > limit:
                break
            taken[number] = endpoint
            return number
    raise LocalUsageError(f"no free {what} ({bound} {limit})")
