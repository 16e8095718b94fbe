"""Every protocol violation by the peer ends the right scope with the right AMQP condition on the
wire (close, end or detach carrying the error, transport §2.8.15-§2.8.18) AND a
ProtocolViolation event, and the engine never raises.

The peer here is a RawPeer: hand-built frames fed to a server engine after a valid handshake,
its output decoded frame by frame (decode_at after the 8-byte frame header).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.encode import encode
from router.amqp.events import (
    DispositionReceived,
    FlowReceived,
    ProtocolViolation,
    RemoteAttach,
    RemoteBegin,
    RemoteDetach,
    RemoteEnd,
    TransferReceived,
)
from router.amqp.framing import AMQP_HEADER, EMPTY_FRAME, FRAME_AMQP, FRAME_SASL, frame
from router.amqp.link import Link
from router.amqp.messaging import ACCEPTED, Source, Target
from router.amqp.performatives import (
    RECEIVER,
    SENDER,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Open,
    SaslInit,
    Transfer,
)
from router.amqp.session import Session

from router.testing.enginepair import RawPeer, attach_pair, begin_pair, bodies, connected_pair, of_type, wire_frames

SPEC_CONDITIONS = {
    value
    for name, value in vars(E).items()
    if name.isupper() and isinstance(value, str) and value.startswith("amqp:")
}


def raw_header(size: int, doff: int = 2, ftype: int = 0, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", size, doff, ftype, channel)


def begin(next_outgoing_id: int = 0, window: int = 0x7FFFFFFF, **kw: Any) -> Begin:
    return Begin(next_outgoing_id=next_outgoing_id, incoming_window=window, outgoing_window=window, **kw)


def attach(handle: int, name: str = "l", role: bool = SENDER, **kw: Any) -> Attach:
    if role is SENDER:
        kw.setdefault("initial_delivery_count", 0)
        kw.setdefault("target", Target(address="q"))
    return Attach(name=name, handle=handle, role=role, **kw)


def transfer(handle: int, delivery_id: int | None, tag: bytes | None = b"t", **kw: Any) -> Transfer:
    return Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag, **kw)


def flow(handle: int | None = None, credit: int | None = None, **kw: Any) -> Flow:
    kw.setdefault("next_incoming_id", 0)
    return Flow(
        incoming_window=0x7FFFFFFF, next_outgoing_id=0, outgoing_window=0x7FFFFFFF,
        handle=handle, link_credit=credit, delivery_count=0 if handle is not None else None, **kw,
    )  # fmt: skip


class Server:
    """A server engine after SASL-less AMQP handshake and open, driven by a RawPeer."""

    def __init__(self, *, peer_max_frame_size: int = 65536, handshake: bool = True, **config: Any) -> None:
        """`config` configures the engine; `peer_max_frame_size` is what our open announces."""
        engine = Connection(ConnectionConfig(container_id="server", server=True, **config))
        self.peer = RawPeer(engine)
        self.engine = engine
        if handshake:
            self.peer.handshake(max_frame_size=peer_max_frame_size)

    def send(self, channel: int, performative: Any, payload: bytes = b"") -> None:
        self.peer.send(channel, performative, payload)

    def feed(self, data: bytes) -> None:
        self.peer.feed(data)

    def begin(self, channel: int = 0, **server_begin: Any) -> Session:
        session = self.peer.begin(channel, **server_begin)
        assert session is not None
        return session

    def attach_sender(self, channel: int, handle: int, name: str = "l", credit: int = 10, **answer: Any) -> Link:
        """We attach a sender; the engine's application answers as receiver and grants credit."""
        self.send(channel, attach(handle, name, SENDER))
        (remote,) = of_type(self.peer.take_events(), RemoteAttach)
        link: Link = remote.link
        link.attach(target=remote.attach.target, **answer)
        if credit:
            link.flow(credit)
        self.out()
        return link

    def attach_receiver(self, channel: int, handle: int, name: str = "r") -> Link:
        """We attach a receiver; the engine's application answers as sender."""
        self.send(channel, attach(handle, name, RECEIVER, source=Source(address="q")))
        (remote,) = of_type(self.peer.take_events(), RemoteAttach)
        link: Link = remote.link
        link.attach(source=remote.attach.source)
        self.out()
        return link

    def out(self) -> list[Any]:
        return [f.body for f in wire_frames(self.peer.output()) if f.body is not None]

    def violations(self) -> list[ProtocolViolation]:
        return of_type(self.peer.take_events(), ProtocolViolation)


def assert_closed_with(server: Server, condition: str) -> None:
    """The engine closed the connection carrying `condition` and reported it."""
    out = server.out()
    closes = [b for b in out if isinstance(b, Close)]
    assert len(closes) == 1, out
    assert closes[0].error is not None and closes[0].error.condition == condition
    assert isinstance(closes[0].error.description, str)
    (violation,) = server.violations()
    assert violation.condition == condition and violation.scope == "connection"
    assert condition in SPEC_CONDITIONS  # transport §2.8.15-§2.8.16
    assert server.engine.failed and server.engine.finished
    assert server.engine.next_deadline() is None
    # anything after that is ignored: no more frames, no more events
    server.feed(frame(0, Close()))
    assert server.out() == [] and server.peer.take_events() == []


def assert_ended_with(server: Server, condition: str, channel: int) -> End:
    """The engine ended the session the peer began on `channel`, carrying `condition`."""
    (session,) = [x for x in server.engine.sessions if x.remote_channel == channel]
    frames = wire_frames(server.peer.output())
    out = [f.body for f in frames if f.body is not None]
    ends = [f for f in frames if isinstance(f.body, End)]
    assert len(ends) == 1, out
    assert ends[0].channel == session.channel and session.state.local == 2
    end: End = ends[0].body
    assert end.error is not None and end.error.condition == condition
    assert not any(isinstance(b, Close) for b in out)
    (violation,) = server.violations()
    assert violation.condition == condition and violation.scope == "session"
    assert condition in SPEC_CONDITIONS  # transport §2.8.15, §2.8.17
    assert not server.engine.failed
    return end


def assert_detached_with(server: Server, condition: str, handle: int) -> None:
    out = server.out()
    detaches = [b for b in out if isinstance(b, Detach)]
    assert len(detaches) == 1, out
    assert detaches[0].handle == handle and detaches[0].closed
    assert detaches[0].error is not None and detaches[0].error.condition == condition
    assert not any(isinstance(b, (End, Close)) for b in out)
    (violation,) = server.violations()
    assert violation.condition == condition and violation.scope == "link"
    assert condition in SPEC_CONDITIONS  # transport §2.8.18


def prove_still_working(
    server: Server, channel: int = 7, handle: int = 0, *, new_session: bool = True, delivery_id: int = 0
) -> None:
    """A new link (on a new session unless told otherwise) carries a message and its disposition;
    on an old session, `delivery_id` continues the peer's sequence (transport §2.6)."""
    if new_session:
        session = server.begin(channel)
    else:
        (session,) = [s for s in server.engine.sessions if s.remote_channel == channel]
    link = server.attach_sender(channel, handle, name=f"proof-{channel}-{handle}")
    server.send(channel, transfer(handle, delivery_id, b"proof"), b"message body")
    (t,) = of_type(server.peer.take_events(), TransferReceived)
    assert t.link is link and t.payload == b"message body"
    link.dispose(t.delivery_id, state=ACCEPTED)
    (disposition,) = [b for b in server.out() if isinstance(b, Disposition)]
    assert disposition.first == t.delivery_id and disposition.settled
    assert session.state.local == session.state.remote == 1


# --- connection scope: framing (transport §2.3) -------------------------------------------------


def test_frame_larger_than_max_frame_size() -> None:
    server = Server()
    limit = server.engine.config.max_frame_size
    server.feed(raw_header(limit + 1) + bytes(16))  # the header alone is enough to refuse
    assert_closed_with(server, E.FRAMING_ERROR)


def test_frame_larger_than_a_small_max_frame_size() -> None:
    server = Server(max_frame_size=512)
    server.send(0, begin(), payload=bytes(600))  # a 600+ byte frame to a 512-byte engine
    assert_closed_with(server, E.FRAMING_ERROR)


def test_frame_of_exactly_max_frame_size_is_fine() -> None:
    server = Server(max_frame_size=512)
    server.begin(0)
    server.attach_sender(0, 0)
    head = frame(0, transfer(0, 0))
    server.send(0, transfer(0, 0), payload=bytes(512 - len(head)))
    (t,) = of_type(server.peer.take_events(), TransferReceived)
    assert len(t.payload) == 512 - len(head)


@pytest.mark.parametrize("size", [0, 1, 7])
def test_frame_size_below_the_header(size: int) -> None:
    server = Server()
    server.feed(raw_header(size) + bytes(8))
    assert_closed_with(server, E.FRAMING_ERROR)


@pytest.mark.parametrize("doff", [0, 1])
def test_doff_below_two(doff: int) -> None:
    server = Server()
    body = encode(begin())
    server.feed(raw_header(8 + len(body), doff=doff) + body)
    assert_closed_with(server, E.FRAMING_ERROR)


def test_doff_beyond_the_frame() -> None:
    server = Server()
    server.feed(raw_header(12, doff=4) + bytes(4))
    assert_closed_with(server, E.FRAMING_ERROR)


def test_extended_header_is_skipped() -> None:
    server = Server()
    body = encode(begin())
    server.feed(raw_header(16 + len(body), doff=4) + b"\xff" * 8 + body)
    assert of_type(server.peer.take_events(), RemoteBegin)
    assert server.violations() == []


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff",  # invalid constructors
        b"\x00\x53",  # a truncated descriptor
        b"\x00\x53\x11\xc0\x10\x05",  # a list that overruns its frame
        b"\x00\x53\x14\xc0\x03\x01\x52",  # a truncated transfer on the hot path
        b"\x00\x53\x13\xc0\x02\x01\x52\x00",  # a flow missing mandatory fields
        b"\x00\x53\x11\xc0\x02\x01\x40",  # a begin missing mandatory fields
        b"\x00\x53\x10\xc0\x02\x01\x71",  # open with a wrong-typed container-id
        b"\x00\x53\x11\x45\x45",  # bytes after the performative
    ],
)
def test_garbage_frame_body_is_a_decode_error(body: bytes) -> None:
    server = Server()
    server.feed(raw_header(8 + len(body)) + body)
    assert_closed_with(server, E.DECODE_ERROR)


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x53\x30\x45",  # a described list with an unknown descriptor
        b"\xa1\x03abc",  # a valid value that is no performative at all
        b"\x00\x53\x24\x45",  # an accepted outcome as a frame body
    ],
)
@pytest.mark.parametrize("with_session", [False, True])
def test_a_value_that_is_no_performative_is_not_allowed(body: bytes, with_session: bool) -> None:
    # It decodes, so it is not a decode-error; the engine answers amqp:not-allowed.
    server = Server()
    if with_session:
        server.begin(0)
    server.feed(raw_header(8 + len(body)) + body)
    assert_closed_with(server, E.NOT_ALLOWED)


def test_sasl_frame_after_the_amqp_header() -> None:
    server = Server()
    server.feed(frame(0, SaslInit(mechanism="ANONYMOUS"), frame_type=FRAME_SASL))
    assert_closed_with(server, E.FRAMING_ERROR)


@pytest.mark.parametrize("ftype", [2, 0xFF])
def test_unknown_frame_type(ftype: int) -> None:
    server = Server()
    body = encode(begin())
    server.feed(raw_header(8 + len(body), ftype=ftype) + body)
    assert_closed_with(server, E.FRAMING_ERROR)


def test_channel_above_channel_max() -> None:
    server = Server(channel_max=3)
    assert server.engine.config.channel_max == 3
    server.send(4, begin())
    assert_closed_with(server, E.FRAMING_ERROR)


def test_channel_at_channel_max_is_fine() -> None:
    server = Server(channel_max=3)
    server.begin(3)
    assert server.violations() == []


# --- connection scope: open and close (transport §2.4) -----------------------------------------


@pytest.mark.parametrize(
    "performative",
    [
        begin(),
        attach(0),
        flow(),
        transfer(0, 0),
        Disposition(role=RECEIVER, first=0),
        Detach(handle=0),
        End(),
        Close(),
    ],
)
def test_frame_before_open(performative: Any) -> None:
    server = Server(handshake=False)
    server.feed(AMQP_HEADER)
    server.peer.output()
    server.send(0, performative)
    # transport §2.4.1: open must be the first frame. The engine answers with an open (it must
    # precede the close) and a close carrying amqp:not-allowed.
    out = server.out()
    assert [type(b) for b in out] == [Open, Close]
    assert out[-1].error.condition == E.NOT_ALLOWED
    (violation,) = server.violations()
    assert violation.condition == E.NOT_ALLOWED and violation.scope == "connection"
    assert server.engine.failed


def test_second_open() -> None:
    server = Server()
    server.send(0, Open(container_id="again"))
    assert_closed_with(server, E.NOT_ALLOWED)


def test_frames_after_the_peers_close() -> None:
    server = Server()
    server.send(0, Close())
    server.peer.take_events()
    server.send(0, begin())
    assert_closed_with(server, E.NOT_ALLOWED)


@pytest.mark.parametrize("after", ["transfer", "flow", "disposition"])
def test_hot_frames_after_the_peers_close_in_the_same_read_reach_no_session(after: str) -> None:
    """A transfer, flow or disposition behind the peer's close in one read: the engine's fast
    path must not hand it to a session the application is told is gone with the connection (a
    transfer there made a delivery on a producer link the core had already forgotten, which
    then held its consumer's link for ever: found by the peer-router fuzzer)."""
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)  # the engine granted us credit
    server.peer.take_events()
    behind = {
        "transfer": frame(0, transfer(0, 0, more=True), b"\x00Sw\xa1\x01x", FRAME_AMQP),
        "flow": frame(0, flow(0, 5), b"", FRAME_AMQP),
        "disposition": frame(0, Disposition(role=RECEIVER, first=0, settled=True, state=ACCEPTED), b"", FRAME_AMQP),
    }[after]
    server.feed(frame(0, Close(), b"", FRAME_AMQP) + behind)
    events = server.peer.take_events()
    assert [type(e).__name__ for e in events] == ["RemoteClose", "ProtocolViolation"], events
    assert "after close" in events[1].description


def test_heartbeat_on_any_channel_is_ignored() -> None:
    server = Server(channel_max=10)
    server.feed(EMPTY_FRAME + raw_header(8, channel=5) + raw_header(12, doff=3) + bytes(4))
    assert server.out() == [] and server.peer.take_events() == []


# --- sessions (transport §2.5) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "performative",
    [attach(0), flow(), transfer(0, 0), Disposition(role=RECEIVER, first=0), Detach(handle=0), End()],
)
def test_frame_on_a_channel_with_no_session(performative: Any) -> None:
    server = Server()
    server.begin(0)
    server.send(1, performative)
    # No spec section names this case; the engine treats it as a connection-level misuse.
    assert_closed_with(server, E.NOT_ALLOWED)


def test_begin_on_a_channel_in_use() -> None:
    server = Server()
    server.begin(0)
    server.send(0, begin())
    assert_closed_with(server, E.NOT_ALLOWED)


def test_begin_answering_a_channel_we_never_began() -> None:
    server = Server()
    server.send(0, begin(remote_channel=5))
    assert_closed_with(server, E.NOT_ALLOWED)


def test_end_twice() -> None:
    server = Server()
    session = server.begin(0)
    server.send(0, End())
    server.peer.take_events()
    server.send(0, End())  # the channel is free once the peer ended: no session there now
    assert_closed_with(server, E.NOT_ALLOWED)
    assert session.state.remote == 2


def test_transfer_beyond_the_incoming_window() -> None:
    server = Server()
    session = server.begin(0, incoming_window=0)
    server.attach_sender(0, 0)
    server.send(0, transfer(0, 0))
    end = assert_ended_with(server, E.WINDOW_VIOLATION, 0)
    assert end is not None and session.state.local == 2
    prove_still_working(server)


def test_attach_with_handle_above_handle_max() -> None:
    server = Server()
    server.begin(0, handle_max=3)
    server.send(0, attach(4))
    # transport §2.7.2 handle-max: a handle outside the range closes the connection
    assert_closed_with(server, E.FRAMING_ERROR)


def test_attach_reusing_a_handle_in_use() -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0, name="first")
    server.send(0, attach(0, name="second"))
    assert_ended_with(server, E.HANDLE_IN_USE, 0)
    prove_still_working(server)


def test_attach_of_a_link_already_attached_under_another_handle_is_no_violation() -> None:
    server = Server()
    server.begin(0)
    old = server.attach_sender(0, 0, name="same")
    server.send(0, attach(1, name="same"))
    # transport 2.6.1: the link is stolen (the new attach succeeds, the old link is detached
    # with amqp:link:stolen), the session goes on: tests/test_engine_pair_links.py
    (remote,) = server.peer.take_events()
    assert isinstance(remote, RemoteAttach) and remote.link is not old
    (detach,) = server.out()
    assert isinstance(detach, Detach) and detach.handle == old.local_handle and detach.error.condition == E.STOLEN
    server.send(0, Detach(handle=0, closed=True))  # the answer, with the old handle
    assert [type(e) for e in server.peer.take_events()] == [RemoteDetach]
    prove_still_working(server, 0, 2, new_session=False)


@pytest.mark.parametrize(
    "performative",
    [transfer(9, 0), flow(handle=9, credit=1), Detach(handle=9, closed=True)],
    ids=["transfer", "flow", "detach"],
)
def test_frames_for_an_unattached_handle(performative: Any) -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, performative)
    # transport §2.6.5 / §2.8.17: unattached-handle ends the session
    assert_ended_with(server, E.UNATTACHED_HANDLE, 0)
    prove_still_working(server)


def test_frames_for_a_handle_after_its_detach() -> None:
    server = Server()
    server.begin(0)
    link = server.attach_sender(0, 0)
    server.send(0, Detach(handle=0, closed=True))
    assert of_type(server.peer.take_events(), RemoteDetach)
    link.detach()
    server.out()
    server.send(0, transfer(0, 0))
    assert_ended_with(server, E.UNATTACHED_HANDLE, 0)
    prove_still_working(server)


def test_disposition_for_unknown_deliveries_is_reported_not_refused() -> None:
    """A disposition names delivery-ids, not a handle: the spec has no error for ids the
    receiver does not know (transport §2.7.6), so the engine reports it and carries on."""
    server = Server()
    session = server.begin(0)
    server.send(0, Disposition(role=RECEIVER, first=100, last=200, settled=True))
    (event,) = of_type(server.peer.take_events(), DispositionReceived)
    assert event.session is session and (event.first, event.last) == (100, 200)
    assert server.out() == []


def test_disposition_range_running_backwards() -> None:
    server = Server()
    server.begin(0)
    server.send(0, Disposition(role=RECEIVER, first=10, last=5))
    assert_ended_with(server, E.INVALID_FIELD, 0)
    prove_still_working(server)


@pytest.mark.parametrize("delivery_id, tag", [(None, None), (None, b"t"), (None, b""), (0, None)])
def test_first_transfer_without_delivery_id_or_tag(delivery_id: int | None, tag: bytes | None) -> None:
    # (None, tag) on the session's first delivery used to pass as delivery -1, which the router
    # then failed to dispose (found by the engine fuzz test)
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, transfer(0, delivery_id, tag))
    assert_ended_with(server, E.INVALID_FIELD, 0)
    prove_still_working(server)


def test_transfer_from_the_receiving_side() -> None:
    server = Server()
    server.begin(0)
    server.attach_receiver(0, 0)  # we are the receiver: we must not send transfers
    server.send(0, transfer(0, 0))
    assert_ended_with(server, E.NOT_ALLOWED, 0)
    prove_still_working(server)


def test_interleaved_deliveries_on_one_link() -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, transfer(0, 0, b"a", more=True), b"part")
    server.send(0, transfer(0, 1, b"b"), b"other")
    assert_ended_with(server, E.NOT_ALLOWED, 0)
    prove_still_working(server)


def test_session_errors_leave_other_sessions_alone() -> None:
    server = Server()
    server.begin(0)
    keep = server.begin(1)
    kept_link = server.attach_sender(1, 0, name="kept")
    server.attach_sender(0, 0, name="doomed")
    server.send(0, transfer(5, 0))
    assert_ended_with(server, E.UNATTACHED_HANDLE, 0)
    server.send(1, transfer(0, 0, b"k"), b"still here")
    (t,) = of_type(server.peer.take_events(), TransferReceived)
    assert t.link is kept_link and t.payload == b"still here"
    assert keep.state.local == keep.state.remote == 1


def test_frames_after_the_session_error_are_discarded_until_the_end() -> None:
    server = Server()
    session = server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, transfer(5, 0))
    assert_ended_with(server, E.UNATTACHED_HANDLE, 0)
    server.send(0, transfer(0, 1))
    server.send(0, flow(handle=0, credit=5))
    server.send(0, attach(3, name="late"))
    assert server.out() == [] and server.peer.take_events() == []
    server.send(0, End())
    (end,) = of_type(server.peer.take_events(), RemoteEnd)
    assert end.session is session
    assert server.engine.sessions == []


# --- links (transport §2.6) ---------------------------------------------------------------------


def test_a_delivery_id_out_of_sequence_ends_the_session() -> None:
    # Delivery-ids are a session-scoped sequence (transport §2.6): a reused id would make two
    # deliveries one for their dispositions. Discarded transfers (a detached link) still count.
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, transfer(0, 5))
    assert len(of_type(server.peer.take_events(), TransferReceived)) == 1
    server.send(0, transfer(0, 6, more=True))
    server.send(0, transfer(0, 6, b"t"))  # a continuation may repeat its id
    assert len(of_type(server.peer.take_events(), TransferReceived)) == 2
    server.send(0, transfer(0, 7, b"u"))
    server.send(0, transfer(0, 8, b"v"))  # the sequence: 7, 8 ...
    assert len(of_type(server.peer.take_events(), TransferReceived)) == 2
    server.send(0, transfer(0, 6, b"again"))  # a new delivery reusing 6
    out = server.out()
    (end,) = [b for b in out if isinstance(b, End)]
    assert end.error is not None and end.error.condition == E.INVALID_FIELD
    assert "out of sequence (expected 9)" in end.error.description


def test_delivery_ids_wrap_around() -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    for delivery_id in (0xFFFFFFFE, 0xFFFFFFFF, 0, 1):  # serial numbers (transport §2.8.10)
        server.send(0, transfer(0, delivery_id, b"%d" % delivery_id))
    assert [t.delivery_id for t in of_type(server.peer.take_events(), TransferReceived)] == [0xFFFFFFFE, 0xFFFFFFFF, 0, 1]
    assert not server.violations()


def test_transfer_without_link_credit() -> None:
    server = Server()
    server.begin(0)
    link = server.attach_sender(0, 0, credit=0)
    server.send(0, transfer(0, 0))
    assert_detached_with(server, E.TRANSFER_LIMIT_EXCEEDED, link.local_handle or 0)
    assert link.state.local == 2
    # the link's later frames are dropped; the session and connection carry on
    server.send(0, transfer(0, 1))
    assert server.out() == [] and server.peer.take_events() == []
    server.send(0, Detach(handle=0, closed=True))
    assert of_type(server.peer.take_events(), RemoteDetach)
    prove_still_working(server, channel=0, handle=1, new_session=False, delivery_id=2)
    prove_still_working(server)


def test_transfer_beyond_the_granted_credit() -> None:
    server = Server()
    server.begin(0)
    link = server.attach_sender(0, 0, credit=2)
    server.send(0, transfer(0, 0, b"a"))
    server.send(0, transfer(0, 1, b"b"))
    assert len(of_type(server.peer.take_events(), TransferReceived)) == 2
    server.send(0, transfer(0, 2, b"c"))
    assert_detached_with(server, E.TRANSFER_LIMIT_EXCEEDED, link.local_handle or 0)
    prove_still_working(server)


def test_delivery_larger_than_max_message_size() -> None:
    server = Server()
    server.begin(0)
    link = server.attach_sender(0, 0, max_message_size=100)
    server.send(0, transfer(0, 0, b"a", more=True), bytes(60))
    assert of_type(server.peer.take_events(), TransferReceived)
    server.send(0, transfer(0, 0, b"a"), bytes(60))  # 120 bytes in all
    assert_detached_with(server, E.MESSAGE_SIZE_EXCEEDED, link.local_handle or 0)
    prove_still_working(server)


def test_delivery_of_exactly_max_message_size_is_fine() -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0, max_message_size=100)
    server.send(0, transfer(0, 0), bytes(100))
    assert of_type(server.peer.take_events(), TransferReceived)
    assert server.violations() == [] and server.out() == []


def test_detach_twice() -> None:
    server = Server()
    server.begin(0)
    server.attach_sender(0, 0)
    server.send(0, Detach(handle=0, closed=True))
    server.peer.take_events()
    server.send(0, Detach(handle=0, closed=True))
    assert_ended_with(server, E.UNATTACHED_HANDLE, 0)


# --- the same checks from the client's side -----------------------------------------------------


def test_client_engine_refuses_a_hostile_server() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    # the server claims a transfer on the client's sending link
    pair.client.receive_data(frame(cs.remote_channel or 0, transfer(rcv.local_handle or 0, 0)), 0.0)
    events = pair.client.events()
    (violation,) = of_type(events, ProtocolViolation)
    assert violation.condition == E.NOT_ALLOWED and violation.scope == "session"
    ends = bodies(pair.client.data_to_send(), End)
    assert ends and ends[0].error.condition == E.NOT_ALLOWED


def test_session_error_reaches_the_peer_engine_and_other_sessions_keep_working() -> None:
    pair, cs1, ss1 = connected_pair()
    cs2, ss2 = begin_pair(pair)
    snd, rcv = attach_pair(pair, cs2, ss2, credit=5)
    # a frame for a handle nobody attached, sent in the client's name on session 1
    pair.server.receive_data(frame(ss1.remote_channel or 0, flow(handle=42, credit=1)), 0.0)
    client_events, server_events = pair.pump()
    assert of_type(server_events, ProtocolViolation)[0].condition == E.UNATTACHED_HANDLE
    (end,) = of_type(client_events, RemoteEnd)
    assert end.session is cs1 and end.error.condition == E.UNATTACHED_HANDLE
    cs1.end()
    pair.pump()
    d = snd.send_transfer(b"after", b"payload")
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.link is rcv and t.payload == b"payload"
    rcv.dispose(d, state=ACCEPTED)
    client_events, _ = pair.pump()
    assert of_type(client_events, DispositionReceived)[0].first == d


def test_link_error_reaches_the_peer_engine_and_other_links_keep_working() -> None:
    pair, cs, ss = connected_pair()
    bad_snd, bad_rcv = attach_pair(pair, cs, ss, "bad", server_attach={"max_message_size": 10}, credit=5)
    snd, rcv = attach_pair(pair, cs, ss, "good", credit=5)
    bad_snd.send_transfer(b"big", bytes(100))  # the engine does not police the peer's limit
    client_events, server_events = pair.pump()
    assert of_type(server_events, ProtocolViolation)[0].condition == E.MESSAGE_SIZE_EXCEEDED
    (detach,) = of_type(client_events, RemoteDetach)
    assert detach.link is bad_snd and detach.error.condition == E.MESSAGE_SIZE_EXCEEDED
    bad_snd.detach()
    pair.pump()
    snd.send_transfer(b"ok", b"small")
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived)[0].link is rcv


# --- descriptions built from peer data must fit the peer's frames --------------------------------


@pytest.mark.parametrize("name", ["n" * 440, "ü" * 220, "\U0001f600" * 110])
def test_error_with_a_long_peer_supplied_name_fits_a_small_peer_frame(name: str) -> None:
    server = Server(peer_max_frame_size=512)
    server.begin(0)
    server.attach_receiver(0, 0, name=name)
    server.send(0, transfer(0, 0))  # a transfer from the receiver: not-allowed, naming the link
    frames = wire_frames(server.peer.output())
    (end,) = [f for f in frames if isinstance(f.body, End)]
    assert end.size <= 512
    assert end.body.error.condition == E.NOT_ALLOWED
    assert end.body.error.description.endswith("...")  # cut short, still valid UTF-8
    (violation,) = server.violations()
    assert name in violation.description  # the event keeps it whole


@pytest.mark.parametrize("name", ["n" * 440, "ü" * 220, "\U0001f600" * 110])
def test_stolen_with_a_long_peer_supplied_name_fits_a_small_peer_frame(name: str) -> None:
    server = Server(peer_max_frame_size=512)
    server.begin(0)
    server.attach_sender(0, 0, name=name)
    server.send(0, attach(1, name=name))  # the same link again: stolen, naming the link
    frames = wire_frames(server.peer.output())
    (detach,) = [f for f in frames if isinstance(f.body, Detach)]
    assert detach.size <= 512
    assert detach.body.error.condition == E.STOLEN
    assert detach.body.error.description.endswith("...")  # cut short, still valid UTF-8


# --- sessions the application has not answered yet -----------------------------------------------


def test_violation_on_a_session_not_yet_answered_still_ends_it() -> None:
    server = Server()
    session = server.begin(0, answer=False)
    server.send(0, attach(0, name="a"))
    server.send(0, attach(0, name="b"))  # handle in use, before the application answered
    out = server.out()
    (violation,) = server.violations()
    assert violation.condition == E.HANDLE_IN_USE
    # the end needs a begin before it (transport §2.5.1): both go out
    assert [type(b) for b in out] == [Begin, End]
    assert out[1].error.condition == E.HANDLE_IN_USE
    assert session.state.local == 2


def test_violation_on_a_session_we_cannot_answer_closes_the_connection() -> None:
    engine = Connection(ConnectionConfig(container_id="server", server=True))
    peer = RawPeer(engine)
    peer.handshake(channel_max=0)  # we may use channel 0 only
    server = Server.__new__(Server)
    server.peer, server.engine = peer, engine
    server.begin(0)  # answered on our channel 0
    server.begin(1, answer=False)  # no channel left to answer this one on
    server.send(1, attach(0, name="a"))
    server.send(1, attach(0, name="b"))  # handle in use
    out = server.out()
    assert [type(b) for b in out] == [Close]
    assert out[0].error.condition == E.HANDLE_IN_USE
    assert [v.scope for v in server.violations()] == ["session", "connection"]
    assert engine.finished


def test_echo_on_a_session_not_yet_answered_sends_nothing_before_the_begin() -> None:
    server = Server()
    session = server.begin(3, answer=False)
    server.send(3, flow(echo=True))
    assert server.out() == []  # no frame may precede our begin on that session
    session.begin()
    out = server.out()
    assert [type(b) for b in out] == [Begin]


def test_link_echo_before_our_attach_sends_nothing() -> None:
    server = Server()
    server.begin(0)
    server.send(0, attach(0, name="r", role=RECEIVER, source=Source(address="q")))
    (remote,) = of_type(server.peer.take_events(), RemoteAttach)
    server.send(0, flow(handle=0, credit=5, echo=True))
    assert server.out() == []
    assert of_type(server.peer.take_events(), FlowReceived)
    remote.link.attach(source=remote.attach.source)
    assert remote.link.credit == 5  # the pipelined flow's credit was kept
