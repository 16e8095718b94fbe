"""Users as salted hashes and SCRAM through the whole router, over sockets.

- The users file: written atomically with mode 0600, read back, malformed files refused with
  the file and the problem named; inline `users` take hashes, and a plain-text password still
  works but is logged as a warning.
- The configuration refuses PLAIN on a listener without TLS unless `allow_insecure_plain`;
  on a listener that serves TLS and plain (`require_ssl: false`) PLAIN is offered only inside TLS.
- Our client logs in with SCRAM-SHA-256 and SCRAM-SHA-1 against a users file; a wrong password
  or an unknown user: sasl-outcome auth error, the connection closed, counted in failedLogins,
  one log line with the peer's address, mechanism and user; the router keeps serving.
- A user added to the file while the router runs can log in at once; a file broken while it
  runs leaves the users read before in force.
- Connectors log in to another router with SCRAM (the inter-router connection comes up).
- python-qpid-proton logs in with PLAIN against the hashes (over TLS); with SCRAM when it is
  built with Cyrus SASL (else the test skips and says why).
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from proton import ConnectionException
from proton.utils import BlockingConnection

from router.amqp.scram_keys import make_credentials
from router.config.loader import ConfigError, parse_config
from router.config.users import UsersFileError, hash_password, read_users, write_users
from router.core.connections import engine_config
from router.net.client import AuthenticationError, connect

from .support.interop import run_in_thread
from .tlssupport import Pki, make_pki, serving

TIMEOUT_S = 10.0


def _users_file(path: Path, **users: str) -> str:
    write_users(path, {name: {c.mechanism: c for c in (make_credentials(m, pw) for m in ("SCRAM-SHA-256", "SCRAM-SHA-1"))}
                       for name, pw in users.items()})  # fmt: skip
    return str(path)


def test_users_file_is_written_atomically_0600_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    _users_file(path, alice="s3cret", bob="hunter2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "s3cret" not in text and "hunter2" not in text and "SCRAM-SHA-256$4096:" in text
    users = read_users(path)
    assert sorted(users) == ["alice", "bob"] and sorted(users["alice"]) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert [p.name for p in tmp_path.iterdir()] == ["users.yaml"]  # no temporary file left behind
    for bad, reason in [
        ("users: [alice]", "mapping of user name"),
        ("users: {alice: [nonsense]}", "not a SCRAM hash"),
        ("users: {alice: []}", "list of hashes"),
        ("other: 1", "one key, users"),
        ("users: {alice: [", "not YAML"),
    ]:
        path.write_text(bad)
        with pytest.raises(UsersFileError, match=reason) as caught:
            read_users(path)
        assert str(path) in str(caught.value)


def test_config_takes_hashes_warns_on_plain_text_and_keeps_plain_inside_tls(caplog: pytest.LogCaptureFixture) -> None:
    hashes = list(hash_password("s3cret"))
    tcp = {"name": "amqp", "port": 0, "sasl_mechanisms": ["SCRAM-SHA-256", "PLAIN"]}
    with pytest.raises(ConfigError, match="offers PLAIN without TLS.*allow_insecure_plain"):
        parse_config({"listeners": [tcp], "users": [{"username": "alice", "hashes": hashes}]})
    with pytest.raises(ConfigError, match="not a SCRAM hash"):
        parse_config({"listeners": [{**tcp, "allow_insecure_plain": True}], "users": [{"username": "a", "hashes": ["x"]}]})
    with pytest.raises(ConfigError, match="give hashes"):
        parse_config({"listeners": [{**tcp, "allow_insecure_plain": True}], "users": [{"username": "a", "hashes": hashes, "password": "p"}]})
    with pytest.raises(ConfigError, match="no users are configured"):
        parse_config({"listeners": [{"name": "amqp", "sasl_mechanisms": ["SCRAM-SHA-256"]}]})

    config = parse_config({"listeners": [{**tcp, "allow_insecure_plain": True}],
                           "users": [{"username": "alice", "hashes": hashes}, {"username": "old", "password": "plain"}]})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="router.users"):
        sasl = engine_config(config, config.listeners[0]).sasl_server
    assert sasl is not None and sasl.check_plain is not None and sasl.scram_credentials is not None
    assert sasl.check_plain("", "alice", "s3cret") and not sasl.check_plain("", "alice", "wrong")
    assert sasl.check_plain("", "old", "plain")  # still works, but said loudly:
    assert any("'old' has a plain-text password" in r.getMessage() for r in caplog.records)
    assert not any("'alice'" in r.getMessage() for r in caplog.records)
    assert not sasl.check_plain("", "nobody", "s3cret") and not sasl.check_plain("bob", "alice", "s3cret")

    # TLS and plain on one port: PLAIN only on the TLS connections.
    mixed = parse_config({
        "ssl_profiles": [{"name": "p", "cert_file": "c.pem"}],
        "listeners": [{"name": "amqp", "port": 0, "ssl_profile": "p", "require_ssl": False, "sasl_mechanisms": ["PLAIN"]}],
        "users": [{"username": "alice", "hashes": hashes}],
    })  # fmt: skip
    assert engine_config(mixed, mixed.listeners[0], tls=True).sasl_server.check_plain is not None  # type: ignore[union-attr]
    assert engine_config(mixed, mixed.listeners[0], tls=False).sasl_server.check_plain is None  # type: ignore[union-attr]


def _router(users_file: str, mechanisms: list[str], **listener: Any) -> dict[str, Any]:
    return {
        "router": {"id": "users-router"},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0, "sasl_mechanisms": mechanisms, **listener}],
        "users_file": users_file,
        "failed_logins": {"initial_delay_s": 0.05, "max_delay_s": 0.05},
    }


async def test_scram_logins_over_sockets_failures_counted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users.yaml"
    _users_file(path, alice="s3cret")
    async with serving(_router(str(path), ["SCRAM-SHA-256", "SCRAM-SHA-1"])) as server:
        port = server.listener_ports()["amqp"]
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-1"):
            async with connect("127.0.0.1", port, username="alice", password="s3cret", mechanisms=(mechanism,)) as client:
                await client.open_sender("users.q")
                assert client.engine.user == "alice"  # the server proved it knows the password too
                seen = {(c["sasl"], c["user"]) for c in server.agent.entities("connection")}  # type: ignore[union-attr]
                assert (mechanism, "alice") in seen  # management shows who logged in, and how
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="router.sasl"):
            for user, password in (("alice", "wrong"), ("mallory", "s3cret")):
                with pytest.raises(AuthenticationError, match="SCRAM-SHA-256 login refused: wrong user name or password"):
                    async with connect("127.0.0.1", port, username=user, password=password, mechanisms=("SCRAM-SHA-256",)):
                        pass
        lines = [r.getMessage() for r in caplog.records if r.name == "router.sasl"]
        assert len(lines) == 2 and all("failed login from 127.0.0.1" in line and "SCRAM-SHA-256" in line for line in lines)
        assert "'alice'" in lines[0] and "'mallory'" in lines[1] and "s3cret" not in " ".join(lines)
        assert server.core.logins.failures == 2
        [router] = list(server.agent.entity_type("router").entities(server.agent, 0.0))  # type: ignore[union-attr]
        assert router["failedLogins"] == 2
        # PLAIN is not offered in clear (this listener does not offer it; nor could it without allow_insecure_plain)
        with pytest.raises(AuthenticationError, match="no usable mechanism"):
            async with connect("127.0.0.1", port, username="alice", password="s3cret", mechanisms=("PLAIN",)):
                pass
        # and the router keeps serving
        async with connect("127.0.0.1", port, username="alice", password="s3cret") as client:
            await client.open_sender("users.q")


async def _raw(port: int, data: bytes) -> bytes:
    """Send `data`, read until the router ends the stream."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        got = b""
        with trio.fail_after(TIMEOUT_S):
            while chunk := await stream.receive_some(65536):
                got += chunk
    return got


@pytest.mark.parametrize(
    "first",
    [b"p=tls-server-end-point,,n=alice,r=abc", b"\xff" * 100, b"n,,n=alice,r=" + b"a" * 60000, b"", b"n,,n=alice,r=abc,m=x"],
    ids=["channel-binding", "not-utf8", "oversize", "empty", "garbage-extension"],
)
async def test_hostile_scram_over_a_socket_gets_an_auth_outcome_and_the_router_serves_on(tmp_path: Path, first: bytes) -> None:
    from router.amqp.framing import FRAME_SASL, SASL_HEADER, frame
    from router.amqp.performatives import SASL_AUTH, SaslInit, SaslOutcome, SaslResponse

    path = tmp_path / "users.yaml"
    _users_file(path, alice="s3cret")
    async with serving(_router(str(path), ["SCRAM-SHA-256"])) as server:
        port = server.listener_ports()["amqp"]
        init = frame(0, SaslInit(mechanism="SCRAM-SHA-256", initial_response=first), frame_type=FRAME_SASL)
        # A second message after a refusal is never read as a login: the outcome is already out.
        again = frame(0, SaslResponse(response=b"c=biws,r=abc,p=AAAA"), frame_type=FRAME_SASL)
        got = await _raw(port, SASL_HEADER + init + again)
        assert got.startswith(SASL_HEADER) and got.endswith(frame(0, SaslOutcome(code=SASL_AUTH), frame_type=FRAME_SASL))
        assert server.core.logins.failures == 1
        async with connect("127.0.0.1", port, username="alice", password="s3cret") as client:
            assert client.engine.user == "alice"


async def test_a_failed_login_log_line_cannot_be_forged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from router.amqp.framing import FRAME_SASL, SASL_HEADER, frame
    from router.amqp.performatives import SaslInit

    path = tmp_path / "users.yaml"
    _users_file(path, alice="s3cret")
    async with serving(_router(str(path), ["SCRAM-SHA-256", "PLAIN"], allow_insecure_plain=True)) as server:
        port = server.listener_ports()["amqp"]
        with caplog.at_level(logging.WARNING, logger="router.sasl"):
            await _raw(port, SASL_HEADER + frame(0, SaslInit(mechanism="X\nERROR root: forged", initial_response=b""), frame_type=FRAME_SASL))
            await _raw(port, SASL_HEADER + frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00bob\nforged" + b"x" * 500 + b"\x00pw"), frame_type=FRAME_SASL))
    lines = [r.getMessage() for r in caplog.records if r.name == "router.sasl"]
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    assert "mechanism 'X\\nERROR root: forged'" in lines[0] and "'bob\\nforged" in lines[1] and len(lines[1]) < 300


async def test_users_file_changes_take_effect_and_a_broken_one_keeps_the_old(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users.yaml"
    _users_file(path, alice="s3cret")
    async with serving(_router(str(path), ["SCRAM-SHA-256"])) as server:
        port = server.listener_ports()["amqp"]
        _users_file(path, alice="s3cret", bob="hunter2")  # what `router users add bob` does
        async with connect("127.0.0.1", port, username="bob", password="hunter2") as client:
            assert client.engine.user == "bob"
        path.write_text("users: {alice: [broken]}")
        with caplog.at_level(logging.ERROR, logger="router.users"):
            async with connect("127.0.0.1", port, username="bob", password="hunter2") as client:
                assert client.engine.user == "bob"  # the users read before stay in force
        assert any("users read before stay in force" in r.getMessage() for r in caplog.records)


async def test_a_connector_logs_in_to_another_router_with_scram(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    _users_file(path, edge1="link-pass")
    interior = {
        "router": {"id": "interior", "mode": "interior"},
        "listeners": [{"name": "edges", "port": 0, "role": "edge", "sasl_mechanisms": ["SCRAM-SHA-256"]}],
        "users_file": str(path),
    }
    async with serving(interior) as hub:
        port = hub.listener_ports()["edges"]
        edge = {
            "router": {"id": "edge1", "mode": "edge"},
            "listeners": [{"name": "amqp", "port": 0}],
            "connectors": [{"name": "up", "host": "127.0.0.1", "port": port, "role": "edge",
                            "sasl_username": "edge1", "sasl_password": "link-pass"}],
        }  # fmt: skip
        async with serving(edge):
            with trio.fail_after(TIMEOUT_S):
                while not any(c["sasl"] == "SCRAM-SHA-256" and c["user"] == "edge1" and c["role"] == "edge"
                              for c in hub.agent.entities("connection")):  # type: ignore[union-attr]
                    await trio.sleep(0.02)


def _proton(port: int, **options: Any) -> bool:
    try:
        BlockingConnection(f"amqps://localhost:{port}", timeout=TIMEOUT_S, **options).close()
        return True
    except ConnectionException:
        return False


async def test_proton_logs_in_with_plain_against_the_hashes_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from proton import SSLDomain

    pki: Pki = make_pki(tmp_path)
    path = tmp_path / "users.yaml"
    _users_file(path, carol="s3cret")
    config = _router(str(path), ["SCRAM-SHA-256", "PLAIN"], ssl_profile="site")
    config["ssl_profiles"] = [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file}]
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(pki.ca_file)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    async with serving(config) as server:
        port = server.listener_ports()["amqp"]
        ok = partial(_proton, port, ssl_domain=domain, allowed_mechs="PLAIN")
        assert await run_in_thread(partial(ok, user="carol", password="s3cret"))
        assert not await run_in_thread(partial(ok, user="carol", password="wrong"))
        assert server.core.logins.failures == 1


async def test_proton_c_send_ssl_plain_against_the_users_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Proton C's `send-ssl` example (PLAIN inside TLS) against a users file: the right password
    sends and every message is acknowledged; a wrong one is refused, counted and logged."""
    from .support.proton_c import build_examples

    (program,) = build_examples(tmp_path, ("send-ssl",)).values()
    pki = make_pki(tmp_path)
    path = tmp_path / "users.yaml"
    _users_file(path, carol="s3cret")
    config = _router(str(path), ["PLAIN"], ssl_profile="site", require_sasl=True)
    config["ssl_profiles"] = [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file}]
    config["listeners"].append({"name": "plain", "port": 0})
    env = {**os.environ, "SSL_CERT_FILE": pki.ca_file}
    async with serving(config) as server:
        ports = server.listener_ports()
        async with connect("127.0.0.1", ports["plain"]) as client:
            receiver = await client.open_receiver("c-users", credit=10)
            command = [str(program), "localhost", str(ports["amqp"]), "c-users", "3", "carol"]
            with trio.fail_after(TIMEOUT_S), caplog.at_level(logging.WARNING, logger="router.sasl"):
                refused = await trio.run_process([*command, "wrong"], capture_stdout=True, capture_stderr=True, check=False, env=env)
                async with trio.open_nursery() as nursery:
                    done: list[subprocess.CompletedProcess[bytes]] = []

                    async def send() -> None:
                        done.append(await trio.run_process([*command, "s3cret"], capture_stdout=True, capture_stderr=True,
                                                           check=False, env=env))  # fmt: skip

                    nursery.start_soon(send)
                    for _ in range(3):
                        receiver.accept(await receiver.receive())
        assert refused.returncode != 0 and b"3 messages sent" not in refused.stdout
        assert done[0].returncode == 0 and b"3 messages sent and acknowledged" in done[0].stdout, done[0]
        assert server.core.logins.failures == 1
        assert any("mechanism PLAIN, user 'carol'" in r.getMessage() for r in caplog.records)


CYRUS_PROBE = "import proton, sys; sys.exit(0 if proton.SASL.extended() else 3)"


def _cyrus_python() -> str | None:
    """A Python whose proton is built with Cyrus SASL (which brings SCRAM), if this machine has one."""
    for python in ("/usr/bin/python3", sys.executable):
        try:
            if subprocess.run([python, "-c", CYRUS_PROBE], capture_output=True, timeout=30).returncode == 0:
                return python
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


SCRAM_CLIENT = """
import sys
from proton.utils import BlockingConnection
from proton import ConnectionException
try:
    BlockingConnection(sys.argv[1], timeout=10, user=sys.argv[2], password=sys.argv[3], allowed_mechs=sys.argv[4]).close()
except ConnectionException as exc:
    print(exc); sys.exit(1)
"""


@pytest.fixture(scope="module")
def cyrus_python() -> str:
    python = _cyrus_python()
    if python is None:
        pytest.skip("no python-qpid-proton built with Cyrus SASL here (proton.SASL.extended() is False in the "
                    "pip wheel and in this system's python3-qpid-proton): Proton cannot speak SCRAM")
    return python


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
async def test_proton_with_cyrus_logs_in_with_scram(tmp_path: Path, mechanism: str, cyrus_python: str) -> None:
    python = cyrus_python
    path = tmp_path / "users.yaml"
    _users_file(path, dave="s3cret")
    async with serving(_router(str(path), [mechanism])) as server:
        url = f"amqp://127.0.0.1:{server.listener_ports()['amqp']}"
        env = {**os.environ, "PYTHONPATH": ""}
        good = await trio.run_process([python, "-c", SCRAM_CLIENT, url, "dave", "s3cret", mechanism], check=False, env=env)
        bad = await trio.run_process([python, "-c", SCRAM_CLIENT, url, "dave", "wrong", mechanism], check=False,
                                     capture_stdout=True, env=env)  # fmt: skip
        assert good.returncode == 0 and bad.returncode == 1
        assert server.core.logins.failures == 1


def test_stored_hash_text_is_what_yaml_keeps(tmp_path: Path) -> None:
    # The file is plain YAML a person can read and diff: one list of hashes per user.
    path = tmp_path / "u.yaml"
    _users_file(path, alice="x")
    data = yaml.safe_load(path.read_text())
    assert list(data) == ["users"] and len(data["users"]["alice"]) == 2
