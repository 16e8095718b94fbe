"""Policy through a whole router over sockets, with python-qpid-proton clients: every violation
is answered with its condition and the connection is kept where the spec allows; others carry on.

- connections: per user, per host and in all (amqp:resource-limit-exceeded at the open), a user
  in no group (amqp:unauthorized-access), and a client of another vhost or user unaffected;
- a session past the group's limit is ended (resource-limit-exceeded), the connection works on;
- senders and receivers past the limit, addresses outside the patterns (with ${user}), an
  anonymous sender, a dynamic source: the attach refused, the connection kept;
- a message over the group's max_message_size detaches its link with
  amqp:link:message-size-exceeded; one whose user-id is not the user's is rejected with
  unauthorized-access (both on a connection that carries on);
- the frame size the router offers is capped by the group;
- vhostStats counts each refusal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from proton import ConnectionException, Delivery, Endpoint, Message
from proton.utils import BlockingConnection, LinkDetached

from router.net.server import RouterServer

from .support.interop import run_in_thread
from .tlssupport import serving

pytestmark = pytest.mark.interop

TIMEOUT_S = 5.0
PASSWORD = "s3cret-pw"


def config() -> dict[str, Any]:
    traders = {
        "users": ["alice"], "max_connections_per_user": 2, "max_sessions": 2, "max_senders": 2, "max_receivers": 1,
        "max_frame_size": 4096, "max_message_size": 2000, "targets": ["orders", "${user}/*"],
        "sources": ["orders", "${user}/*"], "allow_anonymous_sender": False, "allow_dynamic_source": False,
    }  # fmt: skip
    return {
        "router": {"id": "policed"},
        "users": [{"username": name, "password": PASSWORD} for name in ("alice", "bob", "carol")],
        "listeners": [{"name": "amqp", "port": 0, "sasl_mechanisms": ["PLAIN", "ANONYMOUS"], "allow_insecure_plain": True}],
        "policy": {
            "enabled": True,
            "vhosts": [
                {"hostname": "example.com", "max_connections": 20,
                 "groups": {"traders": traders, "ops": {"users": ["bob"], "allow_user_id_proxy": True}}},
                {"hostname": "$default", "allow_unknown_user": True,
                 "groups": {"$default": {"max_connections_per_host": 2}}},
                {"hostname": "tiny.example.com", "max_connections": 1, "allow_unknown_user": True,
                 "groups": {"$default": {}}},
            ],
        },
    }  # fmt: skip


def connect(port: int, vhost: str | None = None, user: str | None = None) -> BlockingConnection:
    if user is None:
        return BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S, virtual_host=vhost, allowed_mechs="ANONYMOUS")
    return BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S, virtual_host=vhost, user=user,
                              password=PASSWORD, allowed_mechs="PLAIN")  # fmt: skip


def refused_open(port: int, vhost: str | None = None, user: str | None = None) -> str | None:
    """The condition the router closed a new connection with at its open (None: it was accepted;
    the connection is closed again)."""
    try:
        conn = connect(port, vhost, user)
    except ConnectionException as exc:
        return _condition(exc)
    try:
        # The open and the close come in one write: a refused open shows by the first round trip.
        conn.create_receiver("orders").close()
    except ConnectionException as exc:
        return _condition(exc)
    finally:
        conn.close()
    return None


def _condition(exc: ConnectionException) -> str:
    """The condition of a close, as Proton words it: `... closed due to: Condition('name', ...)`."""
    found = re.search(r"Condition\('([^']+)'", str(exc))
    return found.group(1) if found else str(exc)


def refused_link(create: Callable[[], Any]) -> str | None:
    try:
        link = create()
    except LinkDetached as exc:
        condition = exc.link.remote_condition
        return str(condition.name) if condition is not None else "no condition"
    link.close()
    return None


def send(conn: BlockingConnection, sender: Any, message: Message, receiver: Any = None) -> Any:
    """Send `message` without waiting for its outcome; with `receiver` (on the same connection,
    so a blocking send would wait for itself) take and accept it; then the outcome."""
    delivery = sender.link.send(message)
    if receiver is not None:
        taken = receiver.receive(timeout=TIMEOUT_S)
        receiver.accept()
        assert taken.body == message.body
    conn.wait(lambda: delivery.settled or delivery.remote_state != 0, timeout=TIMEOUT_S)
    return delivery


def vhost_stats(server: RouterServer, hostname: str) -> dict[str, Any]:
    return next(s for s in server.agent.entities("vhostStats") if s["hostname"] == hostname)


async def test_connection_limits_per_user_host_and_in_all() -> None:
    async with serving(config()) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            got: dict[str, Any] = {}
            held = [connect(port, "example.com", "alice"), connect(port, "example.com", "alice")]
            got["alice third"] = refused_open(port, "example.com", "alice")
            got["bob meanwhile"] = refused_open(port, "example.com", "bob")
            got["carol (no group)"] = refused_open(port, "example.com", "carol")
            held += [connect(port), connect(port)]  # $default: 2 per host
            got["third from the host"] = refused_open(port)
            held.append(connect(port, "tiny.example.com"))
            got["tiny second"] = refused_open(port, "tiny.example.com")
            for conn in held:
                conn.close()
            got["alice after closing"] = refused_open(port, "example.com", "alice")
            return got

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
        assert got == {
            "alice third": "amqp:resource-limit-exceeded", "bob meanwhile": None,
            "carol (no group)": "amqp:unauthorized-access", "third from the host": "amqp:resource-limit-exceeded",
            "tiny second": "amqp:resource-limit-exceeded", "alice after closing": None,
        }  # fmt: skip
        stats = vhost_stats(server, "example.com")
        assert stats["connectionsDenied"] == 2 and stats["connectionsApproved"] >= 4
        assert vhost_stats(server, "tiny.example.com")["connectionsDenied"] == 1


async def test_sessions_links_and_addresses_are_refused_and_the_connection_kept() -> None:
    async with serving(config()) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            conn = connect(port, "example.com", "alice")
            got: dict[str, Any] = {"frame size offered": conn.conn.transport.remote_max_frame_size}
            try:
                # BlockingConnection's links share one session (begun with the first): two more make three.
                first = conn.create_sender("orders")
                sessions = [conn.conn.session() for _ in range(2)]
                for session in sessions:
                    session.open()
                conn.wait(lambda: all(not s.state & Endpoint.REMOTE_UNINIT for s in sessions), timeout=TIMEOUT_S)
                conn.wait(lambda: bool(sessions[-1].state & Endpoint.REMOTE_CLOSED), timeout=TIMEOUT_S)
                got["third session"] = str(sessions[-1].remote_condition.name)
                got["second session"] = bool(sessions[0].state & Endpoint.REMOTE_ACTIVE)
                got["receiver elsewhere"] = refused_link(lambda: conn.create_receiver("invoices"))
                got["receiver of ${user}"] = refused_link(lambda: conn.create_receiver("alice/inbox"))
                got["another's"] = refused_link(lambda: conn.create_receiver("bob/inbox"))
                got["dynamic source"] = refused_link(lambda: conn.create_receiver(None, dynamic=True))
                got["sender elsewhere"] = refused_link(lambda: conn.create_sender("invoices"))
                got["anonymous sender"] = refused_link(lambda: conn.create_sender(None))
                receiver = conn.create_receiver("orders")
                got["second receiver"] = refused_link(lambda: conn.create_receiver("alice/other"))
                senders = [first, conn.create_sender("alice/out")]
                got["third sender"] = refused_link(lambda: conn.create_sender("alice/more"))
                got["received"] = send(conn, senders[0], Message(body="still here"), receiver).remote_state
            finally:
                conn.close()
            return got

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
        unauthorized, limit = "amqp:unauthorized-access", "amqp:resource-limit-exceeded"
        assert got == {
            "frame size offered": 4096, "third session": limit, "second session": True,
            "receiver elsewhere": unauthorized, "receiver of ${user}": None, "another's": unauthorized,
            "dynamic source": unauthorized, "sender elsewhere": unauthorized, "anonymous sender": unauthorized,
            "second receiver": limit, "third sender": limit, "received": Delivery.ACCEPTED,
        }  # fmt: skip
        stats = vhost_stats(server, "example.com")
        assert (stats["sessionDenied"], stats["receiverDenied"], stats["senderDenied"]) == (1, 4, 3)


async def test_message_size_and_user_id() -> None:
    async with serving(config()) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            got: dict[str, Any] = {}
            watcher = connect(port, "example.com", "bob")  # a consumer, so that alice/big gets credit
            watcher.create_receiver("alice/big", credit=10)
            conn = connect(port, "example.com", "alice")
            try:
                receiver = conn.create_receiver("orders", credit=10)
                sender = conn.create_sender("orders")
                got["own user-id"] = send(conn, sender, Message(body="mine", user_id=b"alice"), receiver).remote_state
                other = send(conn, sender, Message(body="forged", user_id=b"bob"))
                got["another's user-id"] = (other.remote_state, str(other.remote.condition.name))
                big = conn.create_sender("alice/big")
                try:
                    big.send(Message(body="x" * 5000), timeout=TIMEOUT_S)
                    got["oversize"] = "sent"
                except LinkDetached as exc:
                    got["oversize"] = str(exc.link.remote_condition.name)
                again = conn.create_sender("orders", name="again")
                got["after"] = send(conn, again, Message(body="small"), receiver).remote_state
            finally:
                conn.close()
                watcher.close()
            ops = connect(port, "example.com", "bob")  # bob's group allows user-id proxying
            try:
                receiver = ops.create_receiver("orders", credit=10)
                got["proxied"] = send(ops, ops.create_sender("orders"), Message(body="for alice", user_id=b"alice"),
                                      receiver).remote_state
            finally:
                ops.close()
            return got

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
        assert got == {
            "own user-id": Delivery.ACCEPTED, "another's user-id": (Delivery.REJECTED, "amqp:unauthorized-access"),
            "oversize": "amqp:link:message-size-exceeded", "after": Delivery.ACCEPTED,
            "proxied": Delivery.ACCEPTED,
        }  # fmt: skip
        stats = vhost_stats(server, "example.com")
        assert stats["maxMessageSizeDenied"] == 1 and stats["messagesDenied"] == 1
