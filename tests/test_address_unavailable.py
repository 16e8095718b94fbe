"""`distribution: unavailable` (as the anchors' address treatment): an attach to such an address
is refused with amqp:not-found, a delivery sent to it through the anonymous relay is rejected
with amqp:not-found (never released: the sender must not retry), for a rule in the file and one
created through management; other addresses are untouched. python-qpid-proton over sockets.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection, LinkDetached

from router.config.models import AddressConfig, HttpListener, Listener, RouterConfig, RouterSection

from .support.interop import run_in_thread
from .support.management import managed_router

pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0


def _refused(create: Any) -> str | None:
    """The condition the router refused an attach with (None: attached)."""
    try:
        link = create()
    except LinkDetached as exc:
        condition = exc.link.remote_condition
        return str(condition.name) if condition is not None else "no condition"
    link.close()
    return None


def scenario(port: int) -> dict[str, Any]:
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    got: dict[str, Any] = {}
    try:
        got["receiver"] = _refused(lambda: conn.create_receiver("closed.orders"))
        got["sender"] = _refused(lambda: conn.create_sender("closed"))
        got["open_receiver"] = _refused(lambda: conn.create_receiver("open.orders"))
        relay = conn.create_sender(None)
        delivery = relay.send(Message(address="closed.orders", body="x"), timeout=TIMEOUT_S, error_states=[])
        got["relay"] = delivery.remote_state
        got["relay_condition"] = delivery.remote.condition.name if delivery.remote.condition else None
        got["relay_description"] = delivery.remote.condition.description if delivery.remote.condition else None
        got["relay_unknown"] = relay.send(Message(address="nobody.here", body="x"), timeout=TIMEOUT_S, error_states=[]).remote_state
        # A rule created at run time through management takes effect for addresses looked up after.
        replies = conn.create_receiver(None, dynamic=True)
        requests = conn.create_sender("$management")
        requests.send(Message(reply_to=replies.remote_source.address, id="1", body={"prefix": "later", "distribution": "unavailable"},
                              properties={"operation": "CREATE", "type": "org.apache.qpid.dispatch.router.config.address",
                                          "name": "later-rule"}), timeout=TIMEOUT_S)  # fmt: skip
        got["created"] = replies.receive(timeout=TIMEOUT_S).properties["statusCode"]
        got["later"] = _refused(lambda: conn.create_receiver("later.x"))
        # The connection is still fine: a normal address still works end to end.
        receiver = conn.create_receiver("open.q")
        sender = conn.create_sender("open.q")
        sender.link.send(Message(body="fine"))
        got["fine"] = receiver.receive(timeout=TIMEOUT_S).body
        receiver.accept()
    finally:
        conn.close()
    return got


async def test_unavailable_addresses_are_refused_and_rejected() -> None:
    config = RouterConfig(
        router=RouterSection(id="unavailable-router"),
        listeners=(Listener(name="amqp", port=0),),
        http=(HttpListener(name="http", port=0),),
        addresses=(AddressConfig(prefix="closed", distribution="unavailable"),),
    )
    async with managed_router(config) as router:
        got = await run_in_thread(scenario, router.amqp_port, timeout_s=3 * TIMEOUT_S)
        status = await router.http("GET", "/management/router.config.address/address%2F0")
    assert got["receiver"] == got["sender"] == "amqp:not-found"
    assert got["open_receiver"] is None
    assert got["relay"] == Delivery.REJECTED and got["relay_condition"] == "amqp:not-found"
    assert "unavailable" in got["relay_description"]
    assert got["relay_unknown"] == Delivery.RELEASED  # an unknown address is still only released
    assert got["created"] == 201 and got["later"] == "amqp:not-found"
    assert got["fine"] == "fine"
    assert status.status == 200 and status.json["distribution"] == "unavailable"


def test_table_answers_unavailable_only_while_the_rule_is_there() -> None:
    from router.core.table import UNAVAILABLE, AddressTable

    rule = AddressConfig(pattern="secret.*", distribution="unavailable")
    table = AddressTable(RouterConfig(router=RouterSection(id="R"), addresses=(rule,)))
    assert table.unavailable("secret.x") and table.lookup("secret.x") is UNAVAILABLE
    assert not table.unavailable("secret.x.y") and table.lookup("secret.x.y") is None  # '*' is one word
    table.remove_rule(rule)
    assert not table.unavailable("secret.x") and table.lookup("secret.x") is None
    # An address in use keeps its distribution until it is unused, as with any rule.
    entry = table.get_or_create("secret.y")
    table.add_rule(rule)
    assert entry is not None and not table.unavailable("secret.y") and table.lookup("secret.y") is entry


def test_an_entry_made_with_the_unavailable_distribution_stays_refused() -> None:
    """An interior router keeps entries for addresses other routers advertise: such an entry
    made while the rule is there is unavailable too (attach refused, deliveries not routed)."""
    from router.core.table import UNAVAILABLE, AddressTable

    rule = AddressConfig(prefix="closed", distribution="unavailable")
    table = AddressTable(RouterConfig(router=RouterSection(id="R", mode="interior"), addresses=(rule,)))
    advertised = table.get_or_create("closed.x")  # as router.core.mesh does for a remote consumer
    assert advertised is not None and advertised.distribution == "unavailable"
    assert table.unavailable("closed.x") and table.lookup("closed.x") is UNAVAILABLE



def test_unavailable_on_one_router_of_a_mesh() -> None:
    """A's rule holds at A although B has a consumer of the address: A refuses the attach and
    rejects its clients' anonymous sends; B, without the rule, serves the address."""
    from router.amqp.events import RemoteDetach
    from router.amqp.message import Message
    from router.amqp.messaging import Properties, Rejected
    from router.testing.meshharness import MeshHarness

    h = MeshHarness()
    h.router("A", addresses=(AddressConfig(prefix="closed", distribution="unavailable"),))
    h.router("B")
    h.link("A", "B")
    h.converge()
    consumer = h.client("B", "c")
    rx = consumer.receiver("closed.x")
    h.pump()
    rx.flow(10)
    h.converge()
    producer = h.client("A", "p")
    tx = producer.sender("closed.x")
    relay = producer.sender(None)
    h.pump()
    [detach] = [e for e in producer.events if isinstance(e, RemoteDetach) and e.link is tx]
    assert detach.error is not None and detach.error.condition == "amqp:not-found"
    sent = producer.send(relay, Message.value("x", properties=Properties(to="closed.x")))
    h.pump()
    outcome = producer.outcomes[sent]
    assert isinstance(outcome, Rejected) and outcome.error is not None and outcome.error.condition == "amqp:not-found"
    local = h.client("B", "p2")
    tx_b = local.sender("closed.x")
    h.pump()
    local.send(tx_b, Message.value("y"))
    h.pump()
    assert consumer.bodies(rx) == ["y"]
