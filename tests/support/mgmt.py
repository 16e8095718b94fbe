"""A management client over the sans-IO RouterHarness: a router with the management node
installed, one client connection with a dynamic reply receiver and a sender to `$management`.

    m = MgmtHarness()
    status, description, body = m.op("QUERY", {"attributeNames": []}, entityType="router.address")
    reply = m.http("GET", "$management/listener")          # WD14: reply.status, .headers, .body
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router.amqp.link import Link
from router.amqp.message import Message
from router.amqp.messaging import Properties, Source
from router.config.models import Listener, RouterConfig
from router.management import ManagementAgent, install
from router.testing.routerharness import Client, RouterHarness

NO_BODY = object()


@dataclass
class HttpReply:
    status: int
    headers: dict[str, Any]
    body: Any
    message: Message

    @property
    def etag(self) -> str:
        return str(self.headers["ETag"])


@dataclass
class StubControl:
    """A ConfigControl that records what it was asked and binds nothing."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    refuse: bool = False
    next_port: int = 40000

    def create_listener(self, listener: Listener) -> int | None:
        if self.refuse:
            raise OSError(98, "Address already in use")
        self.calls.append(("create", listener.name))
        self.next_port += 1
        self.ports[listener.name] = listener.port or self.next_port
        return self.ports[listener.name]

    def delete_listener(self, name: str) -> bool:
        self.calls.append(("delete", name))
        return self.ports.pop(name, None) is not None

    def listener_ports(self) -> Mapping[str, int]:
        return dict(self.ports)


class MgmtHarness:
    def __init__(self, config: RouterConfig | None = None, control: Any = None) -> None:
        self.h = RouterHarness(config)
        self.agent = ManagementAgent(self.h.core, self.h.config, control, self.h.now, clock=lambda: self.h.now)
        self.node = install(self.h.core, self.agent)
        self.client = self.h.connect("mgmt")
        self.replies = self.client.receiver(None, source=Source(dynamic=True))
        self.h.pump()
        self.replies.flow(10_000)
        self.h.pump()
        assert self.replies.remote_source is not None
        self.reply_to: str = self.replies.remote_source.address
        self.sender = self.client.sender("$management")
        self.h.pump()
        self._ids = itertools.count(1)
        self.last_id = 0

    def send(self, app: dict[str, Any] | None, body: Any = NO_BODY, *, link: Link | None = None,
             reply: bool = True, **properties: Any) -> int:  # fmt: skip
        """Send a request; return its delivery id (outcomes: self.client.outcomes)."""
        self.last_id = next(self._ids)
        props = Properties(message_id=self.last_id, reply_to=self.reply_to if reply else None, **properties)
        message = Message(properties=props, application_properties=app) if body is NO_BODY else \
            Message.value(body, properties=props, application_properties=app)  # fmt: skip
        delivery_id = self.client.send(link or self.sender, message)
        self.h.pump()
        return delivery_id

    def request(self, app: dict[str, Any] | None, body: Any = NO_BODY, **properties: Any) -> Message:
        before = len(self.client.received[self.replies])
        self.send(app, body, **properties)
        got = self.client.received[self.replies]
        assert len(got) == before + 1, "exactly one reply expected"
        reply = got[-1].message
        assert reply.properties is not None
        assert reply.properties.correlation_id == self.last_id
        return reply

    def op(self, operation: str, body: Any = NO_BODY, **app: Any) -> tuple[int, str, Any]:
        """An operation-dialect request: (statusCode, statusDescription, body)."""
        reply = self.request({"operation": operation, **app}, body)
        props = reply.application_properties or {}
        return int(props["statusCode"]), str(props["statusDescription"]), reply.body_value

    def http(self, method: str, target: str | None = None, body: Any = NO_BODY, **headers: Any) -> HttpReply:
        """A WD14 request (HTTP over AMQP) to `target` (properties.to)."""
        content_type = headers.pop("content_type", None)
        reply = self.request({"http:request": "1.1", **headers}, body, subject=method, to=target,
                             content_type=content_type)  # fmt: skip
        assert reply.properties is not None and reply.properties.subject is not None
        app = dict(reply.application_properties or {})
        assert app.pop("http:response") == "1.1"
        assert isinstance(app.pop("http:reason"), str)
        return HttpReply(int(reply.properties.subject), app, reply.body_value, reply)

    # --- traffic --------------------------------------------------------------------------------

    def traffic(self, address: str, count: int, *, name: str = "traffic") -> Client:
        """A client that sends `count` messages to `address`, consumed by another link of it."""
        client = self.h.connect(name)
        receiver = client.receiver(address)
        self.h.pump()
        receiver.flow(count)
        sender = client.sender(address)
        self.h.pump()
        for i in range(count):
            client.send(sender, Message.value(i))
        self.h.pump()
        assert len(client.received[receiver]) == count
        return client
