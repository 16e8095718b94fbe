"""Who may change the router through management, over AMQP.

- The rules (router.management.authz): operators write, readers read (open, authenticated, or
  users and groups), an anonymous requester writes only through a loopback listener while no
  operators are named (or `loopback_anonymous_operator` says so), a request that came from
  another router never writes.
- Through the whole router over sockets: our client logging in with SCRAM-SHA-256 as an
  operator and as a reader (the operation dialect: CREATE 201 and 403; WD14: POST 201 and 403),
  an anonymous client once operators are named, restricted reads; python-qpid-proton over TLS
  with PLAIN as both users; a client certificate's user (SASL EXTERNAL) as an operator; every
  refusal counted on the router entity; a core that does not say who asks gets writes refused.
- `router manage` with and without an operator's credentials: a refused write says so in words.
"""

from __future__ import annotations

import ssl
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Message as ProtonMessage
from proton import SSLDomain
from proton.utils import BlockingConnection

from router.amqp.scram_keys import make_credentials
from router.config.loader import parse_config
from router.config.models import Management
from router.config.users import write_users
from router.management.authz import Authorizer, Requester, is_loopback
from router.management.node import requester_of
from router.net.client import connect
from router.net.management_client import ManagementStatusError, management_session

from .support.interop import run_in_thread
from .support.router_process import router_command, router_env
from .tlssupport import Pki, make_pki, serving

TIMEOUT_S = 10.0
ALICE, BOB = ("alice", "0pera+or"), ("bob", "re4der")


def _users(path: Path) -> str:
    write_users(path, {name: {m: make_credentials(m, pw) for m in ("SCRAM-SHA-256", "SCRAM-SHA-1")}
                       for name, pw in (ALICE, BOB)})  # fmt: skip
    return str(path)


# --- the rules ------------------------------------------------------------------------------------


def _authz(**rules: Any) -> Authorizer:
    management = Management.model_validate(rules)
    return Authorizer(lambda: management)


def test_defaults_let_only_anonymous_loopback_write() -> None:
    authz = _authz()
    assert authz.may_write(Requester(None, loopback=True))
    assert not authz.may_write(Requester(None, loopback=False))
    assert not authz.may_write(Requester("alice", loopback=False))  # no operators named: nobody by name
    assert not authz.may_write(Requester(None, loopback=True, from_router=True))
    assert all(authz.may_read(r) for r in (Requester(None), Requester("x"), Requester(None, from_router=True)))


def test_operators_by_user_and_group_and_the_loopback_switch() -> None:
    authz = _authz(operators=["alice", "admins"], groups={"admins": ["carol"]})
    assert authz.may_write(Requester("alice")) and authz.may_write(Requester("carol"))
    assert not authz.may_write(Requester("bob"))
    assert not authz.may_write(Requester(None, loopback=True))  # operators named: loopback no longer enough
    assert _authz(operators=["alice"], loopback_anonymous_operator=True).may_write(Requester(None, loopback=True))
    assert not _authz(loopback_anonymous_operator=False).may_write(Requester(None, loopback=True))


def test_restricted_reads() -> None:
    authenticated = _authz(readers="authenticated", operators=["alice"])
    assert authenticated.may_read(Requester("bob")) and not authenticated.may_read(Requester(None))
    listed = _authz(readers=["auditors"], groups={"auditors": ["dave"]}, operators=["alice"])
    assert listed.may_read(Requester("dave")) and listed.may_read(Requester("alice"))  # operators read too
    assert not listed.may_read(Requester("bob")) and not listed.may_read(Requester(None, from_router=True))


def test_refusals_are_403_and_counted_per_face_and_kind() -> None:
    authz = _authz(operators=["alice"], readers="authenticated")
    with pytest.raises(Exception, match="user 'bob' may not change the router") as caught:
        authz.check(Requester("bob"), write=True)
    assert getattr(caught.value, "status", None) == 403
    with pytest.raises(Exception, match="may not read"):
        authz.check(Requester(None, face="http"), write=False)
    authz.check(Requester("alice"), write=True)
    assert authz.refusals["amqp-write"] == 1 and authz.refusals["http-read"] == 1 and authz.refusals["amqp-read"] == 0


def test_loopback_hosts() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "router.example.com", ""]))


def test_requester_of_a_connection() -> None:
    class Engine:
        user = "alice"

    class Listener:
        host = "127.0.0.1"

    class Conn:
        engine, listener, role, outgoing, sasl_mechanism = Engine(), Listener(), "normal", False, "SCRAM-SHA-256"

    assert requester_of(Conn()) == Requester("alice", loopback=True)
    assert requester_of(None) == Requester(None, loopback=False)  # no producer link: nobody
    anonymous = Conn()
    anonymous.sasl_mechanism = "ANONYMOUS"
    assert requester_of(anonymous).user is None
    peer = Conn()
    peer.role = "inter-router"
    assert requester_of(peer).from_router


def test_config_shape_is_checked() -> None:
    config = parse_config({"management": {"operators": ["alice"], "readers": "authenticated"}})
    assert config.management.operators == ("alice",)
    with pytest.raises(Exception, match="readers"):
        parse_config({"management": {"readers": "everyone"}})


# --- over sockets: our client with SCRAM ---------------------------------------------------------


def _secured(users_file: str, **management: Any) -> dict[str, Any]:
    return {
        "listeners": [{"name": "amqp", "port": 0, "sasl_mechanisms": ["SCRAM-SHA-256", "ANONYMOUS"]}],
        "users_file": users_file,
        "management": {"operators": ["admins"], "groups": {"admins": ["alice"]}, **management},
    }


async def _create(port: int, name: str, user: tuple[str, str] | None) -> Any:
    credentials = {"username": user[0], "password": user[1]} if user else {"mechanisms": ("ANONYMOUS",)}
    async with connect("127.0.0.1", port, **credentials) as client, management_session(client) as mgmt:
        return await mgmt.create("address", {"prefix": f"{name}.orders"}, name=name)


async def _query(port: int, user: tuple[str, str] | None) -> Any:
    credentials = {"username": user[0], "password": user[1]} if user else {"mechanisms": ("ANONYMOUS",)}
    async with connect("127.0.0.1", port, **credentials) as client, management_session(client) as mgmt:
        return await mgmt.query("address")


async def test_operation_dialect_over_scram_operator_and_reader(tmp_path: Path) -> None:
    async with serving(_secured(_users(tmp_path / "users.yaml"))) as server:
        port = server.listener_ports()["amqp"]
        with trio.fail_after(TIMEOUT_S):
            created = await _create(port, "by-alice", ALICE)
            assert created["name"] == "by-alice"
            for who, named in ((BOB, "user 'bob'"), (None, "an anonymous requester")):
                with pytest.raises(ManagementStatusError) as refused:
                    await _create(port, "by-someone", who)
                assert refused.value.status == 403
                assert f"{named} may not change the router" in refused.value.description
            names, rows = await _query(port, BOB)  # reads stay open by default
            assert ["by-alice"] == [row[names.index("name")] for row in rows]
        router = server.agent.entities("router")[0]
        assert router["managementWritesRefused"] == 2 and router["managementReadsRefused"] == 0


async def test_restricted_reads_refuse_anonymous_and_count(tmp_path: Path) -> None:
    async with serving(_secured(_users(tmp_path / "users.yaml"), readers="authenticated")) as server:
        port = server.listener_ports()["amqp"]
        with trio.fail_after(TIMEOUT_S):
            assert await _query(port, BOB)
            with pytest.raises(ManagementStatusError) as refused:
                await _query(port, None)
        assert refused.value.status == 403 and "may not read" in refused.value.description
        assert server.agent.entities("router")[0]["managementReadsRefused"] == 1


# --- over sockets: python-qpid-proton, PLAIN inside TLS --------------------------------------------


def _proton_requests(port: int, ca_file: str, user: tuple[str, str]) -> tuple[int, str]:
    """An operation-dialect CREATE and a WD14 POST as `user`: their status codes."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(ca_file)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    conn = BlockingConnection(f"amqps://localhost:{port}", timeout=TIMEOUT_S, ssl_domain=domain,
                              allowed_mechs="PLAIN", user=user[0], password=user[1])  # fmt: skip
    try:
        replies = conn.create_receiver(None, dynamic=True)
        sender = conn.create_sender("$management")
        reply_to = replies.remote_source.address
        operation = ProtonMessage(id="op", reply_to=reply_to, body={"prefix": f"{user[0]}.op"},
                                  properties={"operation": "CREATE", "type": "address", "name": f"{user[0]}-op"})  # fmt: skip
        sender.send(operation, timeout=TIMEOUT_S)
        op_status = replies.receive(timeout=TIMEOUT_S).properties["statusCode"]
        wd14 = ProtonMessage(id="wd14", reply_to=reply_to, subject="POST", address="$management/address",
                             properties={"http:request": "1.1"}, body={"name": f"{user[0]}-wd14", "prefix": f"{user[0]}.wd14"})  # fmt: skip
        sender.send(wd14, timeout=TIMEOUT_S)
        return op_status, replies.receive(timeout=TIMEOUT_S).subject
    finally:
        conn.close()


@pytest.mark.interop
async def test_proton_over_tls_with_plain_as_operator_and_reader(tmp_path: Path) -> None:
    pki: Pki = make_pki(tmp_path)
    config = _secured(_users(tmp_path / "users.yaml"))
    config["ssl_profiles"] = [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file}]
    config["listeners"] = [{"name": "amqp", "port": 0, "ssl_profile": "site", "sasl_mechanisms": ["SCRAM-SHA-256", "PLAIN"]}]
    async with serving(config) as server:
        port = server.listener_ports()["amqp"]
        assert await run_in_thread(partial(_proton_requests, port, pki.ca_file, BOB)) == (403, "403")
        assert await run_in_thread(partial(_proton_requests, port, pki.ca_file, ALICE)) == (201, "201")
        names = {rule["name"] for rule in server.agent.entities("address")}
        assert {"alice-op", "alice-wd14"} <= names and not {"bob-op", "bob-wd14"} & names
        assert server.agent.entities("router")[0]["managementWritesRefused"] == 2


# --- the CLI ----------------------------------------------------------------------------------------


async def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(router_command(*args), capture_stdout=True, capture_stderr=True, check=False,
                                      env=router_env())  # fmt: skip


@pytest.mark.process
async def test_router_manage_with_and_without_operator_credentials(tmp_path: Path) -> None:
    async with serving(_secured(_users(tmp_path / "users.yaml"))) as server:
        bus = f"127.0.0.1:{server.listener_ports()['amqp']}"
        create = ("manage", "create", "--type", "address", "--name", "cli-rule", "prefix=cli", "-b", bus)
        anonymous = await _cli(*create)
        lines = anonymous.stderr.decode().strip().splitlines()
        assert anonymous.returncode == 1 and len(lines) == 1, anonymous
        assert "403" in lines[0] and "anonymous requester may not change the router" in lines[0]
        reader = await _cli(*create, "--username", BOB[0], "--password", BOB[1])
        assert reader.returncode == 1 and b"user 'bob' may not change the router" in reader.stderr, reader
        operator = await _cli(*create, "--username", ALICE[0], "--password", ALICE[1])
        assert operator.returncode == 0 and b"cli-rule" in operator.stdout, operator
        assert "cli-rule" in {rule["name"] for rule in server.agent.entities("address")}


async def test_a_client_certificate_user_is_an_operator_through_external(tmp_path: Path) -> None:
    """SASL EXTERNAL: the certificate's user (common name `alice`) is checked like any other."""
    pki = make_pki(tmp_path)
    config = {
        "ssl_profiles": [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file, "ca_file": pki.ca_file}],
        "listeners": [{"name": "amqps", "port": 0, "ssl_profile": "site", "sasl_mechanisms": ["EXTERNAL", "ANONYMOUS"]}],
        "management": {"operators": ["alice"]},
    }
    with_cert = ssl.create_default_context(cafile=pki.ca_file)
    with_cert.load_cert_chain(pki.client_cert, pki.client_key)
    without = ssl.create_default_context(cafile=pki.ca_file)
    async with serving(config) as server:
        port = server.listener_ports()["amqps"]
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", port, ssl_context=with_cert, mechanisms=("EXTERNAL",)) as client:
                async with management_session(client) as mgmt:
                    assert (await mgmt.create("address", {"prefix": "cert"}, name="by-cert"))["name"] == "by-cert"
            async with connect("127.0.0.1", port, ssl_context=without, mechanisms=("ANONYMOUS",)) as client:
                async with management_session(client) as mgmt:
                    with pytest.raises(ManagementStatusError) as refused:
                        await mgmt.delete("address", name="by-cert")
        assert refused.value.status == 403
        assert "by-cert" in {rule["name"] for rule in server.agent.entities("address")}


def test_a_node_whose_core_does_not_say_who_asks_refuses_writes() -> None:
    """Fail closed: a request the core hands over with no connection behind it (`local_sender`
    None, as outside a delivery) or without saying (no `local_sender`) is nobody's."""
    from router.management.node import _MISSING

    assert requester_of(_MISSING) == Requester(None, loopback=False)
    from router.amqp.message import Message, encode_message
    from router.amqp.messaging import AmqpValue, Properties
    from router.config.models import RouterConfig
    from router.core.router import RouterCore
    from router.management import ManagementAgent
    from router.management.node import ManagementNode

    config = RouterConfig()
    core = RouterCore(config)
    agent = ManagementAgent(core, config)
    node = ManagementNode(agent)
    request = Message(properties=Properties(message_id="1", reply_to="replies"),
                      application_properties={"operation": "CREATE", "type": "address", "name": "x"},
                      body=AmqpValue(value={"prefix": "x"}))  # fmt: skip
    _, replies = node(encode_message(request), 0.0)
    assert replies and b"statusCode" in replies[0][1] and not agent.entities("address")
    assert agent.authz.refusals["amqp-write"] == 1
