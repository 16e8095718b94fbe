"""The router's SCRAM over a real socket against an implementation we did not write: the SASL
exchange of the client side is computed by `scramp` (PyPI), carried in SASL frames to a running
router (security §5.3), and scramp checks the server's final message. Proton would be the
natural client, but neither Debian's nor PyPI's Proton is built with Cyrus SASL here
(`proton.SASL.extended()` is False), so it offers only ANONYMOUS, PLAIN and EXTERNAL."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio

from router.amqp.decode import decode_at
from router.amqp.framing import FRAME_SASL, SASL_HEADER, frame
from router.amqp.performatives import SASL_AUTH, SASL_OK, SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from router.config.models import Listener, RouterConfig, RouterSection
from router.net.server import RouterServer

scramp = pytest.importorskip("scramp", reason="scramp (test extra) is the independent SCRAM client")

USERS = ({"username": "alice", "password": "pencil pusher"},)


async def read_frame(stream: trio.abc.Stream, buffer: bytearray) -> Any:
    """The next SASL frame's performative."""
    with trio.fail_after(5):
        while len(buffer) < 8 or len(buffer) < struct.unpack(">I", buffer[:4])[0]:
            data = await stream.receive_some(65536)
            assert data, "the router closed the connection"
            buffer += data
    size, doff, ftype, _ = struct.unpack(">IBBH", buffer[:8])
    assert ftype == FRAME_SASL
    body, _ = decode_at(bytes(buffer[doff * 4 : size]), 0, size - doff * 4)
    del buffer[:size]
    return body


async def scram_login(port: int, mechanism: str, user: str, password: str) -> tuple[int, bool]:
    """(the sasl-outcome code, whether scramp accepted the server's final message)."""
    client = scramp.ScramClient([mechanism], user, password)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(SASL_HEADER)
        buffer = bytearray()
        with trio.fail_after(5):
            while len(buffer) < 8:
                buffer += await stream.receive_some(65536)
        assert bytes(buffer[:8]) == SASL_HEADER
        del buffer[:8]
        offered = await read_frame(stream, buffer)
        assert isinstance(offered, SaslMechanisms) and mechanism in offered.sasl_server_mechanisms
        first = client.get_client_first().encode()
        await stream.send_all(frame(0, SaslInit(mechanism=mechanism, initial_response=first), frame_type=FRAME_SASL))
        challenge = await read_frame(stream, buffer)
        if isinstance(challenge, SaslOutcome):
            return challenge.code, False
        assert isinstance(challenge, SaslChallenge)
        client.set_server_first(challenge.challenge.decode())
        final = client.get_client_final().encode()
        await stream.send_all(frame(0, SaslResponse(response=final), frame_type=FRAME_SASL))
        outcome = await read_frame(stream, buffer)
        assert isinstance(outcome, SaslOutcome)
        if outcome.code != SASL_OK:
            return outcome.code, False
        # The server's proof that it knows the password rides in the outcome (security §5.3.3.6).
        assert outcome.additional_data is not None
        client.set_server_final(outcome.additional_data.decode())  # raises if the signature is wrong
        return outcome.code, True


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
async def test_scramp_logs_in_and_verifies_the_router(mechanism: str, nursery: trio.Nursery) -> None:
    config = RouterConfig(
        router=RouterSection(id="scram-router"), users=USERS,
        listeners=(Listener(host="127.0.0.1", port=0, sasl_mechanisms=(mechanism,), require_sasl=True),),
    )  # fmt: skip
    server = RouterServer(config)
    port = (await nursery.start(server.run))[0][2]
    assert await scram_login(port, mechanism, "alice", "pencil pusher") == (SASL_OK, True)
    # A wrong password and an unknown user both end in an authentication failure.
    code, verified = await scram_login(port, mechanism, "alice", "pencil")
    assert (code, verified) == (SASL_AUTH, False)
    code, verified = await scram_login(port, mechanism, "mallory", "pencil pusher")
    assert (code, verified) == (SASL_AUTH, False)
    server.shutdown()
