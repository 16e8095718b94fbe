"""Properties of the engine, checked with hypothesis:

(a) the endpoint state tables (endpoints.py): any sequence of local and remote inputs moves the
    halves only along the tables, and every step not in a table raises (LocalUsageError for a
    local input, ProtocolError for a remote one) without changing the state;
(b) random sequences of application commands on an EnginePair never make either engine raise
    anything but LocalUsageError, and every delivery sent unsettled on a link that stays attached
    gets a DispositionReceived once the receiver settles it;
(c) the serial-number helpers (serial.py, RFC 1982 on 32 bits) wrap around correctly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.endpoints import ACTIVE, CLOSED, LOCAL_TABLE, REMOTE_TABLE, UNINIT, Action, Halves, Input, State
from router.amqp.events import (
    DispositionReceived,
    Event,
    ProtocolViolation,
    RemoteAttach,
    RemoteBegin,
    TransferReceived,
)
from router.amqp.link import Link
from router.amqp.messaging import ACCEPTED, RELEASED, Source, Target
from router.amqp.performatives import RCV_FIRST, RCV_SECOND, RECEIVER, SENDER, Error
from router.amqp.serial import SERIAL_MOD, serial_add, serial_diff, serial_ids_in, serial_le, serial_lt, serial_range
from router.amqp.session import Session

from router.testing.enginepair import EnginePair

# --- (a) the state tables -----------------------------------------------------------------------

steps = st.lists(st.tuples(st.booleans(), st.sampled_from(list(Input))), max_size=12)


@given(steps=steps, kind=st.sampled_from(["connection", "session", "link"]))
def test_halves_move_only_along_the_tables(steps: list[tuple[bool, Input]], kind: str) -> None:
    halves = Halves(kind)
    assert halves.local is UNINIT and halves.remote is UNINIT
    for local, what in steps:
        before = (halves.local, halves.remote)
        if local:
            step = LOCAL_TABLE.get((halves.local, what))
            if step is None:
                with pytest.raises(E.LocalUsageError) as info:
                    halves.local_input(what)
                assert info.value.condition == E.ILLEGAL_STATE
                assert (halves.local, halves.remote) == before
            else:
                assert halves.local_input(what) is step[0]
                assert (halves.local, halves.remote) == (step[1], before[1])
        else:
            step = REMOTE_TABLE.get((halves.remote, what))
            if step is None:
                with pytest.raises(E.ProtocolError) as perr:
                    halves.remote_input(what, "frame", E.NOT_ALLOWED)
                assert perr.value.condition == E.NOT_ALLOWED and perr.value.scope == kind
                assert (halves.local, halves.remote) == before
            else:
                halves.remote_input(what, "frame", E.NOT_ALLOWED)
                assert (halves.local, halves.remote) == (before[0], step[1])
        # states never move backwards
        assert halves.local >= before[0] and halves.remote >= before[1]
        assert halves.both_closed == (halves.local is CLOSED and halves.remote is CLOSED)


def test_tables_cover_the_lifecycle() -> None:
    # each half goes UNINIT -> ACTIVE -> CLOSED; closing what was never opened opens it first
    assert LOCAL_TABLE[(UNINIT, Input.OPEN)] == (Action.SEND_OPEN, ACTIVE)
    assert LOCAL_TABLE[(ACTIVE, Input.CLOSE)] == (Action.SEND_CLOSE, CLOSED)
    assert LOCAL_TABLE[(UNINIT, Input.CLOSE)] == (Action.SEND_OPEN_THEN_CLOSE, CLOSED)
    assert REMOTE_TABLE[(UNINIT, Input.OPEN)] == (Action.NONE, ACTIVE)
    assert REMOTE_TABLE[(ACTIVE, Input.CLOSE)] == (Action.NONE, CLOSED)
    for state in State:
        for what in Input:
            for table in (LOCAL_TABLE, REMOTE_TABLE):
                step = table.get((state, what))
                assert step is None or step[1] > state
    assert (UNINIT, Input.CLOSE) not in REMOTE_TABLE  # the peer must attach before detaching
    assert all((CLOSED, what) not in LOCAL_TABLE and (CLOSED, what) not in REMOTE_TABLE for what in Input)


# --- (b) random application commands on an engine pair ------------------------------------------

# Commands, the common ones repeated so that sequences reach the interesting states often.
OPS = (
    "open", "close", "begin", "answer_begin", "end", "attach", "answer_attach", "detach",
    "abort", "complete_drain", "set_available", "tick",
    *("flow", "send", "dispose", "pump") * 8,
)  # fmt: skip

commands = st.lists(
    st.tuples(
        st.sampled_from(OPS),
        st.integers(0, 1),  # side: 0 client, 1 server
        st.integers(0, 7),  # which object
        st.integers(0, 2000),  # a size, a credit, a count
        st.booleans(),
        st.booleans(),
    ),
    min_size=5,
    max_size=60,
)


@dataclass
class Sent:
    link: Link
    session: Session
    delivery_id: int
    settled: bool
    complete: bool = False
    aborted: bool = False
    disposed: bool = False  # a DispositionReceived covered it


@dataclass
class Received:
    link: Link
    delivery_id: int
    settled: bool
    complete: bool = False
    aborted: bool = False
    disposed_settled: bool = False


@dataclass
class World:
    pair: EnginePair
    sessions: tuple[list[Session], list[Session]] = field(default_factory=lambda: ([], []))
    links: tuple[list[Link], list[Link]] = field(default_factory=lambda: ([], []))
    sent: list[Sent] = field(default_factory=list)
    received: tuple[list[Received], list[Received]] = field(default_factory=lambda: ([], []))
    violations: list[ProtocolViolation] = field(default_factory=list)
    names: int = 0

    def engine(self, side: int) -> Connection:
        return self.pair.client if side == 0 else self.pair.server

    def pick(self, items: list[Any], index: int) -> Any:
        return items[index % len(items)] if items else None

    def pump(self) -> None:
        client_events, server_events = self.pair.pump()
        self.absorb(0, client_events)
        self.absorb(1, server_events)

    def absorb(self, side: int, events: list[Event]) -> None:
        for event in events:
            assert isinstance(event, get_args(Event))
            if isinstance(event, RemoteBegin) and event.session not in self.sessions[side]:
                self.sessions[side].append(event.session)
            elif isinstance(event, RemoteAttach) and event.link not in self.links[side]:
                self.links[side].append(event.link)
            elif isinstance(event, TransferReceived):
                self.on_transfer(side, event)
            elif isinstance(event, DispositionReceived):
                for record in self.sent:
                    if (
                        record.session is event.session
                        and serial_le(event.first, record.delivery_id)
                        and serial_le(record.delivery_id, event.last)
                    ):
                        record.disposed = True
            elif isinstance(event, ProtocolViolation):
                self.violations.append(event)

    def on_transfer(self, side: int, event: TransferReceived) -> None:
        records = self.received[side]
        current = next(
            (r for r in records if r.link is event.link and r.delivery_id == event.delivery_id and not r.complete),
            None,
        )
        if current is None:
            assert event.first
            current = Received(event.link, event.delivery_id, event.settled)
            records.append(current)
        current.settled = current.settled or event.settled
        if event.aborted:
            current.aborted = current.complete = True
        elif not event.more:
            current.complete = True

    def run(self, op: str, side: int, which: int, n: int, flag1: bool, flag2: bool) -> None:
        engine = self.engine(side)
        sessions, links = self.sessions[side], self.links[side]
        if op == "open":
            engine.open()
        elif op == "close":
            if n % 4 == 0:  # rarer still: nothing much happens after a close
                engine.close(Error(condition=E.CONNECTION_FORCED) if flag1 else None)
        elif op == "begin":
            sessions.append(engine.begin_session(incoming_window=(n % 5) + 1 if flag1 else 2**31 - 1))
        elif op == "answer_begin":
            session = self.pick([x for x in sessions if x.state.local is UNINIT] or sessions, which)
            if session is not None:
                session.begin(incoming_window=(n % 4) + 1 if flag1 else 2**31 - 1)
        elif op == "end":
            session = self.pick(sessions, which)
            if session is not None:
                session.end()
        elif op == "attach":
            session = self.pick(sessions, which)
            if session is not None:
                self.names += 1
                name = f"link-{side}-{self.names}"
                modes = {"rcv_settle_mode": RCV_SECOND if flag2 else RCV_FIRST}
                if flag1:
                    links.append(session.attach_sender(name, target=Target(address=name), **modes))
                else:
                    links.append(session.attach_receiver(name, source=Source(address=name), **modes))
        elif op == "answer_attach":
            link = self.pick([x for x in links if x.state.local is UNINIT] or links, which)
            if link is not None:
                link.attach(source=link.remote_source, target=link.remote_target)
        elif op == "flow":
            link = self.pick([x for x in links if x.role is RECEIVER] or links, which)
            if link is not None:
                link.flow(n % 20, drain=flag1, echo=flag2)
        elif op == "send":
            link = self.pick([x for x in links if x.role is SENDER] or links, which)
            if link is not None:
                self.send(link, n, flag1, more=flag2 and n % 3 == 0)
        elif op == "abort":
            link = self.pick([x for x in links if x.out_delivery >= 0] or links, which)
            if link is not None:
                link.abort()
                self.finish_sent(link, aborted=True)
        elif op == "complete_drain":
            link = self.pick([x for x in links if x.drain] or links, which)
            if link is not None:
                link.complete_drain()
        elif op == "set_available":
            link = self.pick(links, which)
            if link is not None:
                link.set_available(n)
        elif op == "dispose":
            record = self.pick([r for r in self.received[side] if r.complete and not r.settled], which)
            if record is not None and not record.settled and not record.disposed_settled:
                record.link.dispose(record.delivery_id, state=ACCEPTED if flag1 else RELEASED, settled=flag2)
                record.disposed_settled = flag2
        elif op == "detach":
            link = self.pick(links, which)
            if link is not None:
                was_streaming = link.out_delivery >= 0
                link.detach(closed=flag1)
                if was_streaming:
                    self.finish_sent(link, aborted=True)
        elif op == "pump":
            self.pump()
        elif op == "tick":
            self.pair.now += n / 100
            self.pair.client.tick(self.pair.now)
            self.pair.server.tick(self.pair.now)

    def setup(self) -> None:
        """Open both ends, one session, a link each way with some credit."""
        client, server = self.pair.client, self.pair.server
        client.open()
        server.open()
        self.sessions[0].append(client.begin_session())
        self.pump()
        self.sessions[1][0].begin()
        self.sessions[0][0].attach_sender("c2s", target=Target(address="c2s"))
        self.sessions[0][0].attach_receiver("s2c", source=Source(address="s2c"))
        self.pump()
        for link in self.links[1]:
            link.attach(source=link.remote_source, target=link.remote_target)
        self.pump()
        for side in (0, 1):
            for link in self.links[side]:
                if link.role is RECEIVER:
                    link.flow(5)
        self.pump()
        self.links[0].extend(link for link in self.sessions[0][0].links if link not in self.links[0])

    def send(self, link: Link, size: int, settled: bool, more: bool) -> None:
        continuing = link.out_delivery >= 0
        delivery_id = link.send_transfer(b"tag-%d" % size, bytes(size % 1500), settled=settled, more=more)
        if not continuing:
            self.sent.append(Sent(link, link.session, delivery_id, settled))
        record = next(r for r in reversed(self.sent) if r.link is link and r.delivery_id == delivery_id)
        record.settled = record.settled or settled or link.snd_settle_mode == 1
        if not more:
            record.complete = True

    def finish_sent(self, link: Link, *, aborted: bool) -> None:
        for record in self.sent:
            if record.link is link and not record.complete:
                record.complete = True
                record.aborted = aborted

    def settle_everything(self) -> None:
        """The receivers settle every complete delivery they hold, then the pair goes quiet."""
        for side in (0, 1):
            for record in self.received[side]:
                if record.complete and not record.aborted and not record.settled and not record.disposed_settled:
                    try:
                        record.link.dispose(record.delivery_id, state=ACCEPTED, settled=True)
                        record.disposed_settled = True
                    except E.LocalUsageError:
                        pass
        self.pump()


def alive(link: Link) -> bool:
    """The link, its session and its connection are open at both ends."""
    session, conn = link.session, link.session.conn
    return (
        link.state.local is ACTIVE and link.state.remote is ACTIVE
        and session.state.local is ACTIVE and session.state.remote is ACTIVE
        and conn.state.local is ACTIVE and conn.state.remote is ACTIVE and not conn.failed
    )  # fmt: skip


CONFIGS = st.sampled_from(
    [
        (ConnectionConfig(container_id="client"), ConnectionConfig(container_id="server", server=True)),
        (
            ConnectionConfig(container_id="client", max_frame_size=512, channel_max=1),
            ConnectionConfig(container_id="server", server=True, max_frame_size=600, channel_max=2),
        ),
    ]
)


@settings(max_examples=300)
@given(config=CONFIGS, script=commands)
def test_random_commands_never_break_either_engine(
    config: tuple[ConnectionConfig, ConnectionConfig], script: list[tuple[str, int, int, int, bool, bool]]
) -> None:
    world = World(EnginePair(*config))
    world.setup()
    for op, side, which, n, flag1, flag2 in script:
        try:
            world.run(op, side, which, n, flag1, flag2)
        except E.LocalUsageError:
            pass  # the application asked for something the state does not allow
        assert isinstance(world.pair.client.pending_output, int)
    world.pump()
    world.settle_everything()
    world.pump()
    # Well-behaved engines never accuse each other (a receiver that reduced its credit while
    # transfers were in flight handles them normally, transport §2.6.7).
    assert world.violations == []
    for record in world.sent:
        if record.complete and not record.aborted and not record.settled and alive(record.link):
            assert record.disposed, record


@settings(max_examples=100)
@given(script=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000), st.booleans()), min_size=1, max_size=30),
       window=st.integers(1, 6), credit=st.integers(1, 30))
def test_everything_sent_unsettled_is_settled_by_the_receiver(
    script: list[tuple[int, int, bool]], window: int, credit: int
) -> None:
    """A focused form of (b): sends on two links, small frames and windows, with re-grants of
    credit; every unsettled delivery ends with a disposition at the sender."""
    pair = EnginePair(
        ConnectionConfig(container_id="client"),
        ConnectionConfig(container_id="server", server=True, max_frame_size=512),
    )
    world = World(pair)
    pair.open()
    cs = pair.client.begin_session()
    world.pump()
    ss = pair.server.sessions[0]
    ss.begin(incoming_window=window)
    world.pump()
    senders = []
    for name in ("a", "b"):
        link = cs.attach_sender(name, target=Target(address=name))
        world.pump()
        remote = [l for l in ss.links if l.name == name][0]
        remote.attach(target=remote.remote_target)
        remote.flow(credit)
        world.pump()
        senders.append((link, remote))
    for which, size, settled in script:
        snd, rcv = senders[which % 2]
        if snd.credit == 0:
            world.pump()  # the receiver grants afresh once it has seen what was sent
            rcv.flow(credit)
            world.pump()
        world.send(snd, size, settled, more=which >= 2)
        if which >= 2:
            world.send(snd, size // 2, settled, more=False)
        if which == 3:
            world.pump()
    world.pump()
    world.settle_everything()
    assert world.violations == []
    expected = [r for r in world.sent if not r.settled]
    assert all(r.disposed for r in expected)
    assert cs.blocked_frames == 0
    received_ids = sorted(r.delivery_id for r in world.received[1])
    assert received_ids == sorted(r.delivery_id for r in world.sent)


# --- (c) serial numbers -------------------------------------------------------------------------

serials = st.one_of(
    st.integers(0, SERIAL_MOD - 1),
    st.integers(SERIAL_MOD - 1000, SERIAL_MOD - 1),
    st.integers(0, 1000),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**31 + 1, SERIAL_MOD - 1]),
)
steps_within = st.integers(-(2**31) + 1, 2**31 - 1)


@given(first=serials, width=st.sampled_from([0, 1, 5, 100, 2**31 - 1]),
       held=st.sets(serials, max_size=20), near=st.lists(st.integers(0, 120), max_size=10))  # fmt: skip
def test_serial_ids_in_names_every_held_id_in_the_range_and_stays_bounded(
    first: int, width: int, held: set[int], near: list[int]
) -> None:
    # A disposition may name 2**31 ids: the ids to look up stay bounded by what is held.
    held |= {serial_add(first, n) for n in near}  # some inside the range, some past its end
    named = list(serial_ids_in(first, serial_add(first, width), held))
    inside = sorted((k for k in held if serial_diff(k, first) in range(width + 1)), key=lambda k: serial_diff(k, first))
    assert [k for k in named if k in held] == inside
    assert len(named) <= 2 * len(held) + 64


@given(a=serials, n=st.integers(-(2**40), 2**40))
def test_serial_add_stays_in_range_and_inverts(a: int, n: int) -> None:
    b = serial_add(a, n)
    assert 0 <= b < SERIAL_MOD
    assert b == (a + n) % SERIAL_MOD
    assert serial_add(b, -n) == a


@given(a=serials, n=steps_within)
def test_serial_diff_recovers_the_step(a: int, n: int) -> None:
    b = serial_add(a, n)
    assert serial_diff(b, a) == n
    assert serial_diff(a, b) == -n
    assert serial_lt(a, b) == (n > 0)
    assert serial_le(a, b) == (n >= 0)
    assert serial_lt(b, a) == (n < 0)


@given(a=serials, b=serials)
def test_serial_diff_range_and_antisymmetry(a: int, b: int) -> None:
    d = serial_diff(a, b)
    assert -(2**31) < d <= 2**31
    assert serial_add(b, d) == a
    if d != 2**31:  # the one distance whose direction is undefined (RFC 1982 §3.2)
        assert serial_diff(b, a) == -d
        assert serial_lt(a, b) != serial_lt(b, a) or a == b
    assert serial_le(a, a) and not serial_lt(a, a)


@given(a=serials, n=st.integers(0, 2000))
def test_serial_range_wraps(a: int, n: int) -> None:
    last = serial_add(a, n)
    values = list(serial_range(a, last))
    assert values == [serial_add(a, i) for i in range(n + 1)]
    assert len(values) == n + 1 and values[0] == a and values[-1] == last
    if n:
        assert list(serial_range(last, a)) == [] or serial_diff(a, last) >= 0


def test_serial_wrap_examples() -> None:
    top = SERIAL_MOD - 1
    assert serial_add(top, 1) == 0
    assert serial_diff(0, top) == 1 and serial_lt(top, 0)
    assert serial_diff(2, top - 1) == 4
    assert list(serial_range(top - 1, 1)) == [top - 1, top, 0, 1]
    assert list(serial_range(5, 4)) == []
    assert serial_diff(2**31, 0) == 2**31
