"""SCRAM-SHA-256 and SCRAM-SHA-1 (RFC 5802, RFC 7677) without sockets.

- Both sides reproduce the RFCs' test vectors byte for byte (an independent check of the key
  derivation, the message syntax and the proofs).
- Our SASL client and server log in with each mechanism in memory; the server-final message
  rides in the sasl-outcome's additional-data and the client checks it.
- Hostile client messages (truncated, bad base64, wrong nonce, a channel-binding request, a
  changed GS2 header, another user's authzid, oversize, random bytes) each end in a sasl-outcome
  auth error, never an exception out of the engine; an unknown user gets the same shape of
  challenge as a real one.
- A server that does not know the password (wrong server signature) is refused by the client.
- The stored-credential text form round-trips and refuses malformed input.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.performatives import SASL_AUTH, SASL_OK, SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from router.amqp.sasl import SaslClient, SaslClientConfig, SaslServer, SaslServerConfig
from router.amqp.scram import ScramClient, ScramError, ScramServer
from router.amqp.scram_keys import StoredCredentials, check_password, make_credentials, saslprep

# RFC 7677 §3 (SHA-256) and RFC 5802 §5 (SHA-1): user "user", password "pencil".
VECTORS = {
    "SCRAM-SHA-256": dict(
        client_nonce="rOprNGfwEbeRWgbNEkqO",
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        salt="W22ZaJ0SNY7soEsUEjb6gQ==",
        client_final="c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        server_final="v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    ),
    "SCRAM-SHA-1": dict(
        client_nonce="fyko+d2lbbFgONRv9qkxdawL",
        server_nonce="3rfcNHYJY1ZVvWVs7j",
        salt="QSXCR+Q6sek8bf92",
        client_final="c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        server_final="v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
    ),
}
KEY = b"k" * 32


@pytest.mark.parametrize("mechanism", list(VECTORS))
def test_client_and_server_reproduce_the_rfc_vectors(mechanism: str) -> None:
    v = VECTORS[mechanism]
    server_first = f"r={v['client_nonce']}{v['server_nonce']},s={v['salt']},i=4096".encode()
    client = ScramClient(mechanism, "user", "pencil", nonce=v["client_nonce"])
    assert client.first() == f"n,,n=user,r={v['client_nonce']}".encode()
    assert client.final(server_first) == v["client_final"].encode()
    client.verify(v["server_final"].encode())
    assert client.verified

    stored = make_credentials(mechanism, "pencil", salt=base64.b64decode(v["salt"]))
    server = ScramServer(mechanism, lambda user: stored if user == "user" else None, KEY, nonce=v["server_nonce"])
    assert server.first(f"n,,n=user,r={v['client_nonce']}".encode()) == server_first
    assert server.final(v["client_final"].encode()) == (v["server_final"].encode(), "user")


def _lookup(mechanism: str, user: str) -> StoredCredentials | None:
    return STORE.get((mechanism, user))


STORE = {(m, "alice"): make_credentials(m, "s3cret") for m in VECTORS}


def _exchange(client_config: SaslClientConfig, server_config: SaslServerConfig) -> tuple[object, object, list[object]]:
    """Run a SASL exchange in memory: (client result, server result, frames the server sent)."""
    client, server = SaslClient(client_config), SaslServer(server_config)
    to_client: list[object] = [server.start()]
    sent: list[object] = []
    client_result = server_result = None
    while to_client and client_result is None:
        replies, client_result = client.on_frame(to_client.pop(0))  # type: ignore[arg-type]
        for reply in replies:
            answers, result = server.on_frame(reply)
            sent.extend(answers)
            to_client.extend(answers)
            server_result = result or server_result
    return client_result, server_result, sent


SERVER = SaslServerConfig(mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-1"), scram_credentials=_lookup)


@pytest.mark.parametrize("mechanism", list(VECTORS))
def test_our_client_logs_in_with_scram_and_checks_the_server(mechanism: str) -> None:
    config = SaslClientConfig(mechanisms=(mechanism,), username="alice", password="s3cret")
    client_result, server_result, sent = _exchange(config, SERVER)
    assert client_result.ok and server_result.ok  # type: ignore[attr-defined]
    assert (server_result.mechanism, server_result.user) == (mechanism, "alice")  # type: ignore[attr-defined]
    outcome = sent[-1]
    assert isinstance(outcome, SaslOutcome) and outcome.code == SASL_OK and outcome.additional_data.startswith(b"v=")  # type: ignore[union-attr]


def test_the_client_prefers_scram_sha_256_and_explains_a_refusal() -> None:
    good = SaslClientConfig(username="alice", password="s3cret")
    client_result, server_result, _ = _exchange(good, SERVER)
    assert server_result.mechanism == "SCRAM-SHA-256"  # type: ignore[attr-defined]
    bad = SaslClientConfig(username="alice", password="wrong")
    client_result, server_result, sent = _exchange(bad, SERVER)
    assert not server_result.ok and sent[-1] == SaslOutcome(code=SASL_AUTH)  # type: ignore[attr-defined]
    assert "SCRAM-SHA-256 login refused: wrong user name or password" in client_result.description  # type: ignore[attr-defined]
    assert "sasl-code" not in client_result.description  # type: ignore[attr-defined]


def test_an_unknown_user_gets_a_challenge_like_a_real_one_then_fails() -> None:
    real = ScramServer("SCRAM-SHA-256", lambda u: STORE.get(("SCRAM-SHA-256", u)), KEY, nonce="N")
    fake = ScramServer("SCRAM-SHA-256", lambda u: None, KEY, nonce="N")
    real_first = real.first(b"n,,n=alice,r=abc").decode()
    fake_first = fake.first(b"n,,n=mallory,r=abc").decode()
    assert [p[:2] for p in real_first.split(",")] == [p[:2] for p in fake_first.split(",")]
    assert len(real_first) == len(fake_first) and fake_first.endswith(",i=4096")
    again = ScramServer("SCRAM-SHA-256", lambda u: None, KEY, nonce="N").first(b"n,,n=mallory,r=abc")
    assert again.decode() == fake_first  # the same made-up salt every time
    client = ScramClient("SCRAM-SHA-256", "mallory", "x", nonce="abc")
    client.first()
    with pytest.raises(ScramError, match="authentication failed"):
        fake.final(client.final(fake_first.encode()))


def _server_after_first(first: bytes = b"n,,n=alice,r=abc") -> tuple[ScramServer, bytes]:
    server = ScramServer("SCRAM-SHA-256", lambda u: STORE.get(("SCRAM-SHA-256", u)), KEY)
    return server, server.first(first)


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
        (b"x,,n=alice,r=abc", "channel-binding flag"),
        (b"n,,r=abc,n=alice", "expected attribute n="),
        (b"n,,n=alice", "expected attributes"),
        (b"n,,n=al=ice,r=abc", "escape"),
        (b"n,,n=alice,r=a\x7fb", "bad nonce"),
        (b"n,,n=alice,r=", "bad nonce"),
        (b"n,,m=ext,n=alice,r=abc", "mandatory extension"),
        (b"n,,n=" + b"a" * 3000 + b",r=abc", "longer than"),
        (b"n,,n=\xff,r=abc", "not UTF-8"),
        (b"n,b=x,n=alice,r=abc", "bad authzid"),
    ],
)
def test_malformed_client_first_is_refused(first: bytes, reason: str) -> None:
    with pytest.raises(ScramError, match=reason):
        _server_after_first(first)


def _final(server_first: bytes, *, gs2: str = "n,,", nonce: str | None = None, password: str = "s3cret") -> bytes:
    client = ScramClient("SCRAM-SHA-256", "alice", password, nonce="abc")
    client.first()
    message = client.final(server_first).decode()
    if gs2 != "n,,":
        message = message.replace("c=biws", "c=" + base64.b64encode(gs2.encode()).decode())
    if nonce is not None:
        message = message.replace(server_first.decode().split(",")[0][2:], nonce)
    return message.encode()


def test_client_final_checks_binding_nonce_proof_and_base64() -> None:
    for tamper, reason in [
        (lambda f: _final(f, gs2="y,,"), "channel binding does not match"),
        (lambda f: _final(f, nonce="abcWRONG"), "wrong nonce"),
        (lambda f: _final(f, password="nope"), "authentication failed"),
        (lambda f: _final(f).replace(b",p=", b",p=!!"), "bad base64"),
        (lambda f: _final(f).rsplit(b",p=", 1)[0], "proof is not last"),
        (lambda f: _final(f).replace(b"c=biws", b"x=biws"), "expected attribute c="),
        (lambda f: _final(f).rsplit(b",p=", 1)[0] + b",p=AAAA", "authentication failed"),
    ]:
        server, first = _server_after_first()
        with pytest.raises(ScramError, match=reason):
            server.final(tamper(first))
    server, first = _server_after_first()
    assert server.final(_final(first))[1] == "alice"  # untampered: accepted


def test_an_authzid_other_than_the_user_is_refused_not_granted() -> None:
    server = ScramServer("SCRAM-SHA-256", lambda u: STORE.get(("SCRAM-SHA-256", u)), KEY)
    first = server.first(b"n,a=admin,n=alice,r=abc")
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret", authzid="admin", nonce="abc")
    client.first()
    with pytest.raises(ScramError, match="authorisation identity"):
        server.final(client.final(first))
    # PLAIN too: alice acting as admin is refused even with her right password.
    plain = SaslServer(SaslServerConfig(mechanisms=("PLAIN",), check_plain=lambda z, u, p: (u, p) == ("alice", "s3cret")))
    plain.start()
    _, result = plain.on_frame(SaslInit(mechanism="PLAIN", initial_response=b"admin\x00alice\x00s3cret"))
    assert result is not None and not result.ok and result.user is None


def test_the_client_refuses_a_server_that_does_not_know_the_password() -> None:
    client = SaslClient(SaslClientConfig(mechanisms=("SCRAM-SHA-256",), username="alice", password="s3cret"))
    [init], _ = client.on_frame(SaslMechanisms(sasl_server_mechanisms=("SCRAM-SHA-256",)))
    nonce = init.initial_response.decode().split("r=")[1]  # type: ignore[union-attr]
    client.on_frame(SaslChallenge(challenge=f"r={nonce}XYZ,s=c2FsdA==,i=4096".encode()))
    _, result = client.on_frame(SaslOutcome(code=SASL_OK, additional_data=b"v=" + base64.b64encode(b"\0" * 32)))
    assert result is not None and not result.ok and "does not verify" in result.description
    # A hostile iteration count (a minutes-long PBKDF2) is refused before any work.
    client = SaslClient(SaslClientConfig(mechanisms=("SCRAM-SHA-256",), username="alice", password="s3cret"))
    [init], _ = client.on_frame(SaslMechanisms(sasl_server_mechanisms=("SCRAM-SHA-256",)))
    nonce = init.initial_response.decode().split("r=")[1]  # type: ignore[union-attr]
    _, result = client.on_frame(SaslChallenge(challenge=f"r={nonce}X,s=c2FsdA==,i=999999999".encode()))
    assert result is not None and not result.ok and "iteration count" in result.description


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=300), final=st.binary(max_size=300))
def test_random_client_messages_end_in_an_outcome_never_an_exception(first: bytes, final: bytes) -> None:
    server = SaslServer(SERVER)
    server.start()
    frames, result = server.on_frame(SaslInit(mechanism="SCRAM-SHA-256", initial_response=first))
    if result is None:
        assert isinstance(frames[0], SaslChallenge)
        frames, result = server.on_frame(SaslResponse(response=final))
    assert result is not None and not result.ok and frames == [SaslOutcome(code=SASL_AUTH)]


def test_stored_credentials_round_trip_and_check_plain_passwords() -> None:
    stored = make_credentials("SCRAM-SHA-256", "s3cret")
    assert StoredCredentials.decode(stored.encode()) == stored
    assert check_password(stored, "s3cret") and not check_password(stored, "s3cret ")
    for bad in ["", "SCRAM-SHA-256$4096:c2FsdA==", "MD5$4096:c2FsdA==$AA==:AA==", "SCRAM-SHA-256$10:c2FsdA==$" + "A" * 44 + ":" + "A" * 44,
                "SCRAM-SHA-256$4096:c2FsdA==$AA==:AA==", "SCRAM-SHA-256$4096:!!$AA==:AA=="]:  # fmt: skip
        with pytest.raises(ValueError):
            StoredCredentials.decode(bad)
    assert saslprep("I\u00adX") == "IX" and saslprep("\u2168") == "IX"  # RFC 4013 §3 examples
    with pytest.raises(ValueError):
        saslprep("\u0007")


@settings(max_examples=300, deadline=None)
@given(challenge=st.binary(max_size=300), final=st.binary(max_size=200))
def test_a_hostile_server_cannot_make_the_client_raise(challenge: bytes, final: bytes) -> None:
    client = SaslClient(SaslClientConfig(mechanisms=("SCRAM-SHA-256",), username="alice", password="s3cret"))
    [init], _ = client.on_frame(SaslMechanisms(sasl_server_mechanisms=("SCRAM-SHA-256",)))
    replies, result = client.on_frame(SaslChallenge(challenge=challenge))
    if result is None:
        _, result = client.on_frame(SaslOutcome(code=SASL_OK, additional_data=final))
    assert result is not None and not result.ok  # nothing random proves the server knows the password
