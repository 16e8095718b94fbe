"""Certificate rotation without a restart: new handshakes get the new certificate once the files
change (or on a management UPDATE of the sslProfile), connections already up carry on, every
delivery sent across the rotation gets its outcome, and a new file that does not load is refused
with a log line while the old certificate stays in force."""

from __future__ import annotations

import logging
import shutil
import ssl
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp.message import Message
from router.net.client import connect
from router.net.management_client import management_session

from .tlssupport import Pki, make_pki, serving

TIMEOUT_S = 10.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def config(pki: Pki) -> dict[str, Any]:
    return {
        "router": {"id": "rot"},
        "ssl_profiles": [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file}],
        "listeners": [{"name": "tls", "port": 0, "ssl_profile": "server"}, {"name": "plain", "port": 0}],
    }


def context(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=pki.ca_file)


async def served_serial(pki: Pki, port: int) -> str:
    """The serial number of the certificate a new TLS handshake gets."""
    with trio.fail_after(TIMEOUT_S):
        tls = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), context(pki), server_hostname="127.0.0.1")
        await tls.do_handshake()
        serial: str = tls.getpeercert()["serialNumber"]
        await tls.aclose()
        return serial


def rotate(pki: Pki, stem: str) -> None:
    """A new certificate and key, same CA, moved over the profile's files (the way tools such as
    cert-manager replace them: a rename, never a half-written file)."""
    cert, key = pki.issue("127.0.0.1", stem=stem)
    shutil.move(key, pki.key_file)
    shutil.move(cert, pki.cert_file)


async def test_rotation_under_traffic(pki: Pki) -> None:
    async with serving(config(pki)) as server:
        port = server.listener_ports()["tls"]
        first = await served_serial(pki, port)
        sent, outcomes, received = 0, [], 0
        with trio.fail_after(TIMEOUT_S * 2):
            async with connect("127.0.0.1", port, ssl_context=context(pki)) as consumer, \
                    connect("127.0.0.1", port, ssl_context=context(pki)) as producer:  # fmt: skip
                receiver = await consumer.open_receiver("rot", credit=1000)
                sender = await producer.open_sender("rot")
                trackers = []
                for round_ in range(3):
                    for _ in range(50):
                        trackers.append(await sender.start_send(Message.value(sent)))
                        sent += 1
                    if round_ == 0:
                        rotate(pki, "second")
                        second = await served_serial(pki, port)
                        assert second != first  # new handshakes use the new certificate
                        # A client that connects now (on the new certificate) reaches the old ones.
                        async with connect("127.0.0.1", port, ssl_context=context(pki)) as late:
                            late_sender = await late.open_sender("rot")
                            late_tracker = await late_sender.start_send(Message.value(sent))
                            sent += 1
                            while received < sent:  # the outcome comes once the consumer settles
                                receiver.accept(await receiver.receive())
                                received += 1
                            outcomes.append(await late_tracker.wait())
                while received < sent:
                    receiver.accept(await receiver.receive())
                    received += 1
                outcomes += [await tracker.wait() for tracker in trackers]
        assert received == sent and len(outcomes) == sent
        assert {type(outcome).__name__ for outcome in outcomes} == {"Accepted"}


async def test_a_bad_new_file_is_refused_and_the_old_certificate_stays(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    async with serving(config(pki)) as server:
        port = server.listener_ports()["tls"]
        first = await served_serial(pki, port)
        Path(pki.cert_file).write_text("not a certificate\n")
        with caplog.at_level(logging.ERROR, logger="router.net.tls"):
            assert await served_serial(pki, port) == first
            assert await served_serial(pki, port) == first
        errors = [r.getMessage() for r in caplog.records if r.name == "router.net.tls" and r.levelno == logging.ERROR]
        assert len(errors) == 1  # logged once per bad change, not per handshake
        assert "ssl profile 'server'" in errors[0] and pki.cert_file in errors[0] and "previous certificate" in errors[0]
        # The files are fixed: the next handshake loads them.
        rotate(pki, "fixed")
        assert await served_serial(pki, port) != first


async def test_management_update_reloads_and_refuses_what_does_not_load(pki: Pki, tmp_path: Path) -> None:
    async with serving(config(pki)) as server:
        tls_port, plain_port = server.listener_ports()["tls"], server.listener_ports()["plain"]
        first = await served_serial(pki, tls_port)
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", plain_port) as client, management_session(client) as mgmt:
                (profile,) = await mgmt.query_dicts("sslProfile")
                assert profile["ordinal"] == 1 and profile["certFile"] == pki.cert_file
                # New material at new paths, through an UPDATE.
                cert, key = pki.issue("127.0.0.1", stem="managed")
                updated = await mgmt.update("sslProfile", {"certFile": cert, "privateKeyFile": key}, name="server")
                assert updated["ordinal"] == 2 and updated["certFile"] == cert
                second = await served_serial(pki, tls_port)
                assert second != first
                # A key that does not match: 400, and the profile is unchanged.
                with pytest.raises(Exception, match="cannot load"):
                    await mgmt.update("sslProfile", {"privateKeyFile": pki.client_key}, name="server")
                (profile,) = await mgmt.query_dicts("sslProfile")
                assert profile["privateKeyFile"] == key and profile["ordinal"] == 2
                assert await served_serial(pki, tls_port) == second


async def test_a_profile_and_a_tls_listener_created_through_management(pki: Pki) -> None:
    async with serving({"router": {"id": "mgmt-tls"}, "listeners": [{"name": "plain", "port": 0}]}) as server:
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", server.listener_ports()["plain"]) as client, management_session(client) as mgmt:
                with pytest.raises(Exception, match="cannot load"):
                    await mgmt.create("sslProfile", {"name": "bad", "certFile": pki.cert_file, "privateKeyFile": pki.client_key})
                created = await mgmt.create("sslProfile", {"name": "new", "certFile": pki.cert_file, "privateKeyFile": pki.key_file})
                assert created["ordinal"] == 1 and created["protocols"] == "TLSv1.2 TLSv1.3"
                await mgmt.create("listener", {"name": "tls", "port": 0, "sslProfile": "new"})
                with pytest.raises(Exception, match="names|ssl profile"):
                    await mgmt.delete("sslProfile", name="new")  # the listener names it
        assert await served_serial(pki, server.listener_ports()["tls"])
        assert [p.name for p in server.agent.config.ssl_profiles] == ["new"]
