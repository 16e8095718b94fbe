"""The protocol-header and SASL stage alone (router/amqp/handshake.py): a Handshake driven
through a recording HandshakeOwner, with no Connection and no sockets.

The owner routes reads as the Connection does: to the handshake until it starts the AMQP
stage, then to its own `amqp` bytes (what the frame loop would get); nothing while a failed
login is held or after the end.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.connection import ConnectionConfig
from router.amqp.events import Authenticated, AuthenticationFailed, Event, ProtocolViolation
from router.amqp.frameout import FrameOutput
from router.amqp.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, TLS_HEADER, frame
from router.amqp.handshake import Handshake
from router.amqp.performatives import (
    SASL_AUTH,
    SASL_OK,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)
from router.amqp.sasl import SaslClientConfig, SaslResult, SaslServerConfig

OPEN = frame(0, Open(container_id="peer"))
ANONYMOUS = SaslServerConfig(mechanisms=("ANONYMOUS",))


def sasl(body: object) -> bytes:
    return frame(0, body, frame_type=FRAME_SASL)


def plain_check(authzid: str, user: str, password: str) -> bool:
    return password == "s3cret"


PLAIN = SaslServerConfig(mechanisms=("PLAIN",), check_plain=plain_check)


class Owner:
    """Records what the handshake changes in its connection."""

    def __init__(self) -> None:
        self.output = FrameOutput()
        self.sasl_failure_delay: Callable[[float, SaslResult], float] | None = None
        self.events: list[Event] = []
        self.stage = "handshake"  # handshake, amqp, held, done
        self.amqp = bytearray()  # what the AMQP frame loop got
        self.user: str | None = None
        self.amqp_headers = 0

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def handshake_failed(self) -> None:
        assert self.stage in ("handshake", "held")
        self.stage = "done"

    def hold_failed_login(self) -> None:
        assert self.stage == "handshake"
        self.stage = "held"

    def start_amqp(self, rest: bytes) -> None:
        assert self.stage == "handshake"
        self.stage = "amqp"
        self.amqp += rest

    def authenticated(self, user: str | None) -> None:
        self.user = user

    def write_amqp_header(self) -> None:
        self.output.pieces.append(AMQP_HEADER)
        self.amqp_headers += 1


class Side:
    """A handshake and its owner, fed as the Connection feeds them."""

    def __init__(self, *, server: bool = True, **config: object) -> None:
        self.owner = Owner()
        cfg = ConnectionConfig(container_id="me", server=server, **config)  # type: ignore[arg-type]
        self.handshake = Handshake(cfg, self.owner.output, self.owner)

    def feed(self, data: bytes, now: float = 0.0) -> None:
        if self.owner.stage == "amqp":
            self.owner.amqp += data
        elif self.owner.stage == "handshake":
            self.handshake.receive(data, now)

    def out(self) -> bytes:
        return self.owner.output.take()

    @property
    def stage(self) -> str:
        return self.owner.stage

    @property
    def events(self) -> list[Event]:
        return self.owner.events


def violation(side: Side) -> ProtocolViolation:
    (event,) = side.events
    assert isinstance(event, ProtocolViolation)
    assert event.condition == E.FRAMING_ERROR and event.scope == "connection"
    return event


# --- protocol headers (transport §2.2, security §5.1) --------------------------------------------


def test_amqp_header_is_answered_and_the_rest_of_the_read_goes_to_the_amqp_stage() -> None:
    side = Side()
    assert side.out() == b""  # a server waits for the client's header
    side.feed(AMQP_HEADER[:5])
    assert side.out() == b"" and side.stage == "handshake"
    side.feed(AMQP_HEADER[5:] + OPEN)
    assert side.out() == AMQP_HEADER and side.owner.amqp_headers == 1
    assert side.stage == "amqp" and bytes(side.owner.amqp) == OPEN
    assert side.events == [] and side.owner.user is None


@pytest.mark.parametrize(
    ("sasl_server", "header", "reply", "why"),
    [
        (None, b"AMQP\x00\x01\x01\x00", AMQP_HEADER, "unsupported protocol header"),
        (None, TLS_HEADER, AMQP_HEADER, "unsupported protocol header"),
        (ANONYMOUS, b"HTTP/1.1", SASL_HEADER, "unsupported protocol header"),  # SASL is what we want
        (None, SASL_HEADER, AMQP_HEADER, "SASL is not offered"),
        (ANONYMOUS, AMQP_HEADER, SASL_HEADER, "SASL is required"),
    ],
)
def test_a_refused_header_is_answered_with_ours_then_the_stream_ends(
    sasl_server: SaslServerConfig | None, header: bytes, reply: bytes, why: str
) -> None:
    side = Side(sasl_server=sasl_server)
    side.feed(header + OPEN)
    assert side.out() == reply
    assert side.stage == "done" and side.owner.amqp == b"" and side.owner.amqp_headers == 0
    assert why in violation(side).description
    side.handshake.receive(AMQP_HEADER, 1.0)  # (the owner reads nothing then; nor does it)
    assert side.out() == b"" and len(side.events) == 1


def test_a_listener_that_allows_no_sasl_takes_the_amqp_header() -> None:
    side = Side(sasl_server=SaslServerConfig(mechanisms=("ANONYMOUS",), allow_no_sasl=True))
    side.feed(AMQP_HEADER)
    assert side.out() == AMQP_HEADER and side.stage == "amqp" and side.events == []


def test_sasl_header_after_the_sasl_exchange_is_refused() -> None:
    side = Side(sasl_server=ANONYMOUS)
    side.feed(SASL_HEADER + sasl(SaslInit(mechanism="ANONYMOUS", initial_response=b"x")) + SASL_HEADER)
    mechanisms = sasl(SaslMechanisms(sasl_server_mechanisms=("ANONYMOUS",)))
    outcome = sasl(SaslOutcome(code=SASL_OK))
    assert side.out() == SASL_HEADER + mechanisms + outcome + AMQP_HEADER
    authenticated, refused = side.events
    assert isinstance(authenticated, Authenticated) and side.owner.user == "anonymous"
    assert isinstance(refused, ProtocolViolation) and "after SASL already completed" in refused.description
    assert side.stage == "done" and side.owner.amqp_headers == 0


# --- SASL frames (security §5.3) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        b"\x00\x01\x00\x01\x02\x01\x00\x00",  # above our max-frame-size
        b"\x00\x00\x00\x10\x01\x01\x00\x00",  # doff below 2
        b"\x00\x00\x00\x08\x03\x01\x00\x00",  # doff beyond the frame
        b"\x00\x00\x00\x04\x02\x01\x00\x00",  # size below the header's
    ],
)
def test_a_malformed_sasl_frame_header_ends_the_stream_without_a_reply(bad: bytes) -> None:
    side = Side(sasl_server=ANONYMOUS, max_frame_size=65536)
    side.feed(SASL_HEADER)
    assert side.out().startswith(SASL_HEADER)
    side.feed(bad + b"\x00" * 64)
    assert side.out() == b"" and side.stage == "done"
    assert "malformed SASL frame header" in violation(side).description


@pytest.mark.parametrize(
    "body",
    [
        frame(0, Open(container_id="x")),  # an AMQP frame where a SASL frame must be
        sasl(Open(container_id="x")),  # a SASL frame type with an AMQP body
        sasl(SaslOutcome(code=SASL_OK)),  # a server's frame sent to the server
    ],
)
def test_a_wrong_sasl_frame_fails_the_negotiation(body: bytes) -> None:
    side = Side(sasl_server=ANONYMOUS)
    side.feed(SASL_HEADER + body)
    assert side.out().startswith(SASL_HEADER) and side.stage == "done"
    assert "SASL negotiation failed" in violation(side).description


def test_a_sasl_frame_cut_anywhere_waits_for_the_rest() -> None:
    side = Side(sasl_server=PLAIN)
    side.feed(SASL_HEADER)
    side.out()
    init = sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00s3cret"))
    side.feed(init[:3])
    side.feed(init[3:-1])
    assert side.out() == b"" and side.events == [] and side.owner.user is None
    side.feed(init[-1:])
    assert side.out() == sasl(SaslOutcome(code=SASL_OK)) and side.owner.user == "u"


# --- a failed login held back (security §5.3.3.6) ------------------------------------------------


def test_a_failed_login_is_held_until_its_deadline_then_sent_and_the_stream_ends() -> None:
    side = Side(sasl_server=PLAIN)
    asked: list[tuple[float, SaslResult]] = []

    def delay(now: float, result: SaslResult) -> float:
        asked.append((now, result))
        return 2.0

    side.owner.sasl_failure_delay = delay
    assert side.handshake.deadline() is None
    side.feed(SASL_HEADER, 10.0)
    side.out()
    side.feed(sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00mallory\x00guess")) + AMQP_HEADER, 10.0)
    ((now, result),) = asked
    assert now == 10.0 and not result.ok and result.user_given == "mallory"
    assert side.stage == "held" and side.out() == b"" and side.events == []
    assert side.handshake.deadline() == 12.0
    side.handshake.receive(b"\x00" * 100, 10.5)  # dropped (the owner would not pass it on)
    side.handshake.tick(11.99)
    assert side.out() == b"" and side.stage == "held"
    side.handshake.tick(12.0)
    assert side.out() == sasl(SaslOutcome(code=SASL_AUTH))
    (failed,) = side.events
    assert isinstance(failed, AuthenticationFailed) and failed.code == SASL_AUTH
    assert side.stage == "done" and side.handshake.deadline() is None and side.owner.user is None
    side.handshake.tick(20.0)
    assert side.out() == b"" and len(side.events) == 1  # sent once


def test_a_failed_login_without_a_delay_is_answered_at_once() -> None:
    side = Side(sasl_server=PLAIN)
    side.owner.sasl_failure_delay = lambda now, result: 0.0
    side.feed(SASL_HEADER + sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00guess")))
    assert side.out().endswith(sasl(SaslOutcome(code=SASL_AUTH)))
    assert side.stage == "done" and side.handshake.deadline() is None
    (failed,) = side.events
    assert isinstance(failed, AuthenticationFailed)


def test_a_client_never_holds_a_failed_login() -> None:
    client = Side(server=False, sasl_client=SaslClientConfig(mechanisms=("PLAIN",), username="u", password="p"))
    client.owner.sasl_failure_delay = lambda now, result: pytest.fail("a client asked for a delay")
    assert client.out() == SASL_HEADER
    client.feed(SASL_HEADER + sasl(SaslMechanisms(sasl_server_mechanisms=("ANONYMOUS",))))
    assert client.out() == b"" and client.stage == "done"  # no usable mechanism
    (failed,) = client.events
    assert isinstance(failed, AuthenticationFailed)


# --- after the SASL exchange ---------------------------------------------------------------------


def test_bytes_after_the_sasl_exchange_go_to_the_amqp_stage_in_the_same_read() -> None:
    side = Side(sasl_server=ANONYMOUS)
    side.feed(SASL_HEADER + sasl(SaslInit(mechanism="ANONYMOUS")) + AMQP_HEADER + OPEN + b"more")
    assert side.stage == "amqp" and bytes(side.owner.amqp) == OPEN + b"more"
    assert side.out().endswith(sasl(SaslOutcome(code=SASL_OK)) + AMQP_HEADER)
    (authenticated,) = side.events
    assert isinstance(authenticated, Authenticated) and authenticated.mechanism == "ANONYMOUS"


def test_a_client_runs_sasl_then_sends_its_amqp_header() -> None:
    client = Side(server=False, sasl_client=SaslClientConfig(mechanisms=("PLAIN",), username="u", password="p"))
    assert client.out() == SASL_HEADER and client.owner.amqp_headers == 0
    client.feed(SASL_HEADER + sasl(SaslMechanisms(sasl_server_mechanisms=("PLAIN", "ANONYMOUS"))))
    assert client.out() == sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00p"))
    client.feed(sasl(SaslChallenge(challenge=b"")))
    assert client.out() == sasl(SaslResponse(response=b"\x00u\x00p"))
    client.feed(sasl(SaslOutcome(code=SASL_OK)) + AMQP_HEADER + OPEN)
    assert client.out() == AMQP_HEADER and client.stage == "amqp" and bytes(client.owner.amqp) == OPEN
    assert client.owner.user == "u"


def test_a_plain_client_sends_its_header_first_and_refuses_a_sasl_answer() -> None:
    client = Side(server=False)
    assert client.out() == AMQP_HEADER and client.owner.amqp_headers == 1
    client.feed(SASL_HEADER)
    assert client.out() == b"" and client.stage == "done"  # nothing to answer a server with
    assert "server answered protocol header" in violation(client).description


# --- however the reads split the bytes ------------------------------------------------------------

CLIENT_STREAMS = {
    "anonymous": SASL_HEADER + sasl(SaslInit(mechanism="ANONYMOUS")) + AMQP_HEADER + OPEN,
    "plain": SASL_HEADER + sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00s3cret")) + AMQP_HEADER + OPEN,
    "plain asked": SASL_HEADER + sasl(SaslInit(mechanism="PLAIN")) + sasl(SaslResponse(response=b"\x00u\x00s3cret"))
    + AMQP_HEADER + OPEN,
    "refused": SASL_HEADER + sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00wrong")) + AMQP_HEADER,
    "no sasl": AMQP_HEADER + OPEN,
}


def _outcome(reads: list[bytes]) -> tuple[bytes, str, bytes, str | None, list[Event]]:
    side = Side(sasl_server=SaslServerConfig(mechanisms=("PLAIN", "ANONYMOUS"), check_plain=plain_check))
    for read in reads:
        side.feed(read)
    return side.out(), side.stage, bytes(side.owner.amqp), side.owner.user, side.events


@given(st.sampled_from(sorted(CLIENT_STREAMS)), st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_split_of_a_client_stream_has_the_same_outcome(name: str, cuts: list[int]) -> None:
    stream = CLIENT_STREAMS[name]
    points = sorted({min(cut, len(stream)) for cut in cuts})
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True) if b > a]
    assert b"".join(reads) == stream
    assert _outcome(reads) == _outcome([stream])


def test_the_client_streams_end_as_expected() -> None:
    assert _outcome([CLIENT_STREAMS["plain asked"]])[1:4] == ("amqp", OPEN, "u")
    assert _outcome([CLIENT_STREAMS["refused"]])[1:4] == ("done", b"", None)
    out, stage, amqp, user, events = _outcome([CLIENT_STREAMS["no sasl"]])
    assert (out, stage, amqp, user) == (SASL_HEADER, "done", b"", None)  # SASL is required
    assert isinstance(events[0], ProtocolViolation)
