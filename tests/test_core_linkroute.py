"""Link routes in the sans-IO core (RouterHarness): a client engine on a `route-container`
listener plays the broker and answers what the router passes on, so every step of the relay
can be watched: credit end to end and incremental, drain both ways, transfers held while the
receiver took credit back, streaming and aborts, outcomes and settlement, detach relay, and
what a lost container or client leaves behind (nothing)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.endpoints import UNINIT
from router.amqp.link import Link
from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED, Modified, Rejected, Source, Target
from router.amqp.performatives import Error
from router.config.models import LinkRouteConfig, Listener, RouterConfig, RouterSection
from router.core.linkroute import MARK, Route
from router.testing.routerharness import Client, RouterHarness

CLIENTS = Listener(name="amqp", port=5672, max_frame_size=512)
BROKER = Listener(name="broker", port=5673, role="route-container")


def harness() -> tuple[RouterHarness, Client, Client]:
    config = RouterConfig(router=RouterSection(id="r"), listeners=(CLIENTS, BROKER), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),
        LinkRouteConfig(prefix="q", direction="out", connection="broker", add_external_prefix="x/"),
    ))  # fmt: skip
    h = RouterHarness(config)
    broker = h.connect("broker", listener=BROKER)
    broker.auto_accept = False
    assert h.core.link_routes.containers
    return h, broker, h.connect("client", max_frame_size=512)


def attached_to(broker: Client) -> Link:
    """The link the router attached to the broker last (its session begun, as the broker would)."""
    for event in broker.events:
        if isinstance(event, ev.RemoteBegin) and event.session.state.local is UNINIT:
            event.session.begin()
    return [e.link for e in broker.events if isinstance(e, ev.RemoteAttach)][-1]


def passed_on(broker: Client) -> Link:
    """The link the router attached to the broker last, answered as the broker would."""
    link = attached_to(broker)
    link.answer(source=link.remote_source, target=link.remote_target)
    return link


def detaches(client: Client) -> list[ev.RemoteDetach]:
    return [e for e in client.events if isinstance(e, ev.RemoteDetach)]


def test_credit_outcomes_and_settlement_end_to_end() -> None:
    h, broker, client = harness()
    sender = client.sender("q.orders")
    h.pump()
    assert not sender.remotely_attached  # answered only when the broker answers
    upstream = passed_on(broker)
    assert upstream.remote_target.address == "q.orders"
    h.pump()
    assert sender.remotely_attached and sender.credit == 0  # no credit of the router's own
    upstream.flow(3)
    h.pump()
    assert sender.credit == 3
    ids = [client.send(sender, Message.value(i)) for i in range(3)]
    h.pump()
    arrived = broker.received[upstream]
    assert [r.message.body_value for r in arrived] == [0, 1, 2] and not any(r.settled for r in arrived)
    upstream.dispose(arrived[0].delivery_id, state=ACCEPTED, settled=True)
    refusal = Rejected(error=Error(condition=E.PRECONDITION_FAILED, description="full"))
    upstream.dispose(arrived[1].delivery_id, state=refusal, settled=True)
    upstream.dispose(arrived[2].delivery_id, state=ACCEPTED, settled=False)  # settled later
    h.pump()
    assert client.outcomes[ids[0]] == ACCEPTED and client.outcomes[ids[1]] == refusal
    assert client.outcomes[ids[2]] == ACCEPTED and ids[2] not in client.settled
    sender.dispose(ids[2], state=ACCEPTED, settled=True)  # the sender settles: so does the broker's side
    h.pump()
    assert arrived[2].delivery_id in broker.remote_settled
    upstream.flow(2)  # more credit, as the broker gives it
    h.pump()
    assert sender.credit == 2


def test_receiving_with_drain_and_address_rewriting() -> None:
    h, broker, client = harness()
    receiver = client.receiver("q.jobs")
    h.pump()
    upstream = passed_on(broker)
    assert upstream.remote_source.address == "x/q.jobs"  # add_external_prefix on the way
    h.pump()
    assert receiver.remote_source.address == "q.jobs"  # and undone for the client
    receiver.flow(5, drain=True)
    h.pump()
    assert upstream.credit == 5 and upstream.drain
    broker.send(upstream, Message.value("only one"))
    upstream.complete_drain()
    h.pump()
    assert client.bodies(receiver) == ["only one"]
    assert any(isinstance(e, ev.FlowReceived) and e.drained for e in client.events)
    assert receiver.credit == 0


def test_a_sender_drained_by_the_broker() -> None:
    h, broker, client = harness()
    sender = client.sender("q.d")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(4, drain=True)
    h.pump()
    assert sender.credit == 4 and sender.drain
    sender.complete_drain()  # nothing to send
    h.pump()
    assert any(isinstance(e, ev.FlowReceived) and e.drained for e in broker.events)
    assert upstream.credit == 0


def test_transfers_wait_while_the_receiver_took_credit_back() -> None:
    h, broker, client = harness()
    sender = client.sender("q.held")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(5)
    h.pump()
    ids = [client.send(sender, Message.value(i)) for i in range(2)]
    upstream.flow(0)  # reaches the router before the transfers (the broker is pumped first)
    h.pump()
    assert broker.received.get(upstream, []) == []
    upstream.flow(1)
    h.pump()
    assert [r.message.body_value for r in broker.received[upstream]] == [0]
    upstream.flow(3)
    h.pump()
    assert [r.message.body_value for r in broker.received[upstream]] == [0, 1]
    assert not client.outcomes or set(client.outcomes) <= set(ids)


def test_streaming_and_abort_pass_through() -> None:
    h, broker, client = harness()
    sender = client.sender("q.big")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(2)
    h.pump()
    big = Message.value("x" * 5000)  # ten frames of 512 bytes
    client.send(sender, big)
    h.pump()
    assert broker.bodies(upstream) == ["x" * 5000]
    sender.send_transfer(b"t", b"\x00" * 100, more=True)
    h.pump()
    sender.abort()
    h.pump()
    assert any(isinstance(e, ev.TransferReceived) and e.aborted for e in broker.events)
    assert len(broker.received[upstream]) == 1


def test_container_lost_gives_every_delivery_an_outcome_then_detaches() -> None:
    h, broker, client = harness()
    sender = client.sender("q.lost")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(3)
    h.pump()
    ids = [client.send(sender, Message.value(i)) for i in range(3)]
    h.pump()
    assert len(broker.received[upstream]) == 3  # unsettled at the broker
    h.disconnect(broker)
    for delivery_id in ids:
        assert client.outcomes[delivery_id] == Modified(delivery_failed=True) and delivery_id in client.settled
    (detach,) = detaches(client)
    assert detach.error is not None and detach.error.condition == E.NOT_FOUND
    assert "routed link lost" in (detach.error.description or "")
    assert not h.core.link_routes.pairs and not h.core.link_routes.containers
    assert all(not state.routed for state in h.core.connections.values())
    # Now nobody serves the route: refused, naming the address.
    again = client.sender("q.lost")
    h.pump()
    (_, refusal) = detaches(client)
    assert refusal.link is again and refusal.error is not None and refusal.error.condition == E.NOT_FOUND
    assert "q.lost" in (refusal.error.description or "")


def test_detach_is_relayed_with_its_error_both_ways() -> None:
    h, broker, client = harness()
    receiver = client.receiver("q.one")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.detach(error=Error(condition=E.RESOURCE_DELETED, description="queue deleted"))
    h.pump()
    (detach,) = detaches(client)
    assert detach.link is receiver and detach.error == Error(condition=E.RESOURCE_DELETED, description="queue deleted")
    assert not h.core.link_routes.pairs
    sender = client.sender("q.two")
    h.pump()
    passed_on(broker)
    h.pump()
    sender.detach(closed=True)
    h.pump()
    gone = detaches(broker)[-1]
    assert gone.closed and gone.error is None
    assert not h.core.link_routes.pairs


def test_a_refusing_container_refuses_the_client() -> None:
    h, broker, client = harness()
    sender = client.sender("q.nope")
    h.pump()
    link = attached_to(broker)
    link.reject(Error(condition=E.UNAUTHORIZED_ACCESS, description="not for you"))
    h.pump()
    (detach,) = detaches(client)
    assert detach.link is sender and detach.error == Error(condition=E.UNAUTHORIZED_ACCESS, description="not for you")
    assert sender.remote_target is None  # the container's null terminus, as it answered
    assert not h.core.link_routes.pairs


def test_client_lost_detaches_the_containers_side() -> None:
    h, broker, client = harness()
    client.receiver("q.c")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    h.disconnect(client)
    (detach,) = detaches(broker)
    assert detach.link is upstream and detach.closed
    assert not h.core.link_routes.pairs


def test_the_containers_late_answer_to_a_pair_already_broken_is_not_a_new_attach() -> None:
    # The client goes before the container answered: the router's attach and detach are both
    # on their way. The container answers the attach, then the detach, as it must; that answer
    # is to the router's own attach, not an attach of the container's (refusing it as one made
    # the container answer again, and so on for ever: a peer router breaking routed pairs
    # kept a container and the router busy).
    h, broker, client = harness()
    client.receiver("q.c")
    h.pump()
    h.disconnect(client)
    upstream = attached_to(broker)
    assert [d.link for d in detaches(broker)] == [upstream]
    upstream.answer(source=upstream.remote_source, target=upstream.remote_target)
    upstream.detach()
    before = len(broker.events)
    h.pump()
    assert not [e for e in broker.events[before:] if isinstance(e, (ev.RemoteAttach, ev.RemoteDetach))]
    assert not h.core.link_routes.pairs
    router_side = broker.router_side
    assert all(not session.links_by_name for session in router_side.sessions)


@pytest.mark.parametrize("address", [f"{MARK}in/p/q", f"{MARK}x"])
def test_the_advertised_form_is_reserved(address: str) -> None:
    h, _, client = harness()
    client.sender(address)
    h.pump()
    (detach,) = detaches(client)
    assert detach.error is not None and detach.error.condition == E.INVALID_FIELD


def test_a_client_cannot_claim_a_routed_attach_from_another_router() -> None:
    h, broker, client = harness()
    sender = client.session.attach_sender("s", source=Source(), target=Target(address="plain"),  # type: ignore[union-attr]
                                          properties={"mesh.link-route": True})  # fmt: skip
    h.pump()
    assert sender.remotely_attached and sender.remote_target.address == "plain"  # the router's own
    assert not [e for e in broker.events if isinstance(e, ev.RemoteAttach)]


def test_dynamic_target_named_by_the_container() -> None:
    h, broker, client = harness()
    props: dict[Any, Any] = {"x-opt-qd.address": "q.temp"}
    sender = client.session.attach_sender("dyn", source=Source(),  # type: ignore[union-attr]
                                          target=Target(dynamic=True, dynamic_node_properties=props))  # fmt: skip
    h.pump()
    link = attached_to(broker)
    assert link.remote_target.dynamic
    link.answer(source=link.remote_source, target=Target(address="q.temp.42", dynamic=True))
    h.pump()
    assert sender.remote_target.address == "q.temp.42"


def test_a_transfer_breaking_the_senders_own_settle_mode_fails_the_pair_only() -> None:
    h, broker, client = harness()
    sender = client.sender("q.modes", snd_settle_mode=0)  # unsettled: it promises never to presettle
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(2)
    h.pump()
    sender.snd_settle_mode = 2  # and breaks the promise (the engine does not check a peer's mode)
    sender.send_transfer(b"t", b"\x00Sw\xa1\x01x", settled=True)
    h.pump()
    (detach,) = detaches(client)
    assert detach.error is not None and detach.error.condition == E.INVALID_FIELD
    assert detaches(broker)[-1].link is upstream
    assert not h.core.link_routes.pairs
    other = client.sender("plain")  # the connection serves on
    h.pump()
    assert other.remotely_attached


@given(st.lists(st.one_of(
    st.tuples(st.just("flow"), st.integers(0, 4)),
    st.tuples(st.just("send"), st.integers(1, 3)),
    st.tuples(st.just("settle"), st.integers(0, 3)),
), max_size=25))  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_any_interleaving_of_credit_sends_and_settlement_loses_nothing(steps: list[tuple[str, int]]) -> None:
    """Whatever the broker does with its credit (gives, takes back) and whenever the client
    sends (as far as its credit goes) and the broker settles, every message reaches the broker
    once and in order, and every one the broker settles gets its outcome at the client."""
    h, broker, client = harness()
    sender = client.sender("q.any")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    sent: list[int] = []
    settled_at_broker = 0
    for op, n in steps:
        if op == "flow":
            upstream.flow(n)
            continue  # not pumped: the client may still send on the credit it had (held at the router)
        elif op == "send":
            for _ in range(min(n, sender.credit)):
                sent.append(client.send(sender, Message.value(len(sent))))
        else:
            arrived = broker.received.get(upstream, [])
            for record in arrived[settled_at_broker:settled_at_broker + n]:
                upstream.dispose(record.delivery_id, state=ACCEPTED, settled=True)
            settled_at_broker = min(len(arrived), settled_at_broker + n)
        h.pump()
        assert len(broker.received.get(upstream, [])) <= len(sent)
    upstream.flow(len(sent) + 1)  # enough for whatever still waits in the router
    h.pump()
    arrived = broker.received.get(upstream, [])
    assert [r.message.body_value for r in arrived] == list(range(len(sent)))
    for record in arrived[settled_at_broker:]:
        upstream.dispose(record.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert all(client.outcomes.get(d) == ACCEPTED and d in client.settled for d in sent)
    sender.detach()
    h.pump()
    assert not h.core.link_routes.pairs


@given(st.text(alphabet="ab./", max_size=8), st.sampled_from([None, "a", "a/"]), st.sampled_from([None, "x.", "b"]))
def test_rewriting_is_undone_for_the_client(address: str, delete: str | None, add: str | None) -> None:
    """What the container is told, told back (as for a dynamic node's address), is the client's own
    address, whenever the address starts with the prefix to delete (or there is none)."""
    if delete is not None and not address.startswith(delete):
        address = delete + address
    config = LinkRouteConfig(prefix="a", direction="in", connection="c", del_external_prefix=delete,
                             add_external_prefix=add)  # fmt: skip
    route = Route(config)
    outward = route.outward(address)
    assert outward is not None and (add is None or outward.startswith(add))
    assert route.inward(outward) == address


def test_the_containers_connection_has_its_link_limit_too() -> None:
    config = RouterConfig(router=RouterSection(id="r"), listeners=(
        CLIENTS, BROKER.model_copy(update={"max_links_per_connection": 1})), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),))  # fmt: skip
    h = RouterHarness(config)
    broker = h.connect("broker", listener=config.listeners[1])
    client = h.connect("client")
    client.sender("q.1")
    h.pump()
    passed_on(broker)
    client.sender("q.2")
    h.pump()
    (refusal,) = detaches(client)
    assert refusal.error is not None and refusal.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert "route container" in (refusal.error.description or "")


def test_a_container_back_serves_the_route_again_and_patterns_match_by_words() -> None:
    config = RouterConfig(router=RouterSection(id="r"), listeners=(CLIENTS, BROKER), link_routes=(
        LinkRouteConfig(pattern="orders.*.eu", direction="in", connection="broker"),))  # fmt: skip
    h = RouterHarness(config)
    broker = h.connect("broker", listener=BROKER)
    client = h.connect("client")
    h.disconnect(broker)
    client.sender("orders.books.eu")
    h.pump()
    (refusal,) = detaches(client)
    assert refusal.error is not None and refusal.error.condition == E.NOT_FOUND
    refusal.link.detach()
    broker = h.connect("broker-again", listener=BROKER)  # the connector redialled
    routed = client.sender("orders.books.eu")
    plain = client.sender("orders.books.us")  # not a match: the router's own address
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    assert routed.remotely_attached and upstream.remote_target.address == "orders.books.eu"
    assert plain.remotely_attached and h.core.table.find("orders.books.us") is not None
    assert [link.name for link in broker.engine.sessions[-1].links] == [routed.name]


def test_a_graceful_stop_stops_routed_senders_and_waits_for_their_outcomes() -> None:
    h, broker, client = harness()
    sender = client.sender("q.stop")
    h.pump()
    upstream = passed_on(broker)
    h.pump()
    upstream.flow(5)
    h.pump()
    ids = [client.send(sender, Message.value(i)) for i in range(2)]
    h.pump()
    assert h.core.in_flight() == 2
    h.core.quiesce(h.now)
    h.pump()
    assert sender.credit == 0  # nothing new comes in
    upstream.flow(5)  # the broker would take more: the router does not pass it on while draining
    h.pump()
    assert sender.credit == 0
    for record in broker.received[upstream]:
        upstream.dispose(record.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert h.core.in_flight() == 0
    assert all(client.outcomes[d] == ACCEPTED for d in ids)
