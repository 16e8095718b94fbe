"""A client for AMQP management nodes in the operation dialect that qdmanage and qdstat speak.

    async with connect(host, port) as client, management_session(client) as mgmt:
        names, rows = await mgmt.query("org.apache.qpid.dispatch.connection")
        entity = await mgmt.create("address", {"prefix": "orders", "distribution": "closest"})
        await mgmt.delete("address", name=entity["name"])
        nodes = await mgmt.get_mgmt_nodes()               # every router's management address

Requests carry application properties `operation`, `type`, `name`, `identity` (QUERY and
GET-TYPES name their type in `entityType`, as the anchors' tools do), the message-id that the
reply's correlation-id must match (WD14 answers with the request's message-id), and a reply-to:
the dynamic address of one receiver shared by every request of the session. They go out on one
anonymous sender with `to` set per request, so one session can ask several routers
(`_topo/0/<router-id>/$management`), and a node that cannot be reached is reported at once (the
router releases the request) rather than by a time-out.

Any number of requests may wait at once on one session (e.g. one per router of a mesh, from a
nursery): one task, started by `management_session()`, reads the reply receiver and hands each
reply to the request waiting for its correlation-id. A reply nobody waits for (it came after its
request timed out, or names no request of ours) is accepted and dropped. When the connection or
the reply link goes, every waiting request fails at once with that error, not at its time-out.

Owns: building requests, matching replies to the requests waiting for them, turning
statusCode/statusDescription into ManagementStatusError, and time-outs.
Must not touch: rendering (the CLI's), the router's internals.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..amqp.errors import DecodeError
from ..amqp.message import Message
from ..amqp.messaging import Accepted, Properties, Rejected
from .client import Client, Receiver, Sender
from .errors import ClientError, ConnectionClosed

DEFAULT_NODE = "$management"
NODE_TYPE = "org.amqp.management"  # the type of requests addressed to the node itself
DEFAULT_TIMEOUT_S = 10.0
# The reply receiver's credit, topped up as the replies are read (one task reads them at once,
# however many requests wait): more requests than this in flight wait at the router for credit.
REPLY_CREDIT = 100


def node_address(router_id: str | None = None) -> str:
    """The management node of `router_id` through the mesh, or of the router we are connected
    to when None."""
    return DEFAULT_NODE if router_id is None else f"_topo/0/{router_id}/$management"


class ManagementStatusError(ClientError):
    """The node answered with a status that is not 2xx (or not the one the operation expects)."""

    def __init__(self, status: int, description: str, address: str, what: str) -> None:
        self.status = status
        self.description = description
        self.address = address
        where = "" if address == DEFAULT_NODE else f" at {address}"
        super().__init__(None, f"{what}{where}: {status} {description}".rstrip())


class NoReply(ClientError):
    """The request was accepted but no reply came back in time."""


class _Waiter:
    """One request waiting for its reply: `reply` is set, or the session failed, then `done`."""

    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Message | None = None


class ManagementSession:
    """Requests and replies on one connection. Create it with `management_session()`, which
    runs the task that reads the replies (`read_replies`)."""

    def __init__(self, sender: Sender, receiver: Receiver, reply_to: str, timeout_s: float) -> None:
        self._sender = sender
        self._receiver = receiver
        self._reply_to = reply_to
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:12]
        self._waiting: dict[str, _Waiter] = {}  # message-id of a request -> its waiter
        self._reading = False
        self._error: ClientError | None = None

    @property
    def pending(self) -> int:
        """Requests sent (or being sent) and waiting for their replies."""
        return len(self._waiting)

    async def read_replies(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hand each reply to the request waiting for it, until the reply link or the connection
        fails (then every waiting request fails with that error). `management_session()` runs it."""
        self._reading = True
        task_status.started()
        try:
            while True:
                delivery = await self._receiver.receive()
                self._receiver.accept(delivery)  # every reply is settled, wanted or not
                try:
                    reply = delivery.message
                except DecodeError:
                    continue  # matches no request: dropped
                correlation_id = reply.properties.correlation_id if reply.properties is not None else None
                # Only ours are strings; a late reply (its request timed out) finds no waiter.
                waiter = self._waiting.pop(correlation_id, None) if isinstance(correlation_id, str) else None
                if waiter is not None:
                    waiter.reply = reply
                    waiter.done.set()
        except ClientError as exc:
            self._fail(exc)
        finally:
            self._reading = False
            if self._error is None:  # cancelled: the session is over
                self._fail(ConnectionClosed(None, "management session closed"))

    def _fail(self, error: ClientError) -> None:
        if self._error is None:
            self._error = error
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            waiter.done.set()

    async def request(
        self,
        operation: str,
        *,
        address: str = DEFAULT_NODE,
        body: Any = None,
        **properties: Any,
    ) -> tuple[int, str, Any]:
        """Send one request to the node at `address`; return (statusCode, statusDescription,
        body) of its reply. Properties whose value is None are not sent."""
        if self._error is not None:
            raise self._error
        if not self._reading:
            raise RuntimeError("no task reads the replies: open the session with management_session()")
        app_properties = {"operation": operation}
        app_properties.update({k: v for k, v in properties.items() if v is not None})
        message_id = f"{self._prefix}-{next(self._ids)}"
        request = Message.value(
            body if body is not None else {},
            properties=Properties(message_id=message_id, to=address, reply_to=self._reply_to),
            application_properties=app_properties,
        )
        waiter = self._waiting[message_id] = _Waiter()  # before sending: the reply may come first
        try:
            with trio.move_on_after(self.timeout_s):
                outcome = await self._sender.send(request)
                if not isinstance(outcome, Accepted):
                    raise ClientError(getattr(outcome, "error", None), _refusal(address, outcome))
                await waiter.done.wait()
        finally:
            # Timed out, refused or cancelled: a reply that comes later finds no waiter.
            self._waiting.pop(message_id, None)
        reply = waiter.reply
        if reply is None:
            if waiter.done.is_set() and self._error is not None:  # the session failed
                raise self._error
            raise NoReply(None, f"no reply from {address} within {self.timeout_s:g} s")
        props = reply.application_properties or {}
        status = props.get("statusCode")
        description = str(props.get("statusDescription") or "")
        if not isinstance(status, int) or isinstance(status, bool):
            raise ClientError(None, f"{address} answered without a statusCode")
        return int(status), description, reply.body_value if reply.body is not None else None

    async def call(self, operation: str, *, address: str = DEFAULT_NODE, body: Any = None, **properties: Any) -> Any:
        """request(), raising ManagementStatusError unless the status is 2xx; returns the body."""
        status, description, reply = await self.request(operation, address=address, body=body, **properties)
        if not 200 <= status < 300:
            named = [str(properties[k]) for k in ("entityType", "type", "identity", "name") if properties.get(k)]
            what = " ".join([operation, *(n for n in named if n not in (NODE_TYPE, "self"))])
            raise ManagementStatusError(status, description, address, what)
        return reply

    # --- the operations --------------------------------------------------------------------------

    async def query(
        self,
        type: str | None,
        attribute_names: list[str] | None = None,
        *,
        offset: int | None = None,
        count: int | None = None,
        address: str = DEFAULT_NODE,
    ) -> tuple[list[str], list[list[Any]]]:
        body = await self.call(
            "QUERY", address=address, body={"attributeNames": list(attribute_names or [])},
            type=NODE_TYPE, name="self", entityType=type, offset=offset, count=count,
        )  # fmt: skip
        if not isinstance(body, dict) or "attributeNames" not in body or "results" not in body:
            raise ClientError(None, f"{address}: malformed QUERY reply")
        return list(body["attributeNames"]), [list(row) for row in body["results"]]

    async def query_dicts(self, type: str, attribute_names: list[str] | None = None, *, address: str = DEFAULT_NODE) -> list[dict[str, Any]]:
        names, rows = await self.query(type, attribute_names, address=address)
        return [dict(zip(names, row)) for row in rows]

    async def read(self, type: str, *, name: str | None = None, identity: str | None = None, address: str = DEFAULT_NODE) -> Any:
        # With both, identity wins (as in the anchors' tools): send only one.
        return await self.call("READ", address=address, type=type, name=None if identity else name, identity=identity)

    async def create(self, type: str, attributes: dict[str, Any], *, name: str | None = None, address: str = DEFAULT_NODE) -> Any:
        return await self.call("CREATE", address=address, body=attributes, type=type, name=name or attributes.get("name"))

    async def update(
        self, type: str, attributes: dict[str, Any], *, name: str | None = None, identity: str | None = None,
        address: str = DEFAULT_NODE,
    ) -> Any:  # fmt: skip
        return await self.call("UPDATE", address=address, body=attributes, type=type,
                               name=None if identity else name, identity=identity)  # fmt: skip

    async def delete(self, type: str, *, name: str | None = None, identity: str | None = None, address: str = DEFAULT_NODE) -> None:
        await self.call("DELETE", address=address, type=type, name=None if identity else name, identity=identity)

    async def get_types(self, type: str | None = None, *, address: str = DEFAULT_NODE) -> Any:
        return await self.call("GET-TYPES", address=address, type=NODE_TYPE, name="self", entityType=type)

    async def get_attributes(self, type: str | None = None, *, address: str = DEFAULT_NODE) -> Any:
        return await self.call("GET-ATTRIBUTES", address=address, type=NODE_TYPE, name="self", entityType=type)

    async def get_operations(self, type: str | None = None, *, address: str = DEFAULT_NODE) -> Any:
        return await self.call("GET-OPERATIONS", address=address, type=NODE_TYPE, name="self", entityType=type)

    async def get_mgmt_nodes(self, *, address: str = DEFAULT_NODE) -> list[str]:
        body = await self.call("GET-MGMT-NODES", address=address, type=NODE_TYPE, name="self")
        return [str(node) for node in body or []]


def _refusal(address: str, outcome: Any) -> str:
    if isinstance(outcome, Rejected):
        error = outcome.error
        detail = f": {error.condition}: {error.description or ''}" if error is not None else ""
        return f"request to {address} rejected{detail}"
    # Released (or modified): the router had nowhere to send it.
    return f"no management node at {address} (is the router id right?)"


@asynccontextmanager
async def management_session(client: Client, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> AsyncIterator[ManagementSession]:
    """A reply receiver (dynamic address), an anonymous sender on `client`, and the task that
    reads the replies (for as long as the block runs)."""
    with trio.fail_after(timeout_s):
        receiver = await client.open_receiver(None, dynamic=True, credit=REPLY_CREDIT)
        sender = await client.open_sender(None)
    reply_to = receiver.address
    if not reply_to:
        raise ClientError(None, "the router gave no address for replies (dynamic source)")
    session = ManagementSession(sender, receiver, reply_to, timeout_s)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(session.read_replies)
            try:
                yield session
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery wraps whatever the caller's block raised; hand it back as is.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
