"""Fuzzing the connection engine: random bytes, random frames, and mutated copies of a real
exchange (open/begin/attach/flow/transfer/disposition/detach/end/close, captured from an
EnginePair) fed to a server engine and to a client engine in random chunkings.

Whatever arrives: nothing escapes receive_data/tick (not even LocalUsageError), the output is
always bytes of well-formed frames within the peer's max-frame-size with nothing after our
close, and a connection-level violation is reported as a ProtocolViolation AND a close carrying
its condition.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import (
    Event,
    FlowReceived,
    ProtocolViolation,
    RemoteAttach,
    RemoteBegin,
    RemoteClose,
    RemoteDetach,
    RemoteEnd,
    RemoteOpen,
    TransferReceived,
)
from router.amqp.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, frame
from router.amqp.link import Link
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Source, Target
from router.amqp.performatives import (
    RECEIVER,
    SENDER,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    SaslInit,
    Transfer,
)
from router.amqp.sasl import SaslServerConfig

from router.testing.enginepair import EnginePair, WireFrame, parse_wire

FUZZ = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SMALL_FRAMES = 512  # what the fuzzing peer announces: the engine's frames must fit
SPEC_CONDITIONS = {v for k, v in vars(E).items() if k.isupper() and isinstance(v, str) and v.startswith("amqp:")}


OUR_LIMIT = 4096  # the engine under fuzz accepts larger frames than it may send


def server_config(max_frame_size: int = OUR_LIMIT) -> ConnectionConfig:
    return ConnectionConfig(container_id="server", server=True, max_frame_size=max_frame_size, channel_max=15)


def client_config(max_frame_size: int = OUR_LIMIT) -> ConnectionConfig:
    return ConnectionConfig(container_id="client", max_frame_size=max_frame_size, channel_max=15)


# --- an application that answers everything, as a router or broker would ------------------------


def respond(engine: Connection, events: list[Event]) -> None:
    """Answer the peer: open, begin, attach (granting credit), dispose, drain, detach, end,
    close. Application calls may raise LocalUsageError (the state may not allow them)."""
    for event in events:
        try:
            if isinstance(event, RemoteOpen):
                if engine.state.local.name == "UNINIT":
                    engine.open()
            elif isinstance(event, RemoteBegin):
                if event.session.state.local.name == "UNINIT":
                    event.session.begin()
            elif isinstance(event, RemoteAttach):
                link = event.link
                if link.state.local.name == "UNINIT":
                    link.attach(source=link.remote_source, target=link.remote_target)
                    if link.role is RECEIVER:
                        link.flow(10)
            elif isinstance(event, TransferReceived):
                if not event.more and not event.settled and not event.aborted:
                    event.link.dispose(event.delivery_id, state=ACCEPTED)
            elif isinstance(event, FlowReceived):
                if event.link.is_sender and event.link.drain:
                    event.link.complete_drain()
            elif isinstance(event, RemoteDetach):
                if event.link.state.local.name == "ACTIVE":
                    event.link.detach(closed=event.closed)
            elif isinstance(event, RemoteEnd):
                if event.session.state.local.name == "ACTIVE":
                    event.session.end()
            elif isinstance(event, RemoteClose):
                engine.close()
        except E.LocalUsageError:
            pass


# --- capturing real exchanges -------------------------------------------------------------------


def pump(pair: EnginePair) -> None:
    """Move bytes until quiet, with the responder running on whichever side is not scripted."""
    for _ in range(100):
        client_events, server_events = pair.pump()
        respond(pair.client, client_events)
        respond(pair.server, server_events)
        if not client_events and not server_events:
            return


def links_named(engine: Connection, name: str) -> Link:
    return next(link for s in engine.sessions for link in s.links if link.name == name)


@functools.lru_cache(maxsize=None)
def client_stream() -> bytes:
    """What a client wrote in a full exchange it drove (the server only answered)."""
    pair = EnginePair(client_config(SMALL_FRAMES), server_config(SMALL_FRAMES))
    c = pair.client
    c.open()
    pump(pair)
    session = c.begin_session()
    pump(pair)
    snd = session.attach_sender("up", target=Target(address="q"))
    rcv = session.attach_receiver("down", source=Source(address="q"))
    pump(pair)
    rcv.flow(5, echo=True)
    d0 = snd.send_transfer(b"small", b"hello")
    snd.send_transfer(b"big", bytes(range(256)) * 8)  # split to 512-byte frames
    snd.send_transfer(b"pre", b"settled", settled=True)
    snd.send_transfer(b"stream", b"part one", more=True)
    snd.abort()
    pump(pair)
    snd.dispose(d0, state=ACCEPTED, settled=True)
    rcv.flow(3, drain=True)
    snd.set_available(2)
    pump(pair)
    snd.detach(closed=False)
    pump(pair)
    rcv.detach()
    pump(pair)
    session.end()
    pump(pair)
    c.close()
    pump(pair)
    assert c.finished and pair.server.finished
    assert not [e for e in pair.server_events + pair.client_events if isinstance(e, ProtocolViolation)]
    return b"".join(pair.wire_to_server)


@functools.lru_cache(maxsize=None)
def server_stream() -> bytes:
    """What a server wrote in a full exchange it drove (the client only answered)."""
    pair = EnginePair(client_config(SMALL_FRAMES), server_config(SMALL_FRAMES))
    s = pair.server
    pair.client.open()
    pump(pair)
    session = s.begin_session()
    pump(pair)
    snd = session.attach_sender("down", source=Source(address="q"))
    rcv = session.attach_receiver("up", target=Target(address="q"))
    pump(pair)
    rcv.flow(4)
    for i in range(3):
        snd.send_transfer(b"t%d" % i, bytes([i]) * (300 * i + 10))
    snd.send_transfer(b"pre", b"x", settled=True)
    snd.send_transfer(b"aborted", b"partial", more=True)
    snd.abort()
    pump(pair)
    rcv.flow(2, drain=True, echo=True)
    pump(pair)
    session.disposition(RECEIVER, 0, 2, state=RELEASED, settled=True)
    snd.detach(error=Error(condition=E.DETACH_FORCED, description="bye"))
    pump(pair)
    session.end()
    pump(pair)
    s.close()
    pump(pair)
    assert s.finished and pair.client.finished
    assert not [e for e in pair.server_events + pair.client_events if isinstance(e, ProtocolViolation)]
    return b"".join(pair.wire_to_client)


def split_frames(stream: bytes) -> tuple[bytes, list[bytes]]:
    """(protocol header, frames as raw bytes)."""
    assert stream[:8] == AMQP_HEADER
    frames, pos = [], 8
    while pos < len(stream):
        size = struct.unpack_from(">I", stream, pos)[0]
        frames.append(stream[pos : pos + size])
        pos += size
    return stream[:8], frames


# --- the engine under fuzz and the invariants of its output -------------------------------------


@dataclass
class Subject:
    engine: Connection
    output: bytearray
    events: list[Event]
    peer_max_frame_size: int

    @classmethod
    def server(cls) -> Subject:
        return cls(Connection(server_config()), bytearray(), [], SMALL_FRAMES)

    @classmethod
    def client(cls) -> Subject:
        engine = Connection(client_config())
        engine.open()
        return cls(engine, bytearray(), [], SMALL_FRAMES)

    def feed(self, data: bytes, now: float = 0.0) -> None:
        closed_before = self.engine.state.local.name == "CLOSED"
        self.engine.receive_data(data, now)  # must never raise
        self.collect(closed_before)

    def tick(self, now: float) -> None:
        closed_before = self.engine.state.local.name == "CLOSED"
        self.engine.tick(now)  # must never raise
        self.collect(closed_before)

    def collect(self, closed_before: bool) -> None:
        events = self.engine.events()
        self.events += events
        out = self.engine.data_to_send()
        assert type(out) is bytes
        fatal = [e for e in events if isinstance(e, ProtocolViolation) and e.scope == "connection"]
        if fatal:
            assert self.engine.finished
            if not closed_before and self.engine.remote_open is not None:
                # the close that this violation caused carries its condition
                closes = [f.body for f in parse_wire(out) if isinstance(f, WireFrame) and isinstance(f.body, Close)]
                assert len(closes) == 1 and closes[0].error is not None
                assert closes[0].error.condition == fatal[0].condition
        respond(self.engine, events)
        out += self.engine.data_to_send()
        self.output += out
        assert isinstance(self.engine.next_deadline(), (float, int, type(None)))

    def feed_chunked(self, data: bytes, chunks: list[int]) -> None:
        pos, i = 0, 0
        while pos < len(data):
            size = chunks[i % len(chunks)] if chunks else len(data)
            self.feed(data[pos : pos + size], now=float(i))
            pos += size
            i += 1

    def violations(self) -> list[ProtocolViolation]:
        return [e for e in self.events if isinstance(e, ProtocolViolation)]

    def check(self) -> list[WireFrame]:
        """The invariants every output must satisfy; returns the frames written."""
        items = parse_wire(bytes(self.output))  # well-formed, complete frames only
        frames = [item for item in items if isinstance(item, WireFrame)]
        for item in frames:
            assert item.size <= self.peer_max_frame_size, item.body
        closes = [i for i, f in enumerate(frames) if isinstance(f.body, Close)]
        assert len(closes) <= 1
        if closes:
            assert closes[0] == len(frames) - 1, "a frame after our close"  # transport §2.4.3
        for v in self.violations():
            assert v.condition in SPEC_CONDITIONS, v
        for v in self.violations():
            if v.scope == "session":
                ends = [f.body for f in frames if isinstance(f.body, End) and f.body.error is not None]
                assert any(end.error.condition == v.condition for end in ends) or closes
            if v.scope == "link":
                detaches = [f.body for f in frames if isinstance(f.body, Detach) and f.body.error is not None]
                assert any(d.error.condition == v.condition for d in detaches) or closes
        return frames


def handshaken(kind: str) -> Subject:
    """A target after a valid handshake: AMQP header and open from the fuzzing peer."""
    target = Subject.server() if kind == "server" else Subject.client()
    target.feed(AMQP_HEADER + frame(0, Open(container_id="fuzzer", max_frame_size=SMALL_FRAMES, channel_max=15)))
    assert not target.violations()
    return target


def with_link(target: Subject) -> Subject:
    """Also a session on channel 0 and a link (handle 0) on which we may send."""
    target.feed(frame(0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
    target.feed(frame(0, Attach(name="fuzz", handle=0, role=SENDER, target=Target(address="q"), initial_delivery_count=0)))
    return target


# --- sanity: the captured exchanges replay cleanly ----------------------------------------------


@FUZZ
@given(chunks=st.lists(st.integers(1, 600), min_size=1, max_size=8))
def test_unmutated_streams_replay_without_violations(chunks: list[int]) -> None:
    for kind, stream in (("server", client_stream()), ("client", server_stream())):
        target = Subject.server() if kind == "server" else Subject.client()
        target.feed_chunked(stream, chunks)
        assert target.violations() == []
        assert target.engine.remote_open is not None
        assert any(isinstance(e, RemoteClose) for e in target.events)
        frames = target.check()
        assert isinstance(frames[-1].body, Close) and frames[-1].body.error is None


def test_captured_exchanges_cover_every_performative() -> None:
    for stream in (client_stream(), server_stream()):
        kinds = {type(f.body) for f in parse_wire(stream) if isinstance(f, WireFrame)}
        assert {Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close} <= kinds


# --- random bytes -------------------------------------------------------------------------------


@FUZZ
@given(
    kind=st.sampled_from(["server", "client"]),
    data=st.binary(min_size=1, max_size=600),
    chunks=st.lists(st.integers(1, 64), max_size=6),
    linked=st.booleans(),
)
def test_random_bytes_after_the_handshake(kind: str, data: bytes, chunks: list[int], linked: bool) -> None:
    target = handshaken(kind)
    if linked:
        with_link(target)
    target.feed_chunked(data, chunks)
    target.tick(1000.0)
    target.check()
    # Whatever frame the random bytes left open, a run of 0xff ends it and then is a frame
    # header far above max-frame-size: the input is invalid, so the engine must have said so.
    target.feed(b"\xff" * (OUR_LIMIT + 16))
    target.check()
    assert target.engine.finished
    assert target.violations() or (
        target.engine.state.local.name == "CLOSED" and target.engine.state.remote.name == "CLOSED"
    )


@FUZZ
@given(data=st.binary(min_size=1, max_size=300), sasl=st.booleans())
def test_random_bytes_before_and_during_the_header(data: bytes, sasl: bool) -> None:
    config = ConnectionConfig(
        container_id="server", server=True, max_frame_size=SMALL_FRAMES,
        sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS", "PLAIN"), check_plain=lambda a, u, p: p == "ok") if sasl else None,
    )  # fmt: skip
    target = Subject(Connection(config), bytearray(), [], SMALL_FRAMES)
    target.feed(data)
    target.tick(10.0)
    out = bytes(target.output)
    if len(data) >= 8 and data[:8] not in (AMQP_HEADER, SASL_HEADER):
        assert target.engine.finished and out in (AMQP_HEADER, SASL_HEADER)
        assert target.violations()[0].condition == E.FRAMING_ERROR


@FUZZ
@given(data=st.binary(min_size=1, max_size=300), chunks=st.lists(st.integers(1, 32), max_size=4))
def test_random_bytes_in_the_sasl_exchange(data: bytes, chunks: list[int]) -> None:
    config = ConnectionConfig(
        container_id="server", server=True, max_frame_size=SMALL_FRAMES,
        sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS",)),
    )  # fmt: skip
    target = Subject(Connection(config), bytearray(), [], SMALL_FRAMES)
    target.feed(SASL_HEADER)
    target.feed_chunked(data, chunks)
    target.feed(b"\xff" * (SMALL_FRAMES + 16))
    assert target.engine.finished or target.engine.user is not None
    for item in parse_wire(bytes(target.output)):
        assert isinstance(item, bytes) or item.type == FRAME_SASL


# --- random frames ------------------------------------------------------------------------------

uints = st.one_of(st.integers(0, 3), st.sampled_from([255, 256, 2**31, 2**32 - 1]))
small_handles = st.one_of(st.integers(0, 2), st.sampled_from([2**32 - 1]))


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


names = st.sampled_from(["fuzz", "other", "n" * 600, "ünïcode" * 100])  # errors may quote names
errors = maybe(st.builds(Error, condition=st.sampled_from([E.NOT_FOUND, "x:y"]), description=maybe(st.text(max_size=700))))

performatives = st.one_of(
    st.builds(Open, container_id=st.text(max_size=10), max_frame_size=uints, channel_max=st.integers(0, 0xFFFF)),
    st.builds(
        Begin, remote_channel=maybe(st.integers(0, 3)), next_outgoing_id=uints, incoming_window=uints,
        outgoing_window=uints, handle_max=uints,
    ),
    st.builds(
        Attach, name=names, handle=small_handles, role=st.booleans(), snd_settle_mode=st.integers(0, 2),
        rcv_settle_mode=st.integers(0, 1), target=maybe(st.builds(Target, address=st.sampled_from(["q", "x" * 500]))),
        initial_delivery_count=maybe(uints), max_message_size=maybe(uints),
    ),
    st.builds(
        Flow, next_incoming_id=maybe(uints), incoming_window=uints, next_outgoing_id=uints,
        outgoing_window=uints, handle=maybe(small_handles), delivery_count=maybe(uints),
        link_credit=maybe(uints), available=maybe(uints), drain=st.booleans(), echo=st.booleans(),
    ),
    st.builds(
        Transfer, handle=small_handles, delivery_id=maybe(uints), delivery_tag=maybe(st.binary(max_size=40)),
        message_format=maybe(uints), settled=maybe(st.booleans()), more=st.booleans(),
        aborted=st.booleans(), state=maybe(st.just(Accepted())),
    ),
    st.builds(
        Disposition, role=st.booleans(), first=uints, last=maybe(uints), settled=st.booleans(),
        state=maybe(st.sampled_from([ACCEPTED, RELEASED])),
    ),
    st.builds(Detach, handle=small_handles, closed=st.booleans(), error=errors),
    st.builds(End, error=errors),
    st.builds(Close, error=errors),
)
frames_strategy = st.lists(
    st.tuples(st.sampled_from([0] * 8 + [1, 15, 16, 0xFFFF]), performatives, st.binary(max_size=80)),
    min_size=1,
    max_size=12,
)


@FUZZ
@given(
    kind=st.sampled_from(["server", "client"]),
    items=frames_strategy,
    chunks=st.lists(st.integers(1, 200), max_size=5),
    linked=st.booleans(),
)
def test_random_frames_after_the_handshake(kind: str, items: list[tuple[int, Any, bytes]], chunks: list[int], linked: bool) -> None:
    target = handshaken(kind)
    if linked:
        with_link(target)
    data = b"".join(frame(channel, body, payload if isinstance(body, Transfer) else b"") for channel, body, payload in items)
    target.feed_chunked(data, chunks)
    target.tick(5.0)
    target.check()


link_performatives = st.one_of(
    st.builds(Attach, name=names, handle=st.integers(0, 2), role=st.booleans(), initial_delivery_count=maybe(uints)),
    st.builds(Transfer, handle=st.integers(0, 2), delivery_id=maybe(uints), delivery_tag=maybe(st.binary(max_size=8)), more=st.booleans()),
    st.builds(Flow, incoming_window=uints, next_outgoing_id=uints, outgoing_window=uints, handle=st.integers(0, 2), link_credit=maybe(uints)),
    st.builds(Detach, handle=st.integers(0, 2), closed=st.booleans()),
)


@FUZZ
@given(
    kind=st.sampled_from(["server", "client"]),
    items=st.lists(link_performatives, min_size=1, max_size=10),
    chunks=st.lists(st.integers(1, 200), max_size=3),
)
def test_random_link_frames_on_one_session(kind: str, items: list[Any], chunks: list[int]) -> None:
    """Attach/transfer/flow/detach on a few handles of one session: the link- and session-level
    checks, and errors that quote the peer's (long) link names."""
    target = handshaken(kind)
    target.feed(frame(0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
    target.feed_chunked(b"".join(frame(0, body, b"payload" if isinstance(body, Transfer) else b"") for body in items), chunks)
    target.check()


# --- mutated real exchanges ---------------------------------------------------------------------

mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 7)),
        st.tuples(st.just("truncate"), st.integers(0, 10**6), st.integers(0, 10**6), st.just(0)),
        st.tuples(st.just("duplicate"), st.integers(0, 10**6), st.just(0), st.just(0)),
        st.tuples(st.just("swap"), st.integers(0, 10**6), st.integers(0, 10**6), st.just(0)),
        st.tuples(st.just("drop"), st.integers(0, 10**6), st.just(0), st.just(0)),
        st.tuples(st.just("byte"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("rename"), st.integers(0, 10**6), st.integers(0, 700), st.just(0)),
    ),
    min_size=1,
    max_size=4,
)


def mutate(frames: list[bytes], ops: list[tuple[str, int, int, int]]) -> list[bytes]:
    frames = list(frames)
    for op, a, b, c in ops:
        if not frames:
            break
        i = a % len(frames)
        if not frames[i] and op in ("flip", "byte", "truncate"):
            continue
        if op == "flip":
            data = bytearray(frames[i])
            data[b % len(data)] ^= 1 << c
            frames[i] = bytes(data)
        elif op == "byte":
            data = bytearray(frames[i])
            data[b % len(data)] = c
            frames[i] = bytes(data)
        elif op == "truncate":
            frames[i] = frames[i][: b % len(frames[i])]
        elif op == "duplicate":
            frames.insert(i, frames[i])
        elif op == "swap":
            j = b % len(frames)
            frames[i], frames[j] = frames[j], frames[i]
        elif op == "drop":
            del frames[i]
        elif op == "rename":  # re-encode an attach with a long name (errors quote names)
            try:
                parsed = parse_wire(frames[i])
            except (E.DecodeError, AssertionError, struct.error):
                continue  # an earlier mutation broke it
            body = parsed[0] if parsed else None  # a truncation may have left no whole frame
            if isinstance(body, WireFrame) and isinstance(body.body, Attach):
                attach = dataclasses.replace(body.body, name="x" * b)
                frames[i] = frame(body.channel, attach)
    return frames


@FUZZ
@given(
    kind=st.sampled_from(["server", "client"]),
    ops=mutations,
    chunks=st.lists(st.integers(1, 700), max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_mutated_exchanges(kind: str, ops: list[tuple[str, int, int, int]], chunks: list[int], cut: int | None) -> None:
    header, frames = split_frames(client_stream() if kind == "server" else server_stream())
    data = header + b"".join(mutate(frames, ops))
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    target = Subject.server() if kind == "server" else Subject.client()
    target.feed_chunked(data, chunks)
    target.tick(float(len(data)))
    target.check()


@FUZZ
@given(kind=st.sampled_from(["server", "client"]), at=st.integers(1, 40), chunks=st.lists(st.integers(1, 300), max_size=4))
def test_duplicated_open_is_always_refused(kind: str, at: int, chunks: list[int]) -> None:
    header, frames = split_frames(client_stream() if kind == "server" else server_stream())
    at = 1 + at % (len(frames) - 1)  # somewhere after the first open
    mutated = frames[:at] + [frames[0]] + frames[at:]
    target = Subject.server() if kind == "server" else Subject.client()
    target.feed_chunked(header + b"".join(mutated), chunks)
    target.check()
    (violation,) = target.violations()
    assert violation.condition == E.NOT_ALLOWED and violation.scope == "connection"
    assert target.engine.finished


@FUZZ
@given(kind=st.sampled_from(["server", "client"]), which=st.integers(0, 40), size=st.integers(OUR_LIMIT + 1, 2**32 - 1))
def test_frame_size_above_the_limit_is_always_a_framing_error(kind: str, which: int, size: int) -> None:
    header, frames = split_frames(client_stream() if kind == "server" else server_stream())
    i = 1 + which % (len(frames) - 1)
    mutated = list(frames)
    mutated[i] = struct.pack(">I", size) + mutated[i][4:]
    target = Subject.server() if kind == "server" else Subject.client()
    target.feed(header + b"".join(mutated))
    frames_out = target.check()
    violations = target.violations()
    assert [v.condition for v in violations] == [E.FRAMING_ERROR]
    closes = [f.body for f in frames_out if isinstance(f.body, Close)]
    assert closes and closes[-1].error.condition == E.FRAMING_ERROR


@FUZZ
@given(kind=st.sampled_from(["server", "client"]), times=st.lists(st.floats(0, 1e6, allow_nan=False), max_size=6))
def test_ticks_at_any_time_never_raise(kind: str, times: list[float]) -> None:
    target = Subject.server() if kind == "server" else Subject.client()
    header, frames = split_frames(client_stream() if kind == "server" else server_stream())
    target.feed(header + frames[0])
    for now in sorted(times):
        target.tick(now)
    target.check()


def test_sasl_init_after_the_amqp_header_is_a_framing_error() -> None:
    target = handshaken("server")
    target.feed(frame(0, SaslInit(mechanism="ANONYMOUS"), frame_type=FRAME_SASL))
    target.check()
    assert [v.condition for v in target.violations()] == [E.FRAMING_ERROR]
