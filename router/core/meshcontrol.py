"""Control messages between two routers on the wire: how they are encoded, and how they travel
on the control links of an inter-router or edge connection (docs/mesh.md, "Links on an
inter-router connection", "Control messages").

    control = ControlChannel(touched, closer)
    control.send(peer, payload)             # queued, written while the peer's control link has credit
    control.on_flow(event)                  # credit on a control link: what waits goes out
    payload = control.receive(peer, event, now)   # a whole message, or None while it arrives

Owns: the encoding of the topology node's messages (an amqp-value map body from
topology.codec plus the application property `opcode`), the queue of each peer's messages
waiting for credit (bounded: the oldest goes first, the protocol recovers), writing them
presettled, putting together a message that arrives in several frames (bounded: a longer one
closes the connection), settling what arrives and keeping credit on the peer's control link.
Collaborators (given by the mesh): Touched, and the core as a ports.ConnectionCloser.
Must not touch: what a message means (the node: topology/; an edge's: edge.py), which
connections are peers (peering.py, edge.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topology.codec import MalformedMessage, from_map, to_map
from topology.messages import ControlMessage, Unsupported

from ..amqp import errors as E
from ..amqp.events import FlowReceived, TransferReceived
from ..amqp.message import Message, decode_message, encode_message
from ..amqp.messaging import ACCEPTED
from ..amqp.performatives import Error
from .interrouter import ControlOut, Peer, top_up_control
from .links import alive

if TYPE_CHECKING:
    from .ports import ConnectionCloser
    from .touched import Touched

CONTROL_QUEUE_MAX = 4096  # control messages waiting for credit per peer (oldest dropped first)
CONTROL_MESSAGE_MAX = 16 << 20  # a longer control message closes the connection


def encode_control(message: ControlMessage) -> bytes:
    return encode_message(Message.value(to_map(message), application_properties={"opcode": message.OPCODE}))


def decode_control(payload: bytes) -> ControlMessage | Unsupported:
    try:
        body = decode_message(payload).body_value
    except TypeError as exc:
        raise MalformedMessage("a control message body is one amqp-value section") from exc
    return from_map(body)


class ControlChannel:
    """See the module docstring; one per Mesh, for every peer (neighbours and edges)."""

    def __init__(self, touched: Touched, closer: ConnectionCloser) -> None:
        """`closer`: the core, which closes a connection sending too long a message."""
        self.touched = touched
        self.closer = closer

    def send(self, peer: Peer, payload: bytes) -> None:
        if len(peer.queue) >= CONTROL_QUEUE_MAX:
            peer.queue.popleft()  # the protocol recovers (periodic RA, retried requests)
            peer.dropped += 1
        peer.queue.append(payload)
        self.flush(peer)

    def flush(self, peer: Peer) -> None:
        link = peer.control_out
        if link is None or not peer.queue or not alive(link):
            return
        while peer.queue and link.credit > 0:
            link.send_transfer(b"c", peer.queue.popleft(), settled=True)
        self.touched.touch(peer.conn.engine)

    def on_flow(self, event: FlowReceived) -> None:
        ctx = event.link.context
        if type(ctx) is ControlOut:
            self.flush(ctx.peer)

    def receive(self, peer: Peer, event: TransferReceived, now: float) -> bytes | None:
        """A frame of a control message from `peer`: the whole message once its last frame is
        here, else None."""
        link = event.link
        if event.aborted:
            peer.partial.clear()
            peer.partial_size = 0
            return None
        payload = bytes(event.payload)
        peer.partial.append(payload)
        peer.partial_size += len(payload)
        if not event.settled and not event.more:
            link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
        if alive(link):
            top_up_control(link)
        if event.more:
            # (counted as it comes: summed again at each frame, a message of many small frames
            # cost the square of their number, 15 s of the router's time for 16 MiB in 500 B)
            if peer.partial_size > CONTROL_MESSAGE_MAX:
                self.closer.close_connection(peer.conn, Error(condition=E.RESOURCE_LIMIT_EXCEEDED,
                                           description="control message too large"), now)  # fmt: skip
                peer.partial.clear()  # (what came is dropped at once, not when the peer goes)
                peer.partial_size = 0
            return None
        whole = b"".join(peer.partial)
        peer.partial.clear()
        peer.partial_size = 0
        return whole
