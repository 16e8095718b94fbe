"""The connection engine against itself (two sans-IO engines back to back, EnginePair):
protocol header negotiation (transport §2.2, security §5.1) and the SASL layer (security §5.3).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

import pytest

from router.amqp import errors as E
from router.amqp.connection import Connection
from router.amqp.events import Authenticated, AuthenticationFailed, ProtocolViolation, RemoteOpen
from router.amqp.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, TLS_HEADER, frame
from router.amqp.performatives import (
    SASL_AUTH,
    SASL_OK,
    SASL_SYS_PERM,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)
from router.amqp.sasl import SaslClientConfig, SaslServerConfig

from router.testing.enginepair import EnginePair, bodies, of_type, parse_wire

from .support.engine_pairs import CLIENT, SERVER, client_config, server_answering, server_config


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
