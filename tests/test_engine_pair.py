"""The connection engine against itself: two sans-IO engines back to back (EnginePair), one test
per state transition and feature of transport §2.2-§2.7 and the SASL layer (security §5.3).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

from typing import Any

import pytest

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import (
    Authenticated,
    AuthenticationFailed,
    DispositionReceived,
    FlowReceived,
    ProtocolViolation,
    RemoteAttach,
    RemoteBegin,
    RemoteClose,
    RemoteDetach,
    RemoteEnd,
    RemoteOpen,
    TransferReceived,
    TransportClosed,
)
from router.amqp.framing import AMQP_HEADER, EMPTY_FRAME, FRAME_SASL, SASL_HEADER, TLS_HEADER, frame
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Rejected, Source, Target
from router.amqp.performatives import (
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SASL_AUTH,
    SASL_OK,
    SASL_SYS_PERM,
    SENDER,
    SND_SETTLED,
    SND_UNSETTLED,
    Begin,
    Close,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    Transfer,
)
from router.amqp.sasl import SaslClientConfig, SaslServerConfig
from router.amqp.session import Session

from router.testing.enginepair import (
    EnginePair,
    attach_pair,
    begin_pair,
    bodies,
    connected_pair,
    of_type,
    parse_wire,
    wire_frames,
)

CLIENT = ConnectionConfig(container_id="client")
SERVER = ConnectionConfig(container_id="server", server=True)


def server_config(**kw: object) -> ConnectionConfig:
    return ConnectionConfig(container_id="server", server=True, **kw)  # type: ignore[arg-type]


def client_config(**kw: object) -> ConnectionConfig:
    return ConnectionConfig(container_id="client", **kw)  # type: ignore[arg-type]


def sent(pair: EnginePair, kind: type, *, to_server: bool = True) -> list[Any]:
    """Every performative of `kind` that crossed the wire in one direction so far."""
    wire = pair.wire_to_server if to_server else pair.wire_to_client
    return bodies(b"".join(wire), kind)


def server_answering(data: bytes, config: ConnectionConfig) -> Connection:
    engine = Connection(config)
    engine.receive_data(data, 0.0)
    return engine


# --- protocol header negotiation (transport §2.2, security §5.1) -------------------------------


def test_plain_amqp_headers_are_exchanged() -> None:
    pair = EnginePair()
    pair.pump()
    assert parse_wire(b"".join(pair.wire_to_server)) == [AMQP_HEADER]
    assert parse_wire(b"".join(pair.wire_to_client)) == [AMQP_HEADER]
    assert not pair.client.finished and not pair.server.finished
    assert pair.client_events == [] and pair.server_events == []


def test_header_arriving_one_byte_at_a_time() -> None:
    server = Connection(SERVER)
    for i, byte in enumerate(AMQP_HEADER):
        assert server.data_to_send() == b""
        server.receive_data(bytes([byte]), float(i))
    assert server.data_to_send() == AMQP_HEADER
    assert server.events() == []


def test_header_and_open_in_one_chunk() -> None:
    server = Connection(SERVER)
    server.receive_data(AMQP_HEADER + frame(0, Open(container_id="c")), 0.0)
    (event,) = server.events()
    assert isinstance(event, RemoteOpen) and event.open.container_id == "c"


@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x00\x01\x01\x00",  # a version we do not speak
        b"AMQP\x00\x02\x00\x00",
        b"AMQP\x01\x01\x00\x00",  # an unknown protocol id
        b"HTTP/1.1",
        b"GET / HT",
        TLS_HEADER,  # TLS on a plain listener
        b"\x00" * 8,
    ],
)
def test_unsupported_header_is_answered_with_ours_then_closed(header: bytes) -> None:
    server = server_answering(header + b"trailing junk", SERVER)
    assert server.data_to_send() == AMQP_HEADER  # transport §2.2: reply with what we support
    assert server.finished  # ... and close the stream
    (violation,) = server.events()
    assert isinstance(violation, ProtocolViolation)
    assert violation.condition == E.FRAMING_ERROR and violation.scope == "connection"
    server.receive_data(b"more junk", 1.0)  # ignored once finished
    assert server.data_to_send() == b"" and server.events() == []


def test_unsupported_header_on_a_sasl_listener_is_answered_with_the_sasl_header() -> None:
    server = server_answering(TLS_HEADER, server_config(sasl_server=SaslServerConfig()))
    assert server.data_to_send() == SASL_HEADER
    assert server.finished
    assert isinstance(server.events()[0], ProtocolViolation)


def test_plain_amqp_to_a_listener_requiring_sasl() -> None:
    server = server_answering(AMQP_HEADER, server_config(sasl_server=SaslServerConfig()))
    assert server.data_to_send() == SASL_HEADER
    assert server.finished
    (violation,) = server.events()
    assert isinstance(violation, ProtocolViolation) and violation.condition == E.FRAMING_ERROR


def test_plain_amqp_accepted_where_sasl_is_optional() -> None:
    config = server_config(sasl_server=SaslServerConfig(allow_no_sasl=True))
    pair = EnginePair(CLIENT, config)
    pair.open()
    assert of_type(pair.server_events, RemoteOpen) and of_type(pair.client_events, RemoteOpen)
    assert pair.server.user is None


def test_sasl_header_to_a_plain_listener() -> None:
    server = server_answering(SASL_HEADER, SERVER)
    assert server.data_to_send() == AMQP_HEADER
    assert server.finished
    assert isinstance(server.events()[0], ProtocolViolation)


def test_client_refuses_a_server_answering_another_header() -> None:
    client = Connection(CLIENT)
    assert client.data_to_send() == AMQP_HEADER
    client.receive_data(SASL_HEADER, 0.0)
    assert client.finished
    (violation,) = client.events()
    assert isinstance(violation, ProtocolViolation) and violation.condition == E.FRAMING_ERROR


def test_sasl_client_refuses_a_server_skipping_sasl() -> None:
    pair = EnginePair(client_config(sasl_client=SaslClientConfig()), SERVER)
    pair.pump()
    assert pair.client.finished
    assert of_type(pair.client_events, ProtocolViolation)


def test_client_writes_frames_only_after_the_amqp_header_when_sasl_runs_first() -> None:
    pair = EnginePair(
        client_config(sasl_client=SaslClientConfig(mechanisms=("ANONYMOUS",))),
        server_config(sasl_server=SaslServerConfig()),
    )
    pair.client.open()  # queued until SASL is done
    assert pair.client.data_to_send() == SASL_HEADER
    pair.server.receive_data(SASL_HEADER, 0.0)
    pair.pump()
    items = parse_wire(b"".join(pair.wire_to_server))
    headers = [i for i, item in enumerate(items) if isinstance(item, bytes)]
    assert [items[i] for i in headers] == [AMQP_HEADER]
    opens = [i for i, item in enumerate(items) if not isinstance(item, bytes) and isinstance(item.body, Open)]
    assert opens and opens[0] > headers[0]
    sasl_frames = [item for item in items[: headers[0]] if not isinstance(item, bytes)]
    assert all(f.type == FRAME_SASL for f in sasl_frames)
    assert of_type(pair.server_events, RemoteOpen)


# --- SASL (security §5.3) ----------------------------------------------------------------------


def sasl_pair(client: SaslClientConfig, server: SaslServerConfig) -> EnginePair:
    pair = EnginePair(client_config(sasl_client=client), server_config(sasl_server=server))
    pair.pump()
    return pair


def check_plain(authzid: str, username: str, password: str) -> bool:
    return (username, password) in {("alice", "secret"), ("bob", "hunter2")}


def test_sasl_anonymous() -> None:
    pair = sasl_pair(SaslClientConfig(mechanisms=("ANONYMOUS",)), SaslServerConfig())
    (server_auth,) = of_type(pair.server_events, Authenticated)
    (client_auth,) = of_type(pair.client_events, Authenticated)
    assert server_auth.mechanism == client_auth.mechanism == "ANONYMOUS"
    assert pair.server.user == "anonymous"
    # SASL frames, then the AMQP header from each side
    assert parse_wire(b"".join(pair.wire_to_client))[-1] == AMQP_HEADER
    assert parse_wire(b"".join(pair.wire_to_server))[-1] == AMQP_HEADER
    pair.open()
    assert of_type(pair.server_events, RemoteOpen) and of_type(pair.client_events, RemoteOpen)


def test_sasl_mechanisms_are_offered_and_the_client_picks_its_preference() -> None:
    server = SaslServerConfig(mechanisms=("PLAIN", "ANONYMOUS"), check_plain=check_plain)
    pair = sasl_pair(SaslClientConfig(username="alice", password="secret"), server)
    (mechs,) = bodies(b"".join(pair.wire_to_client), SaslMechanisms)
    assert tuple(mechs.sasl_server_mechanisms) == ("PLAIN", "ANONYMOUS")
    (init,) = bodies(b"".join(pair.wire_to_server), SaslInit)
    assert init.mechanism == "PLAIN"  # EXTERNAL is preferred but not offered


def test_sasl_plain_good_credentials() -> None:
    server = SaslServerConfig(mechanisms=("PLAIN",), check_plain=check_plain)
    pair = sasl_pair(SaslClientConfig(username="alice", password="secret"), server)
    (auth,) = of_type(pair.server_events, Authenticated)
    assert auth.mechanism == "PLAIN" and auth.user == "alice"
    assert pair.server.user == "alice"
    (outcome,) = bodies(b"".join(pair.wire_to_client), SaslOutcome)
    assert outcome.code == SASL_OK
    pair.open()
    assert of_type(pair.server_events, RemoteOpen)


def test_sasl_plain_authzid_of_another_user_is_refused() -> None:
    # Acting for another user would let any user become any other (an operator, say): refused.
    server = SaslServerConfig(mechanisms=("PLAIN",), check_plain=check_plain)
    pair = sasl_pair(SaslClientConfig(username="bob", password="hunter2", authzid="admin"), server)
    (fail,) = of_type(pair.server_events, AuthenticationFailed)
    assert fail.code == SASL_AUTH and pair.server.user is None
    pair = sasl_pair(SaslClientConfig(username="bob", password="hunter2", authzid="bob"), server)
    assert pair.server.user == "bob"  # naming oneself is fine


def test_sasl_plain_bad_credentials() -> None:
    server = SaslServerConfig(mechanisms=("PLAIN",), check_plain=check_plain)
    pair = sasl_pair(SaslClientConfig(username="alice", password="wrong"), server)
    (server_fail,) = of_type(pair.server_events, AuthenticationFailed)
    (client_fail,) = of_type(pair.client_events, AuthenticationFailed)
    assert server_fail.code == client_fail.code == SASL_AUTH
    assert pair.server.finished and pair.client.finished
    assert not of_type(pair.server_events, Authenticated)
    # no AMQP at all after a failed outcome
    assert AMQP_HEADER not in parse_wire(b"".join(pair.wire_to_client))
    assert AMQP_HEADER not in parse_wire(b"".join(pair.wire_to_server))
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()


def test_sasl_plain_check_that_raises_is_a_failed_outcome() -> None:
    def broken(authzid: str, username: str, password: str) -> bool:
        raise RuntimeError("credential store down")

    server = SaslServerConfig(mechanisms=("PLAIN",), check_plain=broken)
    pair = sasl_pair(SaslClientConfig(username="alice", password="secret"), server)
    (fail,) = of_type(pair.server_events, AuthenticationFailed)
    assert fail.code == SASL_SYS_PERM


def test_sasl_plain_is_not_offered_without_a_check() -> None:
    pair = sasl_pair(
        SaslClientConfig(mechanisms=("PLAIN",), username="alice", password="secret"),
        SaslServerConfig(mechanisms=("PLAIN",)),
    )
    (mechs,) = bodies(b"".join(pair.wire_to_client), SaslMechanisms)
    assert tuple(mechs.sasl_server_mechanisms) == ()
    (fail,) = of_type(pair.client_events, AuthenticationFailed)
    assert "no usable mechanism" in fail.description
    assert pair.client.finished


def test_sasl_plain_challenge_when_init_has_no_response() -> None:
    server = Connection(server_config(sasl_server=SaslServerConfig(mechanisms=("PLAIN",), check_plain=check_plain)))
    server.receive_data(SASL_HEADER, 0.0)
    server.data_to_send()
    server.receive_data(frame(0, SaslInit(mechanism="PLAIN"), frame_type=FRAME_SASL), 0.0)
    (challenge,) = bodies(server.data_to_send())
    assert isinstance(challenge, SaslChallenge)
    response = SaslResponse(response=b"\x00alice\x00secret")
    server.receive_data(frame(0, response, frame_type=FRAME_SASL), 0.0)
    (outcome,) = bodies(server.data_to_send())
    assert isinstance(outcome, SaslOutcome) and outcome.code == SASL_OK
    assert of_type(server.events(), Authenticated)


def test_sasl_init_for_a_mechanism_not_offered() -> None:
    server = Connection(server_config(sasl_server=SaslServerConfig()))
    server.receive_data(SASL_HEADER, 0.0)
    server.receive_data(frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00a\x00b"), frame_type=FRAME_SASL), 0.0)
    outcome = bodies(server.data_to_send(), SaslOutcome)
    assert outcome[0].code == SASL_AUTH
    assert of_type(server.events(), AuthenticationFailed)
    assert server.finished


def test_sasl_external_with_an_identity() -> None:
    server = SaslServerConfig(mechanisms=("EXTERNAL", "ANONYMOUS"), external_identity="CN=alice")
    pair = sasl_pair(SaslClientConfig(), server)
    (auth,) = of_type(pair.server_events, Authenticated)
    assert auth.mechanism == "EXTERNAL" and auth.user == "CN=alice"
    assert pair.server.user == "CN=alice"
    (client_auth,) = of_type(pair.client_events, Authenticated)
    assert client_auth.mechanism == "EXTERNAL"


def test_sasl_external_without_an_identity_is_not_offered() -> None:
    server = SaslServerConfig(mechanisms=("EXTERNAL", "ANONYMOUS"))
    pair = sasl_pair(SaslClientConfig(), server)
    (mechs,) = bodies(b"".join(pair.wire_to_client), SaslMechanisms)
    assert "EXTERNAL" not in tuple(mechs.sasl_server_mechanisms)
    (auth,) = of_type(pair.server_events, Authenticated)
    assert auth.mechanism == "ANONYMOUS"  # the client fell back


def test_sasl_external_only_without_an_identity_fails() -> None:
    pair = sasl_pair(SaslClientConfig(mechanisms=("EXTERNAL",)), SaslServerConfig(mechanisms=("EXTERNAL",)))
    assert of_type(pair.client_events, AuthenticationFailed)
    assert pair.client.finished
    assert not of_type(pair.server_events, Authenticated)


def test_sasl_external_init_refused_when_the_transport_has_no_identity() -> None:
    server = Connection(server_config(sasl_server=SaslServerConfig(mechanisms=("EXTERNAL",))))
    server.receive_data(SASL_HEADER, 0.0)
    server.receive_data(frame(0, SaslInit(mechanism="EXTERNAL", initial_response=b""), frame_type=FRAME_SASL), 0.0)
    assert bodies(server.data_to_send(), SaslOutcome)[0].code == SASL_AUTH
    assert of_type(server.events(), AuthenticationFailed)


# --- open and close (transport §2.4) ----------------------------------------------------------


def test_open_exchanges_limits() -> None:
    pair = EnginePair(client_config(max_frame_size=4096, channel_max=7), server_config(max_frame_size=1024))
    pair.open(hostname="example.com")
    (server_open,) = of_type(pair.server_events, RemoteOpen)
    assert server_open.open.container_id == "client" and server_open.open.hostname == "example.com"
    assert pair.server.remote_max_frame_size == 4096 and pair.server.remote_channel_max == 7
    assert pair.client.remote_max_frame_size == 1024
    (client_open,) = of_type(pair.client_events, RemoteOpen)
    assert client_open.open.container_id == "server"


def test_open_twice_is_local_misuse() -> None:
    pair = EnginePair()
    pair.open()
    with pytest.raises(E.LocalUsageError):
        pair.client.open()


@pytest.mark.parametrize("first", ["client", "server"])
def test_close_either_side_first(first: str) -> None:
    pair = EnginePair()
    pair.open()
    closer, other = (pair.client, pair.server) if first == "client" else (pair.server, pair.client)
    closer.close()
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_close,) = of_type(other_events, RemoteClose)
    assert remote_close.error is None
    assert not closer.finished and not other.finished
    other.close()
    client_events, server_events = pair.pump()
    closer_events = client_events if first == "client" else server_events
    assert of_type(closer_events, RemoteClose)
    assert pair.client.finished and pair.server.finished
    pair.client.receive_data(b"", 1.0)
    assert pair.client.events() == [TransportClosed(clean=True)]


def test_simultaneous_close() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.server.close(Error(condition=E.CONNECTION_FORCED, description="shutting down"))
    client_events, server_events = pair.pump()
    assert of_type(server_events, RemoteClose)
    (close,) = of_type(client_events, RemoteClose)
    assert close.error is not None and close.error.condition == E.CONNECTION_FORCED
    assert pair.client.finished and pair.server.finished
    assert len(sent(pair, Close)) == 1 and len(sent(pair, Close, to_server=False)) == 1


def test_close_with_an_error() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close(Error(condition=E.NOT_ALLOWED, description="no"))
    _, server_events = pair.pump()
    (close,) = of_type(server_events, RemoteClose)
    assert close.error == Error(condition=E.NOT_ALLOWED, description="no")
    assert pair.server.remote_error == close.error


def test_close_before_open_sends_open_then_close() -> None:
    pair = EnginePair()
    pair.client.close()
    _, server_events = pair.pump()
    kinds = [type(b) for b in sent(pair, object)]
    assert kinds == [Open, Close]
    assert [type(e) for e in server_events] == [RemoteOpen, RemoteClose]


def test_server_refusing_a_connection_opens_then_closes() -> None:
    pair = EnginePair()
    pair.client.open()
    pair.pump()
    pair.server.close(Error(condition=E.UNAUTHORIZED_ACCESS))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteOpen, RemoteClose]
    assert [type(b) for b in sent(pair, object, to_server=False)] == [Open, Close]


def test_close_twice_is_a_no_op() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.client.close()
    pair.pump()
    assert len(sent(pair, Close)) == 1


def test_transport_closed_without_close_is_unclean() -> None:
    pair = EnginePair()
    pair.open()
    pair.server.receive_data(b"", 1.0)
    assert pair.server.events() == [TransportClosed(clean=False)]
    assert pair.server.finished


def test_nothing_is_processed_after_both_closes() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.pump()
    pair.server.close()
    pair.pump()
    pair.server.receive_data(frame(0, Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1)), 2.0)
    assert pair.server.events() == [] and pair.server.data_to_send() == b""


def test_nothing_is_written_after_our_close() -> None:
    """transport §2.4.3: the close must be the last frame written on a connection."""
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    rcv2, snd2 = attach_pair(pair, cs, ss, "other", client_sends=False, credit=5)
    snd.send_transfer(b"a", b"x", more=True)
    pair.pump()
    pair.client.close()
    before = len(pair.client.data_to_send())
    assert before > 0
    for command in (
        lambda: snd.send_transfer(b"a", b"y"),
        lambda: snd.abort(),
        lambda: snd.set_available(1),
        lambda: snd.detach(),
        lambda: rcv2.flow(3),
        lambda: rcv2.dispose(0, state=ACCEPTED),
        lambda: cs.attach_sender("late"),
        lambda: cs.end(),
        lambda: pair.client.begin_session(),
        lambda: Session(pair.client, None).begin(),
    ):
        with pytest.raises(E.LocalUsageError):
            command()
    assert pair.client.data_to_send() == b""
    assert snd.state.local == 1 and cs.state.local == 1  # refused commands changed nothing


def test_peer_frames_after_our_close_are_discarded_until_its_close() -> None:
    pair, cs, ss = connected_pair()
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=5)
    pair.client.close()
    close = pair.client.data_to_send()
    # the server did not see the close yet: it keeps sending
    snd.send_transfer(b"late", b"x")
    snd.set_available(4)
    ss.disposition(SENDER, 0, state=ACCEPTED, settled=True)
    ss.end()
    to_client = pair.server.data_to_send()
    pair.client.receive_data(to_client, 0.0)
    assert pair.client.events() == []  # nothing reaches the application ...
    assert pair.client.data_to_send() == b""  # ... and nothing is answered
    pair.server.receive_data(close, 0.0)
    assert of_type(pair.server.events(), RemoteClose)
    pair.server.close()
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteClose]
    assert pair.client.finished


def test_link_commands_after_the_session_ended() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    cs.end()
    pair.client.data_to_send()
    for command in (
        lambda: snd.send_transfer(b"a", b"x"),
        lambda: snd.set_available(2),
        lambda: snd.complete_drain(),
        lambda: snd.detach(),
        lambda: snd.dispose(0, state=ACCEPTED),
    ):
        with pytest.raises(E.LocalUsageError):
            command()
    assert pair.client.data_to_send() == b""


def test_set_available_is_for_attached_senders() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    with pytest.raises(E.LocalUsageError):
        rcv.set_available(1)
    snd.detach()
    with pytest.raises(E.LocalUsageError):
        snd.set_available(1)


def test_begin_before_open_is_local_misuse() -> None:
    pair = EnginePair()
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()


# --- sessions (transport §2.5) ------------------------------------------------------------------


def test_begin_and_answer() -> None:
    pair, cs, ss = connected_pair()
    assert cs.state.local == cs.state.remote == ss.state.local == ss.state.remote == 1
    (server_begin,) = of_type(pair.server_events, RemoteBegin)
    assert server_begin.begin.remote_channel is None  # the client began it
    (client_begin,) = of_type(pair.client_events, RemoteBegin)
    assert client_begin.session is cs  # the answer reaches the session that began
    assert client_begin.begin.remote_channel == cs.channel
    assert cs.remote_channel == ss.channel and ss.remote_channel == cs.channel
    assert pair.client.sessions == [cs] and pair.server.sessions == [ss]


def test_server_begins_a_session() -> None:
    pair = EnginePair()
    pair.open()
    ss = pair.server.begin_session()
    client_events, _ = pair.pump()
    (remote_begin,) = of_type(client_events, RemoteBegin)
    remote_begin.session.begin()
    _, server_events = pair.pump()
    assert of_type(server_events, RemoteBegin)[0].session is ss
    assert ss.state.remote == 1


@pytest.mark.parametrize("first", ["client", "server"])
def test_end_either_side_first(first: str) -> None:
    pair, cs, ss = connected_pair()
    ender, other = (cs, ss) if first == "client" else (ss, cs)
    ender.end()
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_end,) = of_type(other_events, RemoteEnd)
    assert remote_end.session is other and remote_end.error is None
    other.end()
    client_events, server_events = pair.pump()
    ender_events = client_events if first == "client" else server_events
    assert of_type(ender_events, RemoteEnd)[0].session is ender
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_end_with_an_error() -> None:
    pair, cs, ss = connected_pair()
    ss.end(Error(condition=E.RESOURCE_LIMIT_EXCEEDED, description="too many"))
    client_events, _ = pair.pump()
    (end,) = of_type(client_events, RemoteEnd)
    assert end.error is not None and end.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert cs.remote_error == end.error


def test_simultaneous_end() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    ss.end()
    client_events, server_events = pair.pump()
    assert of_type(client_events, RemoteEnd) and of_type(server_events, RemoteEnd)
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_refusing_a_session_begins_then_ends() -> None:
    pair = EnginePair()
    pair.open()
    cs = pair.client.begin_session()
    _, server_events = pair.pump()
    ss = of_type(server_events, RemoteBegin)[0].session
    ss.end(Error(condition=E.RESOURCE_LIMIT_EXCEEDED))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteBegin, RemoteEnd]
    assert [type(b) for b in sent(pair, object, to_server=False)] == [Open, Begin, End]
    cs.end()
    pair.pump()
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_end_twice_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    with pytest.raises(E.LocalUsageError):
        cs.end()


def test_channel_allocation_reuses_freed_channels() -> None:
    pair = EnginePair()
    pair.open()
    sessions = [begin_pair(pair)[0] for _ in range(3)]
    assert [s.channel for s in sessions] == [0, 1, 2]
    server_channels = {s.channel for s in pair.server.sessions}
    assert server_channels == {0, 1, 2}
    middle = sessions[1]
    middle.end()
    _, server_events = pair.pump()
    of_type(server_events, RemoteEnd)[0].session.end()
    pair.pump()
    again, _ = begin_pair(pair)
    assert again.channel == 1


def test_channel_max_limits_sessions() -> None:
    pair = EnginePair(CLIENT, server_config(channel_max=1))
    pair.open()
    begin_pair(pair)
    begin_pair(pair)
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()
    assert len(pair.client.sessions) == 2


def test_local_channel_max_limits_our_own_sessions() -> None:
    pair = EnginePair(client_config(channel_max=0), SERVER)
    pair.open()
    begin_pair(pair)
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()


# --- links (transport §2.6) --------------------------------------------------------------------


@pytest.mark.parametrize("client_sends", [True, False])
def test_attach_both_roles(client_sends: bool) -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, "q1", client_sends=client_sends)
    assert cl.role is (SENDER if client_sends else RECEIVER)
    assert sl.role is (not cl.role)
    assert cl.active and sl.active
    (server_attach,) = of_type(pair.server_events, RemoteAttach)
    assert server_attach.link is sl and server_attach.attach.name == "q1"
    assert cl.local_handle == cl.remote_handle == sl.local_handle == sl.remote_handle == 0
    (client_attach,) = of_type(pair.client_events, RemoteAttach)
    assert client_attach.link is cl
    assert cs.links == [cl] and ss.links == [sl]
    if client_sends:
        assert server_attach.attach.initial_delivery_count == 0
        assert client_attach.attach.initial_delivery_count is None
    else:
        assert server_attach.attach.initial_delivery_count is None
        assert client_attach.attach.initial_delivery_count == 0


def test_responder_mirrors_the_settle_modes() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, client_attach={"snd_settle_mode": SND_SETTLED, "rcv_settle_mode": RCV_SECOND})
    assert sl.snd_settle_mode == SND_SETTLED and sl.rcv_settle_mode == RCV_SECOND
    answer = of_type(pair.client_events, RemoteAttach)[0].attach
    assert answer.snd_settle_mode == SND_SETTLED and answer.rcv_settle_mode == RCV_SECOND


@pytest.mark.parametrize("client_sends", [True, False])
@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("first", ["client", "server"])
def test_detach_closed_or_not(closed: bool, first: str, client_sends: bool) -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, client_sends=client_sends)
    detacher, other = (cl, sl) if first == "client" else (sl, cl)
    detacher.detach(closed=closed)
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_detach,) = of_type(other_events, RemoteDetach)
    assert remote_detach.link is other and remote_detach.closed is closed
    assert remote_detach.error is None and other.remote_closed is closed
    other.detach(closed=closed)
    client_events, server_events = pair.pump()
    detacher_events = client_events if first == "client" else server_events
    assert of_type(detacher_events, RemoteDetach)[0].closed is closed
    assert cs.links == [] and ss.links == [] and cs.links_by_local == {} and ss.links_by_remote == {}


def test_detach_with_an_error() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss)
    sl.detach(error=Error(condition=E.DETACH_FORCED, description="admin"))
    client_events, _ = pair.pump()
    (detach,) = of_type(client_events, RemoteDetach)
    assert detach.error == Error(condition=E.DETACH_FORCED, description="admin")
    assert cl.remote_error == detach.error


def test_reattach_after_detach_closed_false() -> None:
    pair, cs, ss = connected_pair()
    cl, sl = attach_pair(pair, cs, ss, "resumable")
    cl.detach(closed=False)
    pair.pump()
    sl.detach(closed=False)
    pair.pump()
    cl2, sl2 = attach_pair(pair, cs, ss, "resumable")
    assert cl2.active and sl2.active and cl2 is not cl


def test_refusing_a_link_attaches_with_null_terminus_then_detaches() -> None:
    pair, cs, ss = connected_pair()
    cl = cs.attach_sender("nope", target=Target(address="missing"))
    _, server_events = pair.pump()
    sl = of_type(server_events, RemoteAttach)[0].link
    sl.reject(Error(condition=E.NOT_FOUND, description="no such node"))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteAttach, RemoteDetach]
    (attach,), (detach,) = of_type(client_events, RemoteAttach), of_type(client_events, RemoteDetach)
    assert attach.attach.target is None and attach.attach.source is None
    assert detach.closed and detach.error.condition == E.NOT_FOUND
    cl.detach()
    pair.pump()
    assert cs.links == [] and ss.links == []


def test_detaching_a_link_never_attached_locally_refuses_it() -> None:
    pair, cs, ss = connected_pair()
    cs.attach_receiver("r", source=Source(address="s"))
    _, server_events = pair.pump()
    sl = of_type(server_events, RemoteAttach)[0].link
    sl.detach(error=Error(condition=E.UNAUTHORIZED_ACCESS))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteAttach, RemoteDetach]
    assert of_type(client_events, RemoteAttach)[0].attach.source is None


def test_handle_allocation_reuses_freed_handles() -> None:
    pair, cs, ss = connected_pair()
    links = [attach_pair(pair, cs, ss, f"l{i}")[0] for i in range(3)]
    assert [link.local_handle for link in links] == [0, 1, 2]
    links[1].detach()
    _, server_events = pair.pump()
    of_type(server_events, RemoteDetach)[0].link.detach()
    pair.pump()
    again, _ = attach_pair(pair, cs, ss, "again")
    assert again.local_handle == 1


def test_handle_max_limits_links() -> None:
    pair, cs, ss = connected_pair(server_begin={"handle_max": 1})
    assert cs.remote_handle_max == 1
    attach_pair(pair, cs, ss, "a")
    attach_pair(pair, cs, ss, "b")
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("c")


def test_duplicate_link_name_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.attach_sender("dup")
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("dup")
    cs.attach_receiver("dup")  # the other role is another link


def test_attach_on_a_session_not_begun_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    with pytest.raises(E.LocalUsageError):
        cs.attach_sender("late")


def test_max_message_size_is_advertised() -> None:
    pair, cs, ss = connected_pair()
    attach_pair(pair, cs, ss, client_attach={"max_message_size": 1000}, server_attach={"max_message_size": 2000})
    assert of_type(pair.server_events, RemoteAttach)[0].attach.max_message_size == 1000
    assert of_type(pair.client_events, RemoteAttach)[0].attach.max_message_size == 2000


# --- credit and delivery-count (transport §2.6.7) ----------------------------------------------


def test_credit_is_granted_and_consumed() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    assert snd.credit == 0
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"t", b"x")
    rcv.flow(5)
    client_events, _ = pair.pump()
    assert of_type(client_events, FlowReceived)[0].link is snd
    assert snd.credit == 5
    for i in range(2):
        snd.send_transfer(b"t%d" % i, b"x")
    assert snd.credit == 3 and snd.delivery_count == 2
    pair.pump()
    assert rcv.credit == 3 and rcv.delivery_count == 2


def test_credit_is_absolute_not_additive() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    pair.pump()
    rcv.flow(10)
    pair.pump()
    assert snd.credit == 10  # 2 + 10 - 2
    rcv.flow(1)
    pair.pump()
    assert snd.credit == 1
    rcv.flow(0)
    pair.pump()
    assert snd.credit == 0


def test_credit_formula_with_transfers_in_flight() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    # The receiver grants again before it saw the three transfers: delivery-count(rcv) = 0.
    rcv.flow(5)
    to_client = pair.server.data_to_send()
    pair.client.receive_data(to_client, 0.0)
    # link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd) = 0 + 5 - 3
    assert snd.credit == 2
    pair.pump()
    assert rcv.delivery_count == 3 and rcv.credit == 2
    assert len(of_type(pair.server_events, TransferReceived)) == 3


def test_reducing_credit_with_transfers_in_flight_handles_them_normally() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    rcv.flow(0)  # stop the sender, before the three transfers arrive
    client_events, server_events = pair.pump()
    # transport §2.6.7: the receiver MAY handle the excess normally; this engine does
    assert len(of_type(server_events, TransferReceived)) == 3
    assert not of_type(server_events, ProtocolViolation)
    assert rcv.credit == 0 and rcv.delivery_count == 3
    assert snd.credit == 0 and rcv.active and snd.active
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"more", b"x")
    rcv.flow(1)
    pair.pump()
    assert snd.credit == 1


def test_initial_delivery_count_sets_the_receivers_count() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": 1000})
    assert rcv.delivery_count == 1000 and snd.delivery_count == 1000
    rcv.flow(4)
    pair.pump()
    assert snd.credit == 4
    snd.send_transfer(b"a", b"x")
    pair.pump()
    assert rcv.delivery_count == 1001 and rcv.credit == 3


def test_sender_link_flow_reports_available() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.set_available(7)
    _, server_events = pair.pump()
    (flow,) = of_type(server_events, FlowReceived)
    assert flow.link is rcv and not flow.drained
    assert rcv.available == 7
    flows = [f for f in sent(pair, Flow) if f.handle is not None]
    assert flows[-1].available == 7 and flows[-1].link_credit == 1


def test_flow_is_only_for_receivers_and_drain_only_for_senders() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    with pytest.raises(E.LocalUsageError):
        snd.flow(1)
    with pytest.raises(E.LocalUsageError):
        rcv.complete_drain()
    with pytest.raises(E.LocalUsageError):
        rcv.send_transfer(b"t", b"x")
    with pytest.raises(E.LocalUsageError):
        rcv.flow(-1)


def test_drain() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(5, drain=True)
    client_events, _ = pair.pump()
    (flow,) = of_type(client_events, FlowReceived)
    assert flow.link is snd and snd.drain and snd.credit == 5
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    snd.complete_drain()
    assert snd.credit == 0 and snd.delivery_count == 5
    _, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 2
    (drained,) = of_type(server_events, FlowReceived)
    assert drained.drained and drained.link is rcv
    assert rcv.credit == 0 and rcv.delivery_count == 5 and not rcv.drain
    last_flow = [f for f in sent(pair, Flow) if f.handle is not None][-1]
    assert last_flow.delivery_count == 5 and last_flow.link_credit == 0
    # after the drain, new credit works from the advanced delivery-count
    rcv.flow(2)
    pair.pump()
    assert snd.credit == 2 and not snd.drain


def test_drain_with_no_messages() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(3, drain=True)
    pair.pump()
    snd.complete_drain()
    _, server_events = pair.pump()
    assert of_type(server_events, FlowReceived)[0].drained
    assert rcv.delivery_count == 3 and snd.delivery_count == 3


def test_echo() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    rcv.flow(3, echo=True)
    client_events, server_events = pair.pump()
    assert of_type(client_events, FlowReceived)[0].link is snd
    (answer,) = of_type(server_events, FlowReceived)
    assert answer.link is rcv and not answer.drained
    (request,) = [f for f in sent(pair, Flow, to_server=False) if f.handle is not None]
    assert request.echo and request.link_credit == 3
    (reply,) = [f for f in sent(pair, Flow) if f.handle is not None]
    assert not reply.echo and reply.link_credit == 3 and reply.delivery_count == 0


def test_session_flow_echo() -> None:
    pair, cs, ss = connected_pair()
    pair.server.receive_data(frame(ss.remote_channel or 0, Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100, echo=True)), 0.0)
    flows = bodies(pair.server.data_to_send(), Flow)
    assert len(flows) == 1 and flows[0].handle is None and not flows[0].echo


# --- transfers (transport §2.6.12-§2.6.14, §2.7.5) ---------------------------------------------


def test_transfer_fields_reach_the_receiver() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    delivery_id = snd.send_transfer(b"tag-1", b"payload", message_format=7)
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.link is rcv and t.delivery_id == delivery_id == 0
    assert t.delivery_tag == b"tag-1" and t.payload == b"payload" and t.message_format == 7
    assert t.first and not t.more and not t.aborted and not t.settled


def test_delivery_ids_are_per_session() -> None:
    pair, cs, ss = connected_pair()
    a, _ = attach_pair(pair, cs, ss, "a", credit=5)
    b, _ = attach_pair(pair, cs, ss, "b", credit=5)
    ids = [a.send_transfer(b"1", b""), b.send_transfer(b"2", b""), a.send_transfer(b"3", b"")]
    assert ids == [0, 1, 2]
    _, server_events = pair.pump()
    assert [t.delivery_id for t in of_type(server_events, TransferReceived)] == [0, 1, 2]


def test_multi_frame_delivery_with_more() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=2)
    d1 = snd.send_transfer(b"big", b"part1-", more=True)
    d2 = snd.send_transfer(b"ignored", b"part2-", more=True)
    d3 = snd.send_transfer(b"ignored", b"part3")
    assert d1 == d2 == d3 and snd.credit == 1
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert [t.more for t in parts] == [True, True, False]
    assert [t.first for t in parts] == [True, False, False]
    assert {t.delivery_id for t in parts} == {d1} and {t.delivery_tag for t in parts} == {b"big"}
    assert b"".join(t.payload for t in parts) == b"part1-part2-part3"
    assert rcv.credit == 1 and rcv.delivery_count == 1
    snd.send_transfer(b"next", b"x")
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.first and t.delivery_id == d1 + 1


@pytest.mark.parametrize("size", [0, 1, 400, 480, 481, 1000, 3000, 70000])
def test_payload_split_to_the_peers_max_frame_size(size: int) -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(max_frame_size=512))
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    payload = bytes(i % 251 for i in range(size))
    start = len(pair.wire_to_server)
    snd.send_transfer(b"t", payload)
    _, server_events = pair.pump()
    frames = [f for f in wire_frames(b"".join(pair.wire_to_server[start:])) if isinstance(f.body, Transfer)]
    assert all(f.size <= 512 for data in pair.wire_to_server for f in wire_frames(data))
    parts = of_type(server_events, TransferReceived)
    assert len(parts) == len(frames) >= 1
    assert [t.more for t in parts] == [True] * (len(parts) - 1) + [False]
    assert b"".join(t.payload for t in parts) == payload


def test_large_payload_from_the_server_to_a_small_frame_client() -> None:
    pair, cs, ss = connected_pair(client_config(max_frame_size=512), SERVER)
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=1)
    payload = bytes(range(256)) * 10
    snd.send_transfer(b"t", payload)
    client_events, _ = pair.pump()
    parts = of_type(client_events, TransferReceived)
    assert len(parts) > 5 and b"".join(t.payload for t in parts) == payload
    assert all(f.size <= 512 for data in pair.wire_to_client for f in wire_frames(data))


def test_aborted_transfer() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=2)
    snd.send_transfer(b"a", b"first half", more=True)
    snd.abort()
    with pytest.raises(E.LocalUsageError):
        snd.abort()
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert [t.aborted for t in parts] == [False, True]
    assert not parts[-1].more
    assert snd.credit == 1 and rcv.credit == 1  # an aborted delivery still used its credit
    snd.send_transfer(b"b", b"whole")
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.first and t.payload == b"whole" and t.delivery_tag == b"b"


def test_detach_aborts_a_delivery_in_progress() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"a", b"part", more=True)
    snd.detach()
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert parts[-1].aborted
    assert of_type(server_events, RemoteDetach)


def test_presettled_transfer() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"t", b"x", settled=True)
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived)[0].settled


def test_settled_on_a_later_frame_settles_the_delivery() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"t", b"a", more=True)
    snd.send_transfer(b"t", b"b", settled=True)
    _, server_events = pair.pump()
    assert [t.settled for t in of_type(server_events, TransferReceived)] == [False, True]


def test_snd_settle_mode_settled_forces_presettled() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1, client_attach={"snd_settle_mode": SND_SETTLED})
    snd.send_transfer(b"t", b"x")
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived)[0].settled


def test_snd_settle_mode_unsettled_refuses_presettled() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1, client_attach={"snd_settle_mode": SND_UNSETTLED})
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"t", b"x", settled=True)
    assert snd.credit == 1


def test_unsettled_transfer_and_disposition() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    d = snd.send_transfer(b"t", b"x")
    pair.pump()
    rcv.dispose(d, state=ACCEPTED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert disp.session is cs and disp.role is RECEIVER
    assert disp.first == disp.last == d and disp.settled and isinstance(disp.state, Accepted)


def test_disposition_range() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(5)]
    pair.pump()
    rcv.dispose(ids[0], ids[-1], state=RELEASED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert (disp.first, disp.last) == (0, 4) and disp.state == RELEASED
    (wire,) = sent(pair, Disposition, to_server=False)
    assert wire.first == 0 and wire.last == 4 and wire.role is RECEIVER


def test_disposition_with_other_outcomes() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    d = snd.send_transfer(b"t", b"x")
    pair.pump()
    rejected = Rejected(error=Error(condition=E.DECODE_ERROR, description="bad message"))
    rcv.dispose(d, state=rejected)
    client_events, _ = pair.pump()
    assert of_type(client_events, DispositionReceived)[0].state == rejected


def test_rcv_settle_mode_second() -> None:
    pair, cs, ss = connected_pair()
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=1, client_attach={"rcv_settle_mode": RCV_SECOND})
    assert snd.rcv_settle_mode == RCV_SECOND
    d = snd.send_transfer(b"t", b"x")
    client_events, _ = pair.pump()
    assert of_type(client_events, TransferReceived)
    rcv.dispose(d, state=ACCEPTED, settled=False)  # the receiver settles second
    _, server_events = pair.pump()
    (first,) = of_type(server_events, DispositionReceived)
    assert not first.settled and first.role is RECEIVER
    snd.dispose(d, state=ACCEPTED, settled=True)  # the sender settles first...
    client_events, _ = pair.pump()
    (second,) = of_type(client_events, DispositionReceived)
    assert second.settled and second.role is SENDER
    rcv.dispose(d, state=ACCEPTED, settled=True)  # ... and the receiver settles last
    _, server_events = pair.pump()
    assert of_type(server_events, DispositionReceived)[0].settled


def test_rcv_settle_mode_first_by_default() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    assert snd.rcv_settle_mode == rcv.rcv_settle_mode == RCV_FIRST


# --- session windows (transport §2.5.6) ---------------------------------------------------------


def test_small_incoming_window_queues_transfers_until_the_window_reopens() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    assert cs.remote_incoming_window == 2
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(5)]
    assert cs.blocked_frames == 3  # two fit the peer's window
    assert snd.credit == 5  # credit is spent when the application sends, queued or not
    first_batch = pair.client.data_to_send()
    assert [t.delivery_id for t in bodies(first_batch, Transfer)] == ids[:2]
    pair.server.receive_data(first_batch, 0.0)
    assert [t.delivery_id for t in of_type(pair.server.events(), TransferReceived)] == ids[:2]
    # the receiver reopened its window (each time it fell to half): session flows, which
    # release the queue
    reply = pair.server.data_to_send()
    flow = bodies(reply, Flow)[-1]
    assert flow.handle is None and flow.next_incoming_id == 2 and flow.incoming_window == 2
    pair.client.receive_data(reply, 0.0)
    assert cs.blocked_frames == 1
    assert [t.delivery_id for t in bodies(pair.client.data_to_send(), Transfer)] == ids[2:4]


def test_window_resumes_in_order() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"m%d" % i) for i in range(7)]
    assert cs.blocked_frames == 5
    _, server_events = pair.pump()
    transfers = of_type(server_events, TransferReceived)
    assert [t.delivery_id for t in transfers] == ids
    assert [t.payload for t in transfers] == [b"m%d" % i for i in range(7)]
    assert cs.blocked_frames == 0
    # the receiver replenished its window with session flows
    session_flows = [f for f in sent(pair, Flow, to_server=False) if f.handle is None]
    assert session_flows and all(f.incoming_window == 2 for f in session_flows)


def test_window_counts_frames_not_deliveries() -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(max_frame_size=512), server_begin={"incoming_window": 4})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    snd.send_transfer(b"t", bytes(2000))  # five frames of at most 512 bytes
    assert cs.blocked_frames == 1
    _, server_events = pair.pump()
    assert b"".join(t.payload for t in of_type(server_events, TransferReceived)) == bytes(2000)
    assert cs.blocked_frames == 0


def test_link_flow_of_a_blocked_sender_counts_only_sent_deliveries() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(5):
        snd.send_transfer(b"%d" % i, b"x")
    snd.set_available(3)  # queued behind the transfers
    assert cs.blocked_frames == 4
    pair.pump()
    link_flows = [f for f in sent(pair, Flow) if f.handle is not None]
    assert link_flows[-1].delivery_count == 5 and link_flows[-1].available == 3
    assert rcv.delivery_count == 5 and rcv.available == 3 and rcv.credit == 5


def test_sender_disposition_waits_behind_blocked_transfers() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(4)]
    snd.dispose(ids[0], ids[-1], state=ACCEPTED, settled=True)
    assert cs.blocked_frames == 3
    _, server_events = pair.pump()
    kinds = [type(e) for e in server_events if isinstance(e, (TransferReceived, DispositionReceived))]
    assert kinds == [TransferReceived] * 4 + [DispositionReceived]


def test_end_drops_blocked_frames() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    assert cs.blocked_frames == 2
    cs.end()
    assert cs.blocked_frames == 0
    _, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 1
    assert of_type(server_events, RemoteEnd)


def test_session_flow_fields_follow_the_transfer_ids() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 4})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(6):
        snd.send_transfer(b"%d" % i, b"x")
    pair.pump()
    assert ss.next_incoming_id == cs.next_outgoing_id == 6
    flows = [f for f in sent(pair, Flow, to_server=False) if f.handle is None]
    # transport §2.5.6: each flow moves the window's right edge (next-incoming-id +
    # incoming-window) forward, never back
    edges = [f.next_incoming_id + f.incoming_window for f in flows]
    assert edges == sorted(edges) and len(set(edges)) == len(edges)
    assert all(f.incoming_window == 4 for f in flows)
    assert cs.remote_incoming_window == edges[-1] - 6


# --- serial numbers wrap at 2**32 (transport §2.8.10) ------------------------------------------


def test_delivery_count_wraps_around() -> None:
    start = 2**32 - 3
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": start})
    assert rcv.delivery_count == start
    rcv.flow(4)
    pair.pump()
    assert snd.credit == 4
    for i in range(4):
        snd.send_transfer(b"%d" % i, b"x")
    pair.pump()
    assert snd.delivery_count == rcv.delivery_count == 1 and rcv.credit == 0
    rcv.flow(5)
    pair.pump()
    assert snd.credit == 5  # (1 + 5) - 1 across the wrap
    rcv.flow(2, drain=True)
    pair.pump()
    snd.complete_drain()
    _, server_events = pair.pump()
    assert of_type(server_events, FlowReceived)[-1].drained
    assert rcv.delivery_count == snd.delivery_count == 3


def test_credit_granted_just_before_the_wrap() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": 2**32 - 1})
    rcv.flow(3)
    pair.pump()
    assert snd.credit == 3
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    # a grant from the receiver that saw none of them yet: (2**32-1 + 10) - 1 mod 2**32 = 8
    rcv.flow(10)
    pair.client.receive_data(pair.server.data_to_send(), 0.0)
    assert snd.credit == 8


def test_delivery_ids_and_transfer_ids_wrap_around() -> None:
    pair = EnginePair()
    pair.open()
    cs = Session(pair.client, None)
    cs.next_outgoing_id = 2**32 - 2  # the first transfer-id is ours to choose (begin)
    cs._next_delivery_id = 2**32 - 2  # so is the first delivery-id
    cs.begin()
    _, server_events = pair.pump()
    ss = of_type(server_events, RemoteBegin)[0].session
    ss.begin(incoming_window=2)
    pair.pump()
    assert ss.next_incoming_id == 2**32 - 2
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"m%d" % i) for i in range(5)]
    assert ids == [2**32 - 2, 2**32 - 1, 0, 1, 2]
    _, server_events = pair.pump()
    transfers = of_type(server_events, TransferReceived)
    assert [t.delivery_id for t in transfers] == ids
    assert ss.next_incoming_id == cs.next_outgoing_id == 3
    assert cs.blocked_frames == 0
    rcv.dispose(ids[0], ids[-1], state=ACCEPTED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert (disp.first, disp.last) == (2**32 - 2, 2)


# --- idle time-out (transport §2.4.5) ----------------------------------------------------------


def idle_pair(client_idle: float | None = None, server_idle: float | None = None) -> EnginePair:
    pair = EnginePair(client_config(idle_timeout_s=client_idle), server_config(idle_timeout_s=server_idle))
    pair.open()
    return pair


def advance(pair: EnginePair, now: float) -> None:
    pair.now = now
    pair.client.tick(now)
    pair.server.tick(now)
    pair.pump()


def test_no_timers_without_idle_timeouts() -> None:
    pair = idle_pair()
    assert pair.client.next_deadline() is None and pair.server.next_deadline() is None
    advance(pair, 1e9)
    assert pair.client.data_to_send() == b"" and pair.server.data_to_send() == b""
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)
    assert not pair.wire_to_server[3:] and not pair.wire_to_client[3:]


def test_open_advertises_half_the_local_idle_timeout() -> None:
    pair = idle_pair(server_idle=10.0)
    (open_,) = of_type(pair.client_events, RemoteOpen)
    assert open_.open.idle_time_out == 5000
    assert pair.client.remote_idle_timeout_s == 5.0


def test_heartbeat_sent_when_half_the_peers_timeout_passes_idle() -> None:
    pair = idle_pair(server_idle=10.0)
    # the client must send something every 5 s / 2 after it last sent
    assert pair.client.next_deadline() == pytest.approx(2.5)
    assert pair.server.next_deadline() == pytest.approx(10.0)  # its own threshold
    pair.client.tick(2.4)
    assert pair.client.data_to_send() == b""
    pair.client.tick(2.5)
    assert pair.client.data_to_send() == EMPTY_FRAME
    assert pair.client.next_deadline() == pytest.approx(5.0)
    pair.server.receive_data(EMPTY_FRAME, 2.5)
    assert pair.server.events() == []  # an empty frame means nothing but "alive"
    assert pair.server.next_deadline() == pytest.approx(12.5)


def test_no_heartbeat_when_other_frames_were_sent() -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(idle_timeout_s=10.0))
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    pair.now = 2.0
    pair.client.tick(2.0)
    snd.send_transfer(b"t", b"x")
    pair.pump()
    assert pair.client.next_deadline() == pytest.approx(4.5)
    pair.client.tick(4.0)
    assert pair.client.data_to_send() == b""


def test_heartbeats_keep_the_connection_alive() -> None:
    pair = idle_pair(client_idle=3.0, server_idle=4.0)
    now = 0.0
    while now < 60.0:
        deadline = min(d for d in (pair.client.next_deadline(), pair.server.next_deadline()) if d is not None)
        assert deadline > now
        now = deadline
        advance(pair, now)
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)
    assert not of_type(pair.client_events + pair.server_events, RemoteClose)
    heartbeats = [f for data in pair.wire_to_server for f in wire_frames(data) if f.body is None]
    assert len(heartbeats) >= 60 / 1.0 - 1  # every 2 s / 2


def test_local_idle_timeout_closes_with_resource_limit_exceeded() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.tick(9.99)
    assert pair.server.data_to_send() == b""
    pair.server.tick(10.0)
    (violation,) = of_type(pair.server.events(), ProtocolViolation)
    assert violation.condition == E.RESOURCE_LIMIT_EXCEEDED and violation.scope == "connection"
    (close,) = bodies(pair.server.data_to_send(), Close)
    assert close.error is not None and close.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert pair.server.next_deadline() is None
    pair.server.tick(100.0)
    assert pair.server.data_to_send() == b""


def test_idle_timeout_is_measured_from_the_last_frame_received() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.receive_data(EMPTY_FRAME, 8.0)
    pair.server.tick(17.9)
    assert pair.server.data_to_send() == b""
    assert pair.server.next_deadline() == pytest.approx(18.0)
    pair.server.tick(18.0)
    assert bodies(pair.server.data_to_send(), Close)


def test_no_heartbeat_after_close() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.client.close()
    pair.client.data_to_send()
    assert pair.client.next_deadline() is None
    pair.client.tick(100.0)
    assert pair.client.data_to_send() == b""


def test_client_closed_by_the_idle_server_sees_the_condition() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.now = 10.0
    pair.server.tick(10.0)
    client_events, _ = pair.pump()
    (close,) = of_type(client_events, RemoteClose)
    assert close.error is not None and close.error.condition == E.RESOURCE_LIMIT_EXCEEDED


def test_no_timers_after_both_closes() -> None:
    pair = idle_pair(client_idle=4.0, server_idle=10.0)
    pair.client.close()
    pair.pump()
    pair.server.close()
    pair.pump()
    assert pair.client.finished and pair.server.finished
    assert pair.client.next_deadline() is None and pair.server.next_deadline() is None
    advance(pair, 1000.0)
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)


def test_idle_timeout_while_waiting_for_the_peers_close() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.close()
    (close,) = bodies(pair.server.data_to_send(), Close)  # the client never answers
    assert close.error is None
    assert pair.server.next_deadline() == pytest.approx(10.0)
    pair.server.tick(10.0)
    (violation,) = of_type(pair.server.events(), ProtocolViolation)
    assert violation.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert pair.server.finished  # give up: the transport may be closed
    assert pair.server.data_to_send() == b""  # our close was the last frame


def test_attach_too_big_for_the_peer_rolls_back_and_the_link_can_still_be_refused() -> None:
    # The client accepts only 512-byte frames; the server's echo of a long terminus address
    # cannot fit. The failed attach must leave the link unannounced, so reject() still works
    # (transport §2.6.3: a refusal is a null-terminus attach followed by a detach).
    pair, cs, ss = connected_pair(ConnectionConfig(container_id="c", max_frame_size=512))
    cs.attach_sender("big", target=Target(address="t" * 400))
    _, server_events = pair.pump()
    (remote_attach,) = of_type(server_events, RemoteAttach)
    link = remote_attach.link
    with pytest.raises(E.LocalUsageError):
        link.attach(source=Source(address="s" * 400), target=remote_attach.attach.target)
    assert link.state.local.name == "UNINIT" and link.local_handle is None
    link.reject(Error(condition="amqp:not-allowed", description="too big"))
    client_events, _ = pair.pump()
    (detach,) = of_type(client_events, RemoteDetach)
    assert detach.error is not None and detach.error.condition == "amqp:not-allowed"
