"""EnginePair: two sans-IO connection engines wired back to back, no I/O at all."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.decode import decode_at
from router.amqp.events import Event, RemoteAttach, RemoteBegin
from router.amqp.framing import AMQP_HEADER, FRAME_AMQP, frame
from router.amqp.link import Link
from router.amqp.messaging import Source, Target
from router.amqp.performatives import Begin, Open
from router.amqp.session import Session


class EnginePair:
    """`client` and `server` engines; `pump()` moves bytes both ways until both are quiet and
    returns the events each side produced (also accumulated in `client_events`/`server_events`)."""

    def __init__(self, client: ConnectionConfig | None = None, server: ConnectionConfig | None = None,
                 now: float = 0.0) -> None:
        self.client = Connection(client or ConnectionConfig(container_id="client"))
        self.server = Connection(server or ConnectionConfig(container_id="server", server=True))
        self.now = now
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []
        self.wire_to_server: list[bytes] = []
        self.wire_to_client: list[bytes] = []

    def pump(self, max_rounds: int = 1000) -> tuple[list[Event], list[Event]]:
        new_client: list[Event] = []
        new_server: list[Event] = []
        for _ in range(max_rounds):
            to_server = self.client.data_to_send()
            to_client = self.server.data_to_send()
            if to_server:
                self.wire_to_server.append(to_server)
                self.server.receive_data(to_server, self.now)
            if to_client:
                self.wire_to_client.append(to_client)
                self.client.receive_data(to_client, self.now)
            new_client += self.client.events()
            new_server += self.server.events()
            if not to_server and not to_client:
                break
        else:
            raise AssertionError("engines never went quiet")
        self.client_events += new_client
        self.server_events += new_server
        return new_client, new_server

    def open(self, **open_args: Any) -> None:
        """Open both sides (the server answers the client's open)."""
        self.client.open(**open_args)
        self.pump()
        self.server.open()
        self.pump()


def of_type(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# --- helpers for the engine suites ---------------------------------------------------------------


@dataclass
class WireFrame:
    """One frame as it appeared on the wire: `body` is the decoded performative (None for an
    empty frame) and `payload` the bytes after it."""

    channel: int
    type: int
    body: Any
    payload: bytes
    size: int = 0  # the frame's size on the wire, header included


def parse_wire(data: bytes) -> list[bytes | WireFrame]:
    """Split a byte stream an engine wrote into protocol headers (bytes) and WireFrames."""
    items: list[bytes | WireFrame] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            items.append(data[pos : pos + 8])
            pos += 8
            continue
        size, doff, ftype, channel = struct.unpack_from(">IBBH", data, pos)
        end = pos + size
        assert end <= len(data), "truncated frame in engine output"
        start = pos + doff * 4
        if start == end:
            items.append(WireFrame(channel, ftype, None, b"", size))
        else:
            body, stop = decode_at(data, start, end)
            items.append(WireFrame(channel, ftype, body, data[stop:end], size))
        pos = end
    return items


def wire_frames(data: bytes) -> list[WireFrame]:
    """The frames (not protocol headers) in `data`."""
    return [item for item in parse_wire(data) if isinstance(item, WireFrame)]


def bodies(data: bytes, kind: type | None = None) -> list[Any]:
    """The performatives in `data`, optionally only those of `kind`."""
    found = [f.body for f in wire_frames(data) if f.body is not None]
    return found if kind is None else [b for b in found if isinstance(b, kind)]


def connected_pair(
    client: ConnectionConfig | None = None, server: ConnectionConfig | None = None, **begin: Any
) -> tuple[EnginePair, Session, Session]:
    """An open pair with one session begun by the client and answered by the server."""
    pair = EnginePair(client, server)
    pair.open()
    cs, ss = begin_pair(pair, **begin)
    return pair, cs, ss


def begin_pair(
    pair: EnginePair, *, server_begin: dict[str, Any] | None = None, **begin: Any
) -> tuple[Session, Session]:
    """Begin a session from the client and answer it on the server."""
    cs = pair.client.begin_session(**begin)
    _, server_events = pair.pump()
    (remote_begin,) = of_type(server_events, RemoteBegin)
    ss: Session = remote_begin.session
    ss.begin(**(server_begin or {}))
    pair.pump()
    return cs, ss


def attach_pair(
    pair: EnginePair,
    cs: Session,
    ss: Session,
    name: str = "link",
    *,
    client_sends: bool = True,
    credit: int = 0,
    client_attach: dict[str, Any] | None = None,
    server_attach: dict[str, Any] | None = None,
) -> tuple[Link, Link]:
    """Attach a link from the client (sender when `client_sends`), answered by the server; the
    receiving end then grants `credit`. Returns (client_link, server_link)."""
    args = dict(client_attach or {})
    if client_sends:
        args.setdefault("target", Target(address=name))
        cl = cs.attach_sender(name, **args)
    else:
        args.setdefault("source", Source(address=name))
        cl = cs.attach_receiver(name, **args)
    _, server_events = pair.pump()
    (remote_attach,) = of_type(server_events, RemoteAttach)
    sl: Link = remote_attach.link
    answer = dict(server_attach or {})
    answer.setdefault("source", remote_attach.attach.source)
    answer.setdefault("target", remote_attach.attach.target)
    sl.attach(**answer)
    pair.pump()
    if credit:
        (sl if client_sends else cl).flow(credit)
        pair.pump()
    return cl, sl


class RawPeer:
    """Drives one engine (by default a server) with hand-built frames and decodes its output,
    for tests that must send what a well-behaved engine never would."""

    def __init__(self, engine: Connection | None = None, now: float = 0.0) -> None:
        self.engine = engine or Connection(ConnectionConfig(container_id="server", server=True))
        self.now = now
        self.events: list[Event] = []

    def feed(self, data: bytes) -> None:
        self.engine.receive_data(data, self.now)
        self.events += self.engine.events()

    def send(self, channel: int, performative: Any, payload: bytes = b"") -> None:
        self.feed(frame(channel, performative, payload, FRAME_AMQP))

    def output(self) -> bytes:
        data = self.engine.data_to_send()
        assert isinstance(data, bytes)
        return data

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def handshake(self, max_frame_size: int = 65536, channel_max: int = 0xFFFF, **open_args: Any) -> None:
        """AMQP header and open from us, the engine answers with its header and open."""
        self.feed(AMQP_HEADER)
        self.send(
            0,
            Open(container_id="raw", max_frame_size=max_frame_size, channel_max=channel_max, **open_args),
        )
        self.engine.open()
        self.output()
        self.take_events()

    def begin(self, channel: int, *, answer: bool = True, **server_begin: Any) -> Session | None:
        """Begin a session on `channel`; the engine's application answers it unless told not to."""
        self.send(channel, Begin(next_outgoing_id=0, incoming_window=0x7FFFFFFF, outgoing_window=0x7FFFFFFF))
        (remote_begin,) = of_type(self.take_events(), RemoteBegin)
        session: Session = remote_begin.session
        if answer:
            session.begin(**server_begin)
            self.output()
        return session
