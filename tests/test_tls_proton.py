"""python-qpid-proton (OpenSSL inside the wheel) over TLS to the router: server authentication,
mutual TLS with SASL EXTERNAL, and an untrusted client certificate refused."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trustme
from proton import Delivery, Message, SSLDomain
from proton.utils import BlockingConnection

from router.amqp.message import Message as PlainMessage
from router.config.users import hash_password
from router.net.client import connect
from router.net.server import RouterServer

from .support.interop import run_in_thread
from .tlssupport import Pki, make_pki, serving

pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def config(pki: Pki, **listener: Any) -> dict[str, Any]:
    return {
        "router": {"id": "tls-proton"},
        "ssl_profiles": [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file, "ca_file": pki.ca_file}],
        "listeners": [{"name": "tls", "port": 0, "ssl_profile": "server", **listener}, {"name": "plain", "port": 0}],
    }


def domain(pki: Pki, cert: tuple[str, str] | None = None) -> SSLDomain:
    ssl_domain = SSLDomain(SSLDomain.MODE_CLIENT)
    ssl_domain.set_trusted_ca_db(pki.ca_file)
    ssl_domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if cert is not None:
        ssl_domain.set_credentials(cert[0], cert[1], None)
    return ssl_domain


def proton_connection(port: int, ssl_domain: SSLDomain, mechs: str) -> BlockingConnection:
    # The certificate names 127.0.0.1 and localhost; Proton checks the name given as the virtual host.
    return BlockingConnection(f"amqps://127.0.0.1:{port}", ssl_domain=ssl_domain, allowed_mechs=mechs,
                              timeout=TIMEOUT_S, virtual_host="localhost")  # fmt: skip


def proton_send(port: int, ssl_domain: SSLDomain, mechs: str) -> Any:
    """Send one message over TLS; the outcome (BlockingSender.send waits for it)."""
    conn = proton_connection(port, ssl_domain, mechs)
    try:
        return conn.create_sender("proton-tls").send(Message(body="hello over tls")).remote_state
    finally:
        conn.close()


def proton_receive(port: int, ssl_domain: SSLDomain, mechs: str, ready: Any) -> Any:
    conn = proton_connection(port, ssl_domain, mechs)
    try:
        receiver = conn.create_receiver("proton-back", credit=1)
        ready()
        message = receiver.receive(timeout=TIMEOUT_S)
        receiver.accept()
        return message.body
    finally:
        conn.close()


async def through_the_router(
    server: RouterServer, ssl_domain: SSLDomain, mechs: str, while_attached: Callable[[], None] = lambda: None
) -> None:
    """Proton sends over TLS to our client (on the plain port) and receives from it, with outcomes.
    `while_attached` runs while Proton's receiving connection is up, waiting for its message."""
    tls_port, plain_port = server.listener_ports()["tls"], server.listener_ports()["plain"]
    token = trio.lowlevel.current_trio_token()
    async with connect("127.0.0.1", plain_port) as client:
        receiver = await client.open_receiver("proton-tls", credit=1)
        async with trio.open_nursery() as nursery:
            outcome: list[Any] = []

            async def send() -> None:
                outcome.append(await run_in_thread(proton_send, tls_port, ssl_domain, mechs))

            nursery.start_soon(send)
            delivery = await receiver.receive()
            assert delivery.message.body.value == "hello over tls"
            receiver.accept(delivery)
        assert outcome == [Delivery.ACCEPTED]
        attached = trio.Event()
        sender = await client.open_sender("proton-back")
        async with trio.open_nursery() as nursery:
            bodies: list[Any] = []

            async def receive() -> None:
                ready = lambda: trio.from_thread.run_sync(attached.set, trio_token=token)  # noqa: E731
                bodies.append(await run_in_thread(proton_receive, tls_port, ssl_domain, mechs, ready))

            nursery.start_soon(receive)
            await attached.wait()
            while_attached()
            assert type(await sender.send(PlainMessage.value("back over tls"))).__name__ == "Accepted"
        assert bodies == ["back over tls"]


async def test_proton_over_tls(pki: Pki) -> None:
    async with serving(config(pki)) as server:
        await through_the_router(server, domain(pki), "ANONYMOUS")


async def test_proton_mutual_tls_with_external(pki: Pki) -> None:
    async with serving(config(pki, authenticate_peer=True, sasl_mechanisms=["EXTERNAL"], require_sasl=True)) as server:
        users: list[Any] = []

        def look() -> None:  # Proton's receiving connection is up: who does management say it is?
            users.extend(c["user"] for c in server.agent.entities("connection") if c["sasl"] == "EXTERNAL")

        await through_the_router(server, domain(pki, (pki.client_cert, pki.client_key)), "EXTERNAL", look)
        assert users == ["alice"]


async def test_proton_with_an_untrusted_client_certificate_is_refused(pki: Pki) -> None:
    async with serving(config(pki, authenticate_peer=True)) as server:
        rogue = pki.issue("mallory", stem="mallory", ca=trustme.CA(), common_name="mallory")
        with pytest.raises(Exception):
            await run_in_thread(proton_send, server.listener_ports()["tls"], domain(pki, rogue), "ANONYMOUS")
        assert list(server.agent.entities("connection")) == []


async def test_proton_c_send_ssl_with_plain_over_tls(pki: Pki, tmp_path: Path) -> None:
    """Proton C's own `send-ssl` example (given credentials: TLS checking the server against the
    default trust store, which SSL_CERT_FILE points at our CA, then SASL PLAIN) sends through
    the router to our client; every message acknowledged."""
    import subprocess

    from .support.proton_c import build_examples

    (program,) = build_examples(tmp_path, ("send-ssl",)).values()
    cfg = config(pki, sasl_mechanisms=["PLAIN"], require_sasl=True)
    cfg["users"] = [{"username": "carol", "hashes": list(hash_password("secret"))}]  # checked against the hash
    async with serving(cfg) as server:
        async with connect("127.0.0.1", server.listener_ports()["plain"]) as client:
            receiver = await client.open_receiver("c-tls", credit=10)
            results: list[subprocess.CompletedProcess[bytes]] = []

            async def send() -> None:
                # "localhost": Proton C checks the host name it dialled, and does not match IP addresses.
                results.append(await trio.run_process(
                    [str(program), "localhost", str(server.listener_ports()["tls"]), "c-tls", "5", "carol", "secret"],
                    capture_stdout=True, capture_stderr=True, check=False, env={**os.environ, "SSL_CERT_FILE": pki.ca_file},
                ))  # fmt: skip

            with trio.fail_after(TIMEOUT_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send)
                    for _ in range(5):
                        receiver.accept(await receiver.receive())
    (result,) = results
    out = result.stdout.decode()
    assert result.returncode == 0, (out, result.stderr)
    assert "secure connection: to " in out and "using TLSv1.3" in out and "5 messages sent and acknowledged" in out
