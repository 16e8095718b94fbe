"""The management node: an in-process endpoint of the routing core that answers requests.

    node = install(core, agent)     # serves $management and _local/$management

Owns: registration at `$management` (a mobile address: reachable on this router by that name)
and `_local/$management` (which also makes `_topo/0/<router-id>/$management` work, the address
other routers use), each with every address below it (`$management/entities`,
`$management/listener/...`: a WD14 client may send to a collection's address, §3.2), the
connection capability and property that announce the node (WD14 §3.1), decoding requests,
choosing the dialect (application property `operation`: the anchors' operation dialect,
operations.py; otherwise WD14's HTTP-over-AMQP mapping, amqp_http.py), and building replies
(to the request's reply-to; correlation-id = the request's message-id, or its correlation-id
when it has no message-id, as the anchors' tools and Proton's SyncRequestResponse match on
that).
Also owns: who sent a request (the authenticated user of the connection it arrived on, which
the core exposes while the node runs as `forwarder.local_sender`) and whether it reads or writes
(operations CREATE, UPDATE, DELETE; WD14 methods PUT, POST, DELETE): a request the agent's
authorizer refuses (authz.py) is answered 403 in its dialect before anything is looked up.
Must not touch: what a request means (the dialects'), routing (the core routes the replies).

Every decodable request is accepted and answered, errors included (a bug in a handler is a
500 reply, never an exception into the core); an undecodable one is rejected with
amqp:decode-error. A request without reply-to is still executed: its outcome is all the
sender learns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.errors import DecodeError, EncodeError
from ..amqp.message import Message, decode_message, encode_message
from ..amqp.messaging import ACCEPTED, AmqpValue, Properties, Rejected
from ..amqp.performatives import Error
from . import amqp_http, operations
from .authz import UNKNOWN, Requester, is_loopback
from .model import ManagementError, Reply

if TYPE_CHECKING:
    from ..core.router import RouterCore
    from .agent import ManagementAgent

log = logging.getLogger(__name__)

NODE_ADDRESS = "$management"
NODE_ADDRESSES = (NODE_ADDRESS, "_local/" + NODE_ADDRESS)
MGMT_CAPABILITY = "AMQP_MGMT_V1_0"  # WD14 §3.1
MGMT_NODE_PROPERTY = "amqp:mgmt-node"  # WD14 §3.1: without it clients would assume $mgmt
WRITE_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE"})
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
_MISSING = object()


def requester_of(conn: Any) -> Requester:
    """Who sent a request that arrived on connection `conn` (a core ConnState). The user is
    the SASL one (EXTERNAL: the certificate's); ANONYMOUS or no SASL is no user."""
    if conn is _MISSING or conn is None:
        # The core did not say, or the delivery has no producer link any more (the router's
        # own message, or one its producer settled before it was complete): trust nobody.
        return UNKNOWN
    role = getattr(conn, "role", "normal")
    if role in ("inter-router", "edge") or (getattr(conn, "outgoing", False) and role != "route-container"):
        return Requester(None, from_router=True)
    mechanism = getattr(conn, "sasl_mechanism", None)
    user = getattr(conn.engine, "user", None) if mechanism not in (None, "ANONYMOUS") else None
    host = getattr(conn.listener, "host", "")
    return Requester(user, loopback=isinstance(host, str) and is_loopback(host))


def is_write(request: Message) -> bool:
    app = request.application_properties or {}
    if "operation" in app:
        operation = app.get("operation")
        return isinstance(operation, str) and operation.upper() in WRITE_OPERATIONS
    subject = request.properties.subject if request.properties is not None else None
    return isinstance(subject, str) and subject.upper() in WRITE_METHODS


class ManagementNode:
    """The endpoint: `node(payload, now) -> (outcome, [(reply-to, reply bytes)])`."""

    def __init__(self, agent: ManagementAgent) -> None:
        self.agent = agent
        self._operations: Callable[[ManagementAgent, Message, float], Reply] = operations.handle
        self._http: Callable[[ManagementAgent, Message, float, str | None], Reply] = amqp_http.handle
        self.requests = 0

    def __call__(self, payload: bytes, now: float, link_address: str | None = None) -> tuple[Any, list[tuple[str, bytes]]]:
        try:
            request = decode_message(payload)
        except DecodeError as exc:
            error = Error(condition=E.DECODE_ERROR, description=f"undecodable management request: {exc.description}")
            return Rejected(error=error), []
        self.requests += 1
        app = request.application_properties or {}
        operation_dialect = "operation" in app
        requester = requester_of(getattr(getattr(self.agent.core, "forwarder", None), "local_sender", _MISSING))
        try:
            self.agent.authz.check(requester, write=is_write(request))
            if operation_dialect:
                reply = self._operations(self.agent, request, now)
            else:  # a request without `to` is for the address its link is attached to
                reply = self._http(self.agent, request, now, link_address)
        except ManagementError as exc:  # refused: answered in the request's dialect
            reply = operations.error_reply(exc.status, exc.description) if operation_dialect else amqp_http.error_reply(exc.status, exc.description)
        except Exception as exc:  # a bug: answer it rather than let it reach the core
            log.exception("management request failed")
            reply = internal_error(f"{type(exc).__name__}: {exc}", operation_dialect)
        props = request.properties
        if props is None or not props.reply_to:
            return ACCEPTED, []
        try:
            return ACCEPTED, [(props.reply_to, self._encode(reply, props))]
        except EncodeError as exc:
            log.exception("management reply not encodable")
            return ACCEPTED, [(props.reply_to, self._encode(internal_error(str(exc), operation_dialect), props))]

    @staticmethod
    def _encode(reply: Reply, request: Properties) -> bytes:
        correlation = request.message_id if request.message_id is not None else request.correlation_id
        properties = Properties(to=request.reply_to, correlation_id=correlation, subject=reply.subject,
                                content_type=reply.content_type)  # fmt: skip
        message = Message(
            properties=properties,
            application_properties=reply.application_properties,
            body=AmqpValue(value=reply.body) if reply.has_body else None,
        )
        return encode_message(message)


def internal_error(description: str, operation_dialect: bool) -> Reply:
    if operation_dialect:
        return operations.error_reply(500, description)
    return amqp_http.error_reply(500, description)


def install(core: RouterCore, agent: ManagementAgent) -> ManagementNode:
    """Serve the management node through `core` and announce it in the router's open."""
    node = ManagementNode(agent)
    for address in NODE_ADDRESSES:  # and the addresses below it (`$management/entities`)
        core.register_local_endpoint(address, node, subtree=True)
    if MGMT_CAPABILITY not in core.offered_capabilities:
        core.offered_capabilities = (*core.offered_capabilities, MGMT_CAPABILITY)
    core.open_properties[MGMT_NODE_PROPERTY] = NODE_ADDRESS
    return node
