"""The frames a session holds while the peer's incoming window is closed (transport §2.5.6).

A peer decides how many transfer frames it takes (its session incoming-window); until it opens
the window again, our transfers wait here, in order with what must not overtake them: a
sender's link flows and the dispositions settling its deliveries. Owns `Session.blocked` and
what it costs: the bytes held (`FrameOutput.held_bytes`, summed over the connection's
sessions), so that whoever writes to the connection sees frames that wait for the peer as
output that has not drained (a peer that opens no window slows its writer as a peer that does
not read does: router/net/output.py), and at most one held flow per link however many the peer
asks for (an echo flood while the window is closed would otherwise grow the queue without end).
Collaborators, passed in: the Session (its held queue and its connection, whose FrameOutput
keeps the count) and the Link whose frames these are.
Must not touch: encoding frames and sending held ones as the window opens (sessionout.py),
what the peer sends (sessionin.py).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

from .fastpath import frame_header, transfer_performative

if TYPE_CHECKING:
    from .link import Link
    from .session import Session

# What a held frame is (the first field of a Session.blocked entry); the last field is the
# delivery-id of a delivery's first transfer, STUB for the aborted transfer standing in for a
# dropped delivery (drop_held: it holds that delivery's place in the sequence), -1 for any other
TRANSFER: Final = 0  # (TRANSFER, (header + performative, payload), link, delivery-id, STUB or -1)
ORDERED: Final = 1  # (ORDERED, frame bytes, None, -1)
LINK_FLOW: Final = 2  # (LINK_FLOW, None, link, -1): made when sent, with the counts of then
NOT_FIRST: Final = -1
STUB: Final = -2

# A held flow is made when sent: what it holds is the entry, not bytes. Counted at about what
# the entry costs in memory (a tuple in a deque), so that the bound on held bytes bounds them.
LINK_FLOW_HELD_BYTES: Final = 128

# Link.held_flow: no flow of the link is held, one is, one is that asks the peer to echo
FLOW_NONE: Final = 0
FLOW_HELD: Final = 1
FLOW_HELD_ECHO: Final = 2


def hold_transfer(session: Session, link: Link, frames: list[tuple[bytes, Any]], first: bool, delivery_id: int) -> None:
    """The frames of one transfer (header + performative, payload) wait for the window."""
    blocked = session.blocked
    if blocked is None:
        blocked = session.blocked = deque()
    held = 0
    for i, pieces in enumerate(frames):
        blocked.append((TRANSFER, pieces, link, delivery_id if first and i == 0 else NOT_FIRST))
        held += len(pieces[0]) + len(pieces[1])
    session.conn.output.held_bytes += held
    if first:
        link.queued_deliveries += 1


def hold_ordered(session: Session, frame: bytes) -> None:
    """A frame that must not overtake the held transfers (a disposition of ours as sender)."""
    assert session.blocked is not None
    session.blocked.append((ORDERED, frame, None, NOT_FIRST))
    session.conn.output.held_bytes += len(frame)


def hold_link_flow(session: Session, link: Link, echo: bool) -> None:
    """A sender's flow waits behind its transfers: one per link (it is made when it goes out,
    with the counts of then), asking for an echo if any of the requests it stands for did."""
    held = link.held_flow
    if held == FLOW_NONE:
        assert session.blocked is not None
        session.blocked.append((LINK_FLOW, None, link, NOT_FIRST))
        session.conn.output.held_bytes += LINK_FLOW_HELD_BYTES
    if echo:
        link.held_flow = FLOW_HELD_ECHO
    elif held == FLOW_NONE:
        link.held_flow = FLOW_HELD


def take_held_flow(link: Link) -> bool:
    """The link's held flow goes out now: whether it asks for an echo."""
    echo = link.held_flow == FLOW_HELD_ECHO
    link.held_flow = FLOW_NONE
    return echo


def drop_held(session: Session, link: Link | None = None) -> bool:
    """Drop what the session holds: of `link` (its detach), or all (the session's end).
    The delivery-ids are the session's sequence (transport §2.7.5), and everything after the
    first held transfer is held: when no other link's delivery follows the link's first held
    one, the ids are simply taken back (the next delivery gets the first of them); otherwise
    each of the link's held deliveries keeps its place as one aborted, settled transfer
    without payload (§2.6.12), or the peer would find the next delivery-id out of sequence.
    Whether any did: the detach must then wait behind them (nothing of a link after its
    detach)."""
    blocked = session.blocked
    if not blocked:
        return False
    stubs = link is not None and _followed(blocked, link)
    kept: deque[tuple[int, Any, Link | None, int]] = deque()
    dropped = 0
    first_id = NOT_FIRST
    for item in blocked:
        if link is not None and item[2] is not link:
            kept.append(item)
            continue
        dropped += held_size(item)
        if item[2] is not None:
            item[2].queued_deliveries = 0
            item[2].held_flow = FLOW_NONE
        if link is None or item[0] != TRANSFER or item[3] < 0:
            continue
        if stubs:
            stub = (TRANSFER, (_aborted_transfer(session, link, item[3]), b""), link, STUB)
            kept.append(stub)
            dropped -= held_size(stub)
        elif first_id < 0:
            first_id = item[3]
    if first_id >= 0:
        session.take_back_ids(first_id)
    session.conn.output.held_bytes -= dropped
    session.blocked = kept if kept else None
    return stubs


def _followed(blocked: deque[tuple[int, Any, Link | None, int]], link: Link) -> bool:
    """Whether another link's delivery (or the stub of one dropped before) starts after
    `link`'s first held one: then `link`'s ids cannot be taken back."""
    seen = False
    for kind, _, owner, delivery_id in blocked:
        if kind == TRANSFER and (delivery_id >= 0 or delivery_id == STUB):
            if owner is link:
                seen = True
            elif seen:
                return True
    return False


def _aborted_transfer(session: Session, link: Link, delivery_id: int) -> bytes:
    assert link.local_handle is not None
    body = transfer_performative(link.local_handle, delivery_id, session.id_bytes(delivery_id), 0, True, False, True, None)
    return frame_header(8 + len(body), session.channel or 0) + body


def held_size(item: tuple[int, Any, Link | None, int]) -> int:
    """What a held entry counts in `FrameOutput.held_bytes`."""
    kind, data = item[0], item[1]
    if kind == TRANSFER:
        return len(data[0]) + len(data[1])
    if kind == LINK_FLOW:
        return LINK_FLOW_HELD_BYTES
    return len(data)
