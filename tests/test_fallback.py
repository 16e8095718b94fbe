"""Fallback destinations, sans-IO (router.core.fallback; docs/brokers.md, "Fallback
destinations"): an address whose rule says enable_fallback sends its deliveries to its fallback
destinations (an out auto-link with fallback: true, a receiver with the source capability
qd.fallback) while it has no consumer anywhere, instead of releasing them; new deliveries go to
consumers again once there are some; an in auto-link with fallback: true gives the stored
messages to consumers (credit only while there are regular ones). On one router, across a
mesh of two and through an edge router; the rules of configuration and management. A real
broker: tests/test_autolinks_rabbitmq.py."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, RELEASED, AmqpValue, Properties, Source, Target
from router.config import ConfigError, parse_config
from router.config.models import AddressConfig, AutoLink, Listener, RouterConfig
from router.core.links import InLink
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

from .test_autolinks import BROKERS, Broker, _broker

RULES = (AddressConfig(prefix="orders", enable_fallback=True),)
QUEUE = "/queue/orders-stored"
STORE = AutoLink(address="orders", direction="out", connection="brokers", external_address=QUEUE, fallback=True)
DRAIN = AutoLink(address="orders", direction="in", connection="brokers", external_address=QUEUE, fallback=True)


def _standalone(auto_links: tuple[AutoLink, ...] = (STORE,), rules: tuple[AddressConfig, ...] = RULES) -> MeshHarness:
    h = MeshHarness()
    h.router("A", mode="standalone", listeners=(CLIENTS, BROKERS), auto_links=auto_links, addresses=rules)
    return h


def _messages(*bodies: str) -> list[bytes]:
    return [encode_message(Message(body=AmqpValue(value=body))) for body in bodies]


def _send(h: MeshHarness, producer: Client, sender: Link, payloads: list[bytes]) -> list[int]:
    ids = [producer.send(sender, payload) for payload in payloads]
    h.pump()
    return ids


def _stored(broker: Broker) -> list[bytes]:
    """What the broker got, byte for byte (no router annotations: as the producer sent it)."""
    return [r.payload for received in broker.received.values() for r in received]


def _consumer(h: MeshHarness, rid: str = "A") -> tuple[Client, Link]:
    """A regular consumer of `orders` on router `rid`, with credit 10."""
    consumer = h.client(rid, "consumer")
    receiver = consumer.receiver("orders")
    h.pump()
    receiver.flow(10)
    return consumer, receiver


def _fallback_receiver(client: Client, address: str) -> Link:
    return client.receiver(address, source=Source(address=address, capabilities=("qd.fallback",)))


def _detach_error(client: Client, link: Link) -> Any:
    (detach,) = [e for e in client.events if isinstance(e, ev.RemoteDetach) and e.link is link]
    return detach.error


# --- one router ----------------------------------------------------------------------------------


def test_no_consumer_the_fallback_queue_stores_then_a_consumer_gets_the_new_ones() -> None:
    h = _standalone()
    broker = _broker(h, "A", "broker-1")
    assert h.cores["A"].autolinks.runs[STORE.key].state == "active"
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit > 0  # a fallback destination is a destination for credit
    stored = _messages("a", "b", "c")
    ids = _send(h, producer, sender, stored)
    assert _stored(broker) == stored  # the message as it was sent: no router annotations
    assert all(producer.outcomes[i] == ACCEPTED for i in ids)  # the queue's outcome
    core = h.cores["A"]
    entry = core.table.find("orders")
    assert entry is not None and entry.redirected == 3 and entry.released == 0
    assert core.forwarder.redirected_to_fallback == 3
    assert core.table.entries["M_$fallback/orders"].deliveries_egress == 3
    # A consumer comes: new deliveries go to it, not to the queue.
    consumer, receiver = _consumer(h)
    h.pump()
    ids = _send(h, producer, sender, _messages("d", "e"))
    assert consumer.bodies(receiver) == ["d", "e"]
    assert len(_stored(broker)) == 3 and entry.redirected == 3
    # It goes again: the queue takes them again.
    receiver.detach(closed=True)
    h.pump()
    _send(h, producer, sender, _messages("f"))
    assert _stored(broker)[3:] == _messages("f")


def test_without_any_destination_no_credit_and_released() -> None:
    h = _standalone()  # no broker connected: no fallback destination either
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0
    anonymous = producer.sender(None)
    h.pump()
    message = Message(properties=Properties(to="orders"), body=AmqpValue(value="lost"))
    (sent,) = _send(h, producer, anonymous, [encode_message(message)])
    assert producer.outcomes[sent] == RELEASED
    entry = h.cores["A"].table.find("orders")
    assert entry is None or entry.redirected == 0


def test_the_queue_coming_gives_credit_and_going_takes_it_back() -> None:
    h = _standalone()
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0
    broker = _broker(h, "A", "broker-1")
    assert sender.credit > 0
    h.cut(next(w for w in h.wires if w.a_client is broker))
    assert sender.credit == 0  # drained: nowhere to go any more


def test_an_address_without_the_rule_releases_as_before() -> None:
    # The auto-link is failed (no rule here gives `orders` fallback destinations): refused at
    # run time with the reason, retried in case a rule comes.
    h = _standalone(rules=(AddressConfig(prefix="other", enable_fallback=True),))
    _broker(h, "A", "broker-1")
    run = h.cores["A"].autolinks.runs[STORE.key]
    assert run.state == "failed" and "enable_fallback" in (run.last_error or "")
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0


def test_the_in_fallback_auto_link_drains_the_queue_to_consumers_only() -> None:
    h = _standalone((STORE, DRAIN))
    broker = _broker(h, "A", "broker-1")
    runs = h.cores["A"].autolinks.runs
    assert runs[STORE.key].state == "active" and runs[DRAIN.key].state == "active"  # no loop
    served = broker.serving[QUEUE]
    # No regular consumer: the way out of the queue gets no credit, though the queue itself is
    # a destination of the address (its messages are never fed back into it).
    assert served.credit == 0
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    _send(h, producer, sender, _messages("s0", "s1"))
    assert len(_stored(broker)) == 2
    assert served.credit == 0
    # A consumer comes: the drain gets credit, and the stored messages reach it.
    broker.queues[QUEUE] = deque(_stored(broker))
    consumer, receiver = _consumer(h)
    h.pump()
    assert served.credit > 0
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["s0", "s1"]
    inl = runs[DRAIN.key].record
    assert isinstance(inl, InLink) and inl.from_fallback and inl.accepted == 2
    assert len(_stored(broker)) == 2  # nothing went back into the queue
    # The consumer goes: the drain is drained, and what it still gives out is released (it
    # goes back to the queue at the broker), never diverted into the fallback.
    receiver.detach(closed=True)
    h.pump()
    assert served.credit == 0


def test_a_qd_fallback_receiver_is_a_fallback_destination() -> None:
    h = _standalone(())
    store = h.client("A", "store")
    fallback = _fallback_receiver(store, "orders")
    h.pump()
    assert fallback.remote_source is not None and "qd.fallback" in fallback.remote_source.capabilities  # honoured
    fallback.flow(10)
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit > 0
    _send(h, producer, sender, _messages("kept"))
    assert store.bodies(fallback) == ["kept"]
    consumer, receiver = _consumer(h)
    h.pump()
    _send(h, producer, sender, _messages("live"))
    assert consumer.bodies(receiver) == ["live"] and store.bodies(fallback) == ["kept"]


def test_qd_fallback_on_an_address_without_fallback_is_refused() -> None:
    h = _standalone(())
    client = h.client("A", "store")
    refused = _fallback_receiver(client, "elsewhere")
    h.pump()
    error = _detach_error(client, refused)
    assert error.condition == E.PRECONDITION_FAILED
    assert "qd.fallback" in error.description and "enable_fallback" in error.description
    assert refused.remote_source is None  # nothing echoed, nothing honoured
    dynamic = client.receiver(None, source=Source(dynamic=True, capabilities=("qd.fallback",)))
    h.pump()
    assert _detach_error(client, dynamic).condition == E.PRECONDITION_FAILED
    plain = client.receiver("elsewhere")  # the same address without the capability: as ever
    h.pump()
    assert plain.remote_source is not None and not plain.remote_source.capabilities


def _fallback_sender(client: Client, address: str | None, dynamic: bool = False) -> Link:
    """A producer draining a fallback (the target capability qd.fallback), as a broker's shovel."""
    assert client.session is not None
    target = Target(address=address, dynamic=dynamic, capabilities=("qd.fallback",))
    return client.session.attach_sender(f"drain-{address}", source=Source(address=None), target=target)


def test_a_qd_fallback_sender_drains_to_regular_consumers_only() -> None:
    # The in auto-link's part played by a client: credit only while the address has a regular
    # consumer, its messages never diverted into the fallback (whose receiver is here too).
    h = _standalone(())
    store = h.client("A", "store")
    fallback = _fallback_receiver(store, "orders")
    h.pump()
    fallback.flow(10)
    drain_client = h.client("A", "drain")
    drain = _fallback_sender(drain_client, "orders")
    h.pump()
    assert drain.remote_target is not None and "qd.fallback" in drain.remote_target.capabilities  # honoured
    assert drain.credit == 0
    consumer, receiver = _consumer(h)
    h.pump()
    assert drain.credit > 0
    _send(h, drain_client, drain, _messages("from-queue"))
    assert consumer.bodies(receiver) == ["from-queue"] and store.bodies(fallback) == []
    # The consumer goes: no credit again (the producer's is taken back, not left to feed the
    # fallback).
    receiver.detach(closed=True)
    h.pump()
    assert drain.credit == 0 and store.bodies(fallback) == []


def test_a_qd_fallback_sender_needs_an_address_with_fallback() -> None:
    h = _standalone(())
    client = h.client("A", "drain")
    for link in (_fallback_sender(client, "elsewhere"), _fallback_sender(client, None, dynamic=True)):
        h.pump()
        error = _detach_error(client, link)
        assert error.condition == E.PRECONDITION_FAILED and "qd.fallback" in error.description
        assert link.remote_target is None  # nothing echoed


def test_a_delivery_waiting_when_the_last_consumer_goes_is_diverted() -> None:
    h = _standalone()
    broker = _broker(h, "A", "broker-1")
    consumer = h.client("A", "consumer")
    receiver = consumer.receiver("orders")
    h.pump()
    receiver.flow(1)
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    ids = _send(h, producer, sender, _messages("first", "waits"))
    assert consumer.bodies(receiver) == ["first"] and not _stored(broker)  # one waits for credit
    receiver.detach(closed=True)
    h.pump()
    assert _stored(broker) == _messages("waits")
    assert producer.outcomes[ids[1]] == ACCEPTED


# --- a mesh of two, and an edge router -----------------------------------------------------------


def test_mesh_a_producer_on_a_reaches_the_fallback_on_b() -> None:
    h = MeshHarness()
    h.router("A", instance=1, addresses=RULES)  # the rule on both (as for waypoints)
    h.router("B", instance=2, listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKERS), auto_links=(STORE, DRAIN), addresses=RULES)
    h.link("A", "B")
    h.converge()
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0
    broker = _broker(h, "B", "broker-1")
    h.converge()
    assert "M_$fallback/orders" in h.cores["A"].table.entries  # advertised like any address
    assert sender.credit > 0  # A's producer learnt of the fallback on B
    sent = _messages("m0", "m1", "m2")
    ids = _send(h, producer, sender, sent)
    assert _stored(broker) == sent  # annotations added between routers, stripped for the broker
    assert all(producer.outcomes[i] == ACCEPTED for i in ids)
    assert h.cores["A"].table.find("orders").redirected == 3  # type: ignore[union-attr]
    # A consumer on A: B's drain gets credit (a regular destination in the mesh), and the
    # stored messages cross back to it; new ones go to it directly.
    served = broker.serving[QUEUE]
    assert served.credit == 0
    consumer, receiver = _consumer(h)
    h.converge()
    h.advance(0.5)
    assert served.credit > 0
    broker.queues[QUEUE] = deque(sent)
    broker.pump_out()
    h.pump()
    _send(h, producer, sender, _messages("m3"))
    assert consumer.bodies(receiver) == ["m0", "m1", "m2", "m3"]
    assert len(_stored(broker)) == 3


def test_mesh_a_delivery_waiting_on_another_router_goes_back_to_the_fallback() -> None:
    # A routed it to B's consumer, where it waits for credit; the consumer goes: B diverts it
    # to the fallback, which is back on A (where it would otherwise have been released back).
    h = MeshHarness()
    h.router("A", instance=1, listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKERS), auto_links=(STORE,), addresses=RULES)
    h.router("B", instance=2, addresses=RULES)
    h.link("A", "B")
    broker = _broker(h, "A", "broker-1")
    consumer = h.client("B", "consumer")
    receiver = consumer.receiver("orders")  # (no credit yet)
    h.converge()
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    sent = _messages("waits at B")
    ids = _send(h, producer, sender, sent)
    assert not _stored(broker) and not producer.outcomes
    assert len(h.cores["B"].table.find("orders").pending) == 1  # type: ignore[union-attr]
    receiver.detach(closed=True)
    h.pump()
    assert _stored(broker) == sent  # B's annotations for A written anew, stripped for the broker
    assert producer.outcomes[ids[0]] == ACCEPTED
    assert h.cores["B"].forwarder.redirected_to_fallback == 1
    assert h.cores["A"].forwarder.redirected_to_fallback == 0


def test_edge_a_fallback_auto_link_on_an_edge_serves_the_mesh() -> None:
    h = MeshHarness()
    h.router("A", instance=1, addresses=RULES)
    h.router("E", mode="edge", listeners=(CLIENTS, BROKERS), auto_links=(STORE, DRAIN), addresses=RULES)
    h.uplink("E", "A")
    broker = _broker(h, "E", "broker-1")
    h.converge()
    h.advance(0.5)
    on_interior = h.client("A", "p-interior")
    on_edge = h.client("E", "p-edge")
    s_interior, s_edge = on_interior.sender("orders"), on_edge.sender("orders")
    h.advance(0.5)
    assert s_interior.credit > 0 and s_edge.credit > 0
    _send(h, on_interior, s_interior, _messages("from A"))
    _send(h, on_edge, s_edge, _messages("from E"))
    assert sorted(_stored(broker)) == sorted(_messages("from A", "from E"))
    # A consumer on the interior: the edge's drain gets credit from what the uplink tells it.
    served = broker.serving[QUEUE]
    assert served.credit == 0
    consumer, receiver = _consumer(h)
    h.advance(0.5)
    assert served.credit > 0
    broker.queues[QUEUE] = deque(_messages("stored"))
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["stored"]


def test_edge_a_producer_on_an_edge_reaches_the_fallback_in_the_mesh() -> None:
    h = MeshHarness()
    h.router("A", instance=1, listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKERS), auto_links=(STORE,), addresses=RULES)
    h.router("E", mode="edge", addresses=RULES)
    h.uplink("E", "A")
    h.converge()
    h.advance(0.5)
    producer = h.client("E", "producer")
    sender = producer.sender("orders")
    h.advance(0.5)
    assert sender.credit == 0
    broker = _broker(h, "A", "broker-1")
    h.advance(0.5)
    assert sender.credit > 0  # the uplink says the mesh has `_$fallback/orders`
    assert "M_$fallback/orders" not in h.cores["E"].table.entries  # (no entry needed for that)
    sent = _messages("from E")
    ids = _send(h, producer, sender, sent)
    assert _stored(broker) == sent and producer.outcomes[ids[0]] == ACCEPTED
    h.cut(next(w for w in h.wires if w.a_client is broker))
    h.advance(0.5)
    assert sender.credit == 0


def test_the_configuration_in_docs_brokers_md_works() -> None:
    # Its rule and auto-links, with the broker's connection accepted on a listener of the
    # connector's name (auto-links match either by name).
    path = Path(__file__).resolve().parent.parent / "docs" / "brokers.md"
    if not path.exists():
        pytest.skip("docs/ is not beside these tests (the installed wheel's test copy)")
    section = path.read_text().split("## Fallback destinations\n", 1)[1]
    config = parse_config(yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0]), "docs/brokers.md")
    (connector,) = config.connectors
    rabbit = Listener(name=connector.name, port=5681, role="route-container")
    h = MeshHarness()
    h.router("A", mode="standalone", listeners=(CLIENTS, rabbit), addresses=config.addresses, auto_links=config.auto_links)
    broker = _broker(h, "A", "rabbit", rabbit)
    assert {run.state for run in h.cores["A"].autolinks.runs.values()} == {"active"}
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.pump()
    stored = _messages("kept")
    _send(h, producer, sender, stored)
    assert _stored(broker) == stored
    (queue,) = broker.serving
    broker.queues[queue] = deque(stored)
    consumer, receiver = _consumer(h)
    h.pump()
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["kept"]


# --- configuration and management ----------------------------------------------------------------


def test_config_rules() -> None:
    with pytest.raises(ValidationError, match="enable_fallback: anycast addresses only"):
        AddressConfig(prefix="x", distribution="multicast", enable_fallback=True)
    with pytest.raises(ValidationError, match="enable_fallback: not on a waypoint"):
        AddressConfig(prefix="x", waypoint=True, enable_fallback=True)
    with pytest.raises(ConfigError, match=r"auto-link 'autoLink/orders/out/brokers/fallback': fallback: true needs an "
                       "address rule with enable_fallback: true for 'orders'"):  # fmt: skip
        parse_config({"auto_links": [STORE.model_dump()]}, "router.yaml")
    parse_config({"auto_links": [STORE.model_dump()], "addresses": [RULES[0].model_dump()]})
    # (built in steps, as management and reloads do, the router checks it: failed auto-links)
    RouterConfig(auto_links=(STORE,))
    assert STORE.key == "autoLink/orders/out/brokers/fallback"  # beside a regular one of the same address


def test_management_attributes() -> None:
    from router.management import ManagementAgent
    from router.management.model import ManagementError

    h = _standalone((), rules=())
    core = h.cores["A"]
    agent = ManagementAgent(core, core.config, clock=lambda: h.now)
    rule = agent.create("address", {"prefix": "jobs", "enableFallback": True})
    assert rule["enableFallback"] is True
    with pytest.raises(ManagementError) as multicast:
        agent.create("address", {"prefix": "news", "distribution": "multicast", "enableFallback": True})
    assert multicast.value.status == 400 and "enable_fallback" in str(multicast.value)
    created = agent.create("autoLink", {"address": "jobs", "direction": "out", "connection": "brokers", "fallback": True})
    assert created["fallback"] is True and created["identity"] == "autoLink/jobs/out/brokers/fallback"
    broker = _broker(h, "A", "broker-1")
    assert agent.read("autoLink", identity=created["identity"])["operStatus"] == "active"
    producer = h.client("A", "producer")
    sender = producer.sender("jobs")
    h.pump()
    _send(h, producer, sender, _messages("j"))
    assert len(_stored(broker)) == 1
    address = agent.read("router.address", identity="M0jobs")
    assert address["deliveriesRedirectedToFallback"] == 1
    assert agent.read("router.address", identity="M0_$fallback/jobs")["deliveriesEgress"] == 1
    (router,) = agent.query("router", ["deliveriesRedirectedToFallback"])[1]
    assert router == [1]
    from router.management.metrics import Metrics

    assert b"amqp_router_deliveries_redirected_to_fallback_total 1.0" in Metrics(agent).text()
    with pytest.raises(ManagementError) as no_rule:
        agent.create("autoLink", {"address": "other", "direction": "out", "connection": "brokers", "fallback": True})
    assert no_rule.value.status == 400 and "enableFallback" in str(no_rule.value)
    # The rule may go (changes apply one at a time): the auto-link is failed the next time it
    # attaches, saying why.
    agent.delete("address", rule["identity"])
    ours = core.autolinks.runs[created["identity"]].link
    assert ours is not None
    (theirs,) = [link for s in broker.engine.sessions for link in s.links if link.name == ours.name]
    theirs.detach(closed=True)
    h.pump()
    h.advance(STORE.retry_initial_s + 0.01)
    status = agent.read("autoLink", identity=created["identity"])
    assert status["operStatus"] == "failed" and "enable_fallback" in status["lastError"]
