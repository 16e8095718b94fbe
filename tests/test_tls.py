"""TLS on listeners, over real sockets, with certificates made on the fly (trustme): direct TLS and
the AMQP TLS header (security 5.2), plain and TLS on one port when the listener allows it, mutual
TLS with SASL EXTERNAL (the certificate's user), refusals (an untrusted client certificate, plain
AMQP where TLS is required), hostile handshakes (garbage, a stall) that cost the peer alone, and
the driver never bypassing the TLS stream."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.amqp.framing import AMQP_HEADER, TLS_HEADER
from router.amqp.message import Message
from router.config.models import RouterConfig
from router.net.client import connect
from router.net.errors import ClientError
from router.net.server import RouterServer
from router.net.tls import TlsError, TlsProfiles, user_of

from .rawamqp import read_until_closed
from .tlssupport import Pki, make_pki, serving

TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 0.5


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def tls_config(pki: Pki, **listener: Any) -> dict[str, Any]:
    return {
        "router": {"id": "tls"},
        "ssl_profiles": [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file, "ca_file": pki.ca_file}],
        "listeners": [
            {"name": "plain", "port": 0},
            {"name": "tls", "port": 0, "ssl_profile": "server", "handshake_timeout_s": HANDSHAKE_TIMEOUT_S, **listener},
        ],
    }


def client_context(pki: Pki, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


async def round_trip(port: int, **options: Any) -> None:
    """Send one message through the router and receive it, with its outcome."""
    with trio.fail_after(TIMEOUT_S):
        async with connect("127.0.0.1", port, **options) as client:
            receiver = await client.open_receiver("tls-q", credit=1)
            sender = await client.open_sender("tls-q")
            tracker = await sender.start_send(Message.value("over tls"))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            assert type(await tracker.wait()).__name__ == "Accepted"
            assert delivery.message.body.value == "over tls"


def connections(server: RouterServer) -> list[dict[str, Any]]:
    return list(server.agent.entities("connection"))


async def test_direct_tls_carries_messages_and_shows_in_management(pki: Pki) -> None:
    async with serving(tls_config(pki)) as server:
        port = server.listener_ports()["tls"]
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", port, ssl_context=client_context(pki)) as client:
                (conn,) = connections(server)
                assert conn["isEncrypted"] is True
                assert conn["sslProto"] in ("TLSv1.2", "TLSv1.3")
                assert conn["sslCipher"]
                (driver,) = server._drivers.values()
                assert driver._tls is not None  # the driver encrypts and decrypts it
                assert server.poller.watched == 1  # and the poller reads its socket
                receiver = await client.open_receiver("q", credit=1)
                sender = await client.open_sender("q")
                tracker = await sender.start_send(Message.value("secret"))
                receiver.accept(await receiver.receive())
                assert type(await tracker.wait()).__name__ == "Accepted"
        await round_trip(server.listener_ports()["plain"])  # plain beside TLS on one router
        assert all(c["isEncrypted"] is False for c in connections(server))


async def test_tls_listener_speaks_the_amqp_tls_header(pki: Pki) -> None:
    """security 5.2: AMQP 2 1 0 0, the same header back, the TLS handshake, then SASL and AMQP inside."""
    async with serving(tls_config(pki)) as server:
        port = server.listener_ports()["tls"]
        with trio.fail_after(TIMEOUT_S):
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            await tcp.send_all(TLS_HEADER)
            answer = b""
            while len(answer) < 8:
                answer += await tcp.receive_some(8 - len(answer))
            assert answer == TLS_HEADER
            tls = trio.SSLStream(tcp, client_context(pki), server_hostname="127.0.0.1")
            await tls.do_handshake()
            await tls.send_all(AMQP_HEADER)  # no SASL: the listener allows that by default
            reply = b""
            while len(reply) < 8:
                reply += await tls.receive_some(8 - len(reply))
            assert reply[:8] == AMQP_HEADER
            (conn,) = connections(server)
            assert conn["isEncrypted"] is True
            await tls.aclose()


async def test_plain_amqp_on_a_listener_that_requires_tls_gets_the_tls_header_and_is_closed(pki: Pki) -> None:
    async with serving(tls_config(pki)) as server:
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["tls"])
        await tcp.send_all(AMQP_HEADER)
        assert await read_until_closed(tcp, timeout_s=TIMEOUT_S) == TLS_HEADER  # transport 2.2
        await tcp.aclose()
        assert connections(server) == []


async def test_a_listener_that_does_not_require_tls_serves_both_on_one_port(pki: Pki) -> None:
    async with serving(tls_config(pki, require_ssl=False)) as server:
        port = server.listener_ports()["tls"]
        await round_trip(port)
        await round_trip(port, ssl_context=client_context(pki))


async def test_mutual_tls_with_external_names_the_certificates_user(pki: Pki) -> None:
    config = tls_config(pki, authenticate_peer=True, sasl_mechanisms=["EXTERNAL"], require_sasl=True)
    async with serving(config) as server:
        port = server.listener_ports()["tls"]
        ctx = client_context(pki, (pki.client_cert, pki.client_key))
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", port, ssl_context=ctx, mechanisms=("EXTERNAL",)):
                (conn,) = connections(server)
                assert conn["sasl"] == "EXTERNAL" and conn["user"] == "alice" and conn["isAuthenticated"]
        await round_trip(port, ssl_context=ctx, mechanisms=("EXTERNAL",))


async def test_external_is_not_offered_without_a_client_certificate(pki: Pki) -> None:
    config = tls_config(pki, sasl_mechanisms=["EXTERNAL", "ANONYMOUS"])
    async with serving(config) as server:
        port = server.listener_ports()["tls"]
        with trio.fail_after(TIMEOUT_S):
            with pytest.raises(ClientError, match="no usable mechanism"):
                async with connect("127.0.0.1", port, ssl_context=client_context(pki), mechanisms=("EXTERNAL",)):
                    pass
            # With a certificate (optional on this listener, checked when given) EXTERNAL is offered.
            ctx = client_context(pki, (pki.client_cert, pki.client_key))
            async with connect("127.0.0.1", port, ssl_context=ctx, mechanisms=("EXTERNAL",)):
                assert connections(server)[0]["user"] == "alice"


async def test_a_certificate_without_the_uid_fields_is_logged_not_refused_in_silence(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """A trusted certificate with no common name (uid_format `n`) gives no EXTERNAL user: the
    router says so in its log, and the peer learns that no mechanism is left for it."""
    config = tls_config(pki, authenticate_peer=True, sasl_mechanisms=["EXTERNAL"], require_sasl=True)
    nameless = pki.issue("bob.example.com", stem="nameless")  # no common_name: no CN in the subject
    async with serving(config) as server:
        port = server.listener_ports()["tls"]
        with trio.fail_after(TIMEOUT_S):
            with pytest.raises(ClientError, match="no usable mechanism"):
                async with connect("127.0.0.1", port, ssl_context=client_context(pki, nameless), mechanisms=("EXTERNAL",)):
                    pass
    assert any("none of the fields uid_format 'n' names" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("certificate", ["untrusted", "none"])
async def test_mutual_tls_refuses_an_untrusted_or_missing_client_certificate(pki: Pki, certificate: str) -> None:
    import trustme

    config = tls_config(pki, authenticate_peer=True)
    async with serving(config) as server:
        port = server.listener_ports()["tls"]
        cert = pki.issue("mallory", stem="mallory", ca=trustme.CA(), common_name="mallory") if certificate == "untrusted" else None
        with trio.fail_after(TIMEOUT_S):
            with pytest.raises((ClientError, trio.BrokenResourceError, OSError)):
                async with connect("127.0.0.1", port, ssl_context=client_context(pki, cert), mechanisms=("ANONYMOUS",)):
                    pass
        assert connections(server) == []
        await round_trip(port, ssl_context=client_context(pki, (pki.client_cert, pki.client_key)))


@pytest.mark.parametrize("opening", ["garbage client hello", "stalled handshake", "stalled tls header"])
async def test_a_hostile_handshake_costs_only_its_own_connection(pki: Pki, opening: str) -> None:
    """Garbage is refused at once; a stall anywhere in the TLS handshake is dropped at the
    listener's handshake time-out; another client is served all the while."""
    async with serving(tls_config(pki)) as server:
        port = server.listener_ports()["tls"]
        hostile = await trio.open_tcp_stream("127.0.0.1", port)
        sent = {
            "garbage client hello": b"\x16\x03\x01\x00\x30" + bytes(range(48)),
            "stalled handshake": b"\x16\x03\x01\x02\x00\x01",  # a record header and one byte of 512
            "stalled tls header": TLS_HEADER,
        }[opening]
        await hostile.send_all(sent)
        started = trio.current_time()
        # Another client is served while the hostile one is still there.
        await round_trip(port, ssl_context=client_context(pki))
        await read_until_closed(hostile, timeout_s=TIMEOUT_S)
        if opening != "garbage client hello":  # dropped at the handshake time-out, and counted
            assert trio.current_time() - started >= HANDSHAKE_TIMEOUT_S * 0.9
            (listener,) = [e for e in server.agent.entities("listener") if e["name"] == "tls"]
            assert listener["handshakeTimeouts"] == 1
        await hostile.aclose()


async def test_a_peer_silent_after_its_tls_handshake_is_dropped_at_the_same_deadline(pki: Pki) -> None:
    """The time-out counts from the connection, not from the end of TLS: header, SASL and open
    must come within it too."""
    async with serving(tls_config(pki)) as server:
        port = server.listener_ports()["tls"]
        with trio.fail_after(TIMEOUT_S):
            started = trio.current_time()
            tls = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), client_context(pki), server_hostname="127.0.0.1")
            await tls.do_handshake()
            handshaken = trio.current_time()
            with pytest.raises(trio.BrokenResourceError):
                while await tls.receive_some(100):
                    pass
                raise trio.BrokenResourceError  # a clean end counts as dropped too
            ended = trio.current_time()
        assert HANDSHAKE_TIMEOUT_S * 0.9 <= ended - started
        assert ended - handshaken < HANDSHAKE_TIMEOUT_S + 0.5
        (listener,) = [e for e in server.agent.entities("listener") if e["name"] == "tls"]
        assert listener["handshakeTimeouts"] == 1


def test_a_profile_whose_files_do_not_load_is_refused_with_one_line(pki: Pki, tmp_path: Path) -> None:
    config = RouterConfig.model_validate(
        {"ssl_profiles": [{"name": "p", "cert_file": pki.cert_file, "key_file": str(tmp_path / "missing.key")}]}
    )
    with pytest.raises(TlsError) as caught:
        TlsProfiles(config.ssl_profiles)
    message = str(caught.value)
    assert "'p'" in message and "missing.key" in message and "\n" not in message
    mismatched = RouterConfig.model_validate(
        {"ssl_profiles": [{"name": "q", "cert_file": pki.cert_file, "key_file": pki.client_key}]}
    )
    with pytest.raises(TlsError, match="'q': cannot load cert_file"):
        TlsProfiles(mismatched.ssl_profiles)


def test_configuration_errors_name_the_field() -> None:
    from pydantic import ValidationError

    for config, text in (
        ({"listeners": [{"name": "a", "ssl_profile": "nope"}]}, "no ssl profile named 'nope'"),
        ({"listeners": [{"name": "a", "authenticate_peer": True}]}, "authenticate_peer needs an ssl_profile"),
        ({"listeners": [{"name": "a", "sasl_mechanisms": ["EXTERNAL"]}]}, "EXTERNAL needs an ssl_profile"),
        ({"ssl_profiles": [{"name": "p", "protocols": ["TLSv1"]}]}, "protocols"),
        ({"ssl_profiles": [{"name": "p", "ca_file": "x"}], "listeners": [{"name": "a", "ssl_profile": "p"}]}, "no cert_file"),
    ):
        with pytest.raises(ValidationError, match=text):
            RouterConfig.model_validate(config)


def test_uid_format_picks_the_certificate_fields() -> None:
    cert = {"subject": ((("countryName", "GB"),), (("organizationName", "Acme"),), (("commonName", "r1"),))}
    assert user_of(cert, b"der", "n") == "r1"
    assert user_of(cert, b"der", "con") == "GB;Acme;r1"
    assert user_of(cert, b"der", "u") is None
    assert len(user_of(cert, b"der", "2") or "") == 64


async def _proxy(target_port: int, seen: bytearray, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """A TCP relay to the router that records every byte both ways."""

    async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(65536):
                seen.extend(data)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(sink)

    async def relay(client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream("127.0.0.1", target_port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream)
            nursery.start_soon(pump, upstream, client)

    await trio.serve_tcp(relay, 0, host="127.0.0.1", task_status=task_status)


@pytest.mark.parametrize("listener", ["plain", "tls"])
async def test_no_plaintext_on_the_wire(pki: Pki, listener: str) -> None:
    """Everything the router writes to or reads from a TLS connection is TLS: a message body and
    the AMQP headers never show on the wire (and do in plain TCP: the check itself works)."""
    secret = b"attack at dawn " * 20
    async with serving(tls_config(pki)) as server, trio.open_nursery() as nursery:
        seen = bytearray()
        (proxy,) = await nursery.start(_proxy, server.listener_ports()[listener], seen)
        port = proxy.socket.getsockname()[1]
        options: dict[str, Any] = {"ssl_context": client_context(pki)} if listener == "tls" else {}
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", port, **options) as client:
                receiver = await client.open_receiver("wire", credit=10)
                sender = await client.open_sender("wire")
                trackers = [await sender.start_send(Message.data(secret)) for _ in range(3)]
                for _ in trackers:
                    receiver.accept(await receiver.receive())
                assert {type(await t.wait()).__name__ for t in trackers} == {"Accepted"}
        nursery.cancel_scope.cancel()
    wire = bytes(seen)
    if listener == "tls":
        assert secret[:15] not in wire and b"AMQP\x03\x01\x00\x00" not in wire and b"AMQP\x00\x01\x00\x00" not in wire
    else:
        assert wire.count(secret) >= 6  # in and out, three times


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.one_of(
    st.binary(max_size=64),
    st.builds(lambda tail: b"AMQP" + tail, st.binary(max_size=12)),
    st.builds(lambda tail: b"\x16" + tail, st.binary(max_size=64)),
    st.builds(lambda tail: TLS_HEADER + tail, st.binary(max_size=32)),
), require_ssl=st.booleans())
def test_any_first_bytes_end_in_plain_amqp_a_refusal_or_tls(pki: Pki, first: bytes, require_ssl: bool) -> None:
    """Whatever a peer opens with, the listener's detection answers in bounded time with one of:
    plain AMQP (the bytes handed on whole), TlsRefused, or a TLS handshake that fails cleanly."""
    from router.config.models import Listener
    from router.net.tls import TlsRefused, accept

    profiles = TlsProfiles(RouterConfig.model_validate(tls_config(pki)).ssl_profiles)
    listener = Listener(name="l", ssl_profile="server", require_ssl=require_ssl)

    async def main() -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        await theirs.send_all(first)
        await theirs.send_eof()  # and then nothing more: every wait for bytes ends
        with trio.fail_after(5):
            try:
                stream, initial, info = await accept(ours, profiles.get("server"), listener)  # type: ignore[arg-type]
            except TlsRefused:
                return
        assert info is None and stream is ours and not require_ssl
        assert first.startswith(initial) and initial  # plain AMQP: nothing read is lost

    trio.run(main)


async def test_a_tls_listener_without_its_material_refuses_rather_than_serve_plain(pki: Pki) -> None:
    async with serving(tls_config(pki, require_ssl=False)) as server:
        server.tls.remove("server")  # cannot happen through configuration or management: fail closed all the same
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["tls"])
        await tcp.send_all(AMQP_HEADER)
        assert await read_until_closed(tcp, timeout_s=TIMEOUT_S) == b""
        await tcp.aclose()


async def test_a_close_notify_read_with_the_last_plaintext_ends_the_connection_at_once(pki: Pki) -> None:
    """The peer's last AMQP bytes and its close_notify in one write (so, most likely, one read):
    the engine gets the bytes, then the end, without waiting for more from the socket."""
    async with serving(tls_config(pki, handshake_timeout_s=60)) as server:
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["tls"])
        async with tcp:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            session = client_context(pki).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            with trio.fail_after(TIMEOUT_S):
                while True:
                    try:
                        session.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        if outgoing.pending:
                            await tcp.send_all(outgoing.read())
                        incoming.write(await tcp.receive_some(65536))
                if outgoing.pending:
                    await tcp.send_all(outgoing.read())
                while server.poller.watched == 0:  # the router's side, read by its poller
                    await trio.sleep(0.01)
                session.write(AMQP_HEADER)
                try:
                    session.unwrap()  # our close_notify, queued behind the header's record
                except ssl.SSLWantReadError:
                    pass
                await tcp.send_all(outgoing.read())
                while server.stats()["connections"]:  # long before the handshake time-out
                    await trio.sleep(0.01)
