"""Auto-links, sans-IO (router.core.autolinks): the router attaches to a broker's queue itself
while a route-container connection is up; the queue is a consumer (out) or producer (in) of the
address for the whole mesh; refusals, detaches and lost connections are retried with backoff;
a queue sharded over two brokers gets balanced shares. Real brokers: tests/test_autolinks_rabbitmq.py."""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import pytest
from pydantic import ValidationError

from router.amqp import events as ev
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, AmqpValue
from router.amqp.performatives import Error
from router.config.models import AddressConfig, AutoLink, Listener, RouterConfig
from router.core.links import InLink, OutLink
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness, Wire
from router.testing.routerharness import Client

BROKERS = Listener(name="brokers", port=5680, role="route-container")


class Broker(Client):
    """A broker double: answers the router's attaches (or refuses them), keeps what the router
    sends in per-address queues and sends its queued messages on the links it serves out."""

    refuse: bool = False
    silent: bool = False
    queues: dict[str, deque[bytes]]
    serving: dict[str, Any]

    def on_events(self, events: list[ev.Event]) -> None:
        super().on_events(events)
        for event in events:
            if isinstance(event, ev.RemoteBegin) and event.session.state.local.name == "UNINIT":
                event.session.begin()
            elif isinstance(event, ev.RemoteAttach) and event.link.state.local.name == "UNINIT" and not self.silent:
                link = event.link
                if self.refuse:
                    link.reject(Error(condition="amqp:not-found", description="no such queue"))
                    continue
                link.attach(source=link.remote_source, target=link.remote_target)
                if link.is_sender:  # the router receives from the queue
                    self.serving[link.remote_source.address] = link
                else:  # the router sends to the queue
                    link.flow(100)
            elif isinstance(event, ev.FlowReceived):
                self.pump_out()

    def pump_out(self) -> None:
        for address, link in self.serving.items():
            queue = self.queues.setdefault(address, deque())
            while queue and link.credit > 0 and link.state.local.name == "ACTIVE":
                self.tags += 1
                link.send_transfer(str(self.tags).encode(), queue.popleft(), settled=False)

    def stored(self) -> list[Any]:
        return [r.message.body_value for received in self.received.values() for r in received]


def _broker(h: MeshHarness, router_id: str, name: str, listener: Listener = BROKERS) -> Broker:
    from router.amqp.connection import Connection, ConnectionConfig
    from router.core.connections import new_engine

    core = h.cores[router_id]
    router_side = new_engine(core.config, listener)
    core.accept(router_side, listener)
    engine = Connection(ConnectionConfig(container_id=name))
    broker = Broker(name, engine, router_side)
    broker.queues, broker.serving = {}, {}
    h.wires.append(Wire(engine, router_side, None, core, a_client=broker, name=f"{name}@{router_id}"))
    engine.open()
    h.pump()
    broker.session = engine.begin_session()
    h.pump()
    return broker


def _mesh(auto_links: tuple[AutoLink, ...], **router: Any) -> MeshHarness:
    h = MeshHarness()
    listeners = (CLIENTS, INTER_ROUTER, EDGE, BROKERS)
    h.router("A", instance=1, listeners=listeners, auto_links=auto_links, **router)
    h.router("B", instance=2, **{k: v for k, v in router.items() if k == "addresses"})
    h.link("A", "B")
    h.converge()
    return h


def _state(h: MeshHarness, key: str) -> str:
    return h.cores["A"].autolinks.runs[key].state


OUT = AutoLink(address="orders", direction="out", connection="brokers", external_address="/queue/orders")
IN = AutoLink(address="orders-done", direction="in", connection="brokers", external_address="/queue/orders")


def test_out_and_in_through_a_two_router_mesh() -> None:
    h = _mesh((OUT, IN))
    assert _state(h, OUT.key) == "inactive"
    broker = _broker(h, "A", "broker-1")
    assert _state(h, OUT.key) == "active" and _state(h, IN.key) == "active"
    h.converge()
    producer = h.client("B", "producer")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit > 0  # the queue is a consumer of "orders" for the whole mesh
    ids = [producer.send(sender, Message(body=AmqpValue(value=f"order {i}"))) for i in range(3)]
    h.pump()
    assert broker.stored() == ["order 0", "order 1", "order 2"]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)
    # The way out of the queue: the broker's messages reach a consumer on the other router.
    broker.queues["/queue/orders"] = deque(encode_message(Message(body=AmqpValue(value=f"done {i}"))) for i in range(2))
    consumer = h.client("B", "consumer")
    receiver = consumer.receiver("orders-done")
    h.pump()
    h.converge()
    receiver.flow(10)
    h.pump()
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["done 0", "done 1"]
    # The auto-link's receiving side got credit only once the address had a destination.
    inl = h.cores["A"].autolinks.runs[IN.key].record
    assert isinstance(inl, InLink) and inl.delivered == 2 and inl.accepted == 2


def test_in_gets_no_credit_without_a_destination() -> None:
    h = _mesh((IN,))
    broker = _broker(h, "A", "broker-1")
    link = broker.serving["/queue/orders"]
    assert _state(h, IN.key) == "active"
    assert link.credit == 0  # nobody consumes orders-done: the router takes nothing to hold


def test_refused_attach_fails_then_retries_with_backoff() -> None:
    h = _mesh((OUT,))
    Broker.refuse = True  # from its first attach on
    try:
        broker = _broker(h, "A", "broker-1")
    finally:
        Broker.refuse = False
    broker.refuse = True
    run = h.cores["A"].autolinks.runs[OUT.key]
    assert run.state == "failed" and "not-found" in (run.last_error or "")
    assert run.retry_at is not None and run.retry_at - h.now == pytest.approx(OUT.retry_initial_s)
    entry = h.cores["A"].table.find("orders")
    assert entry is None or not entry.consumers  # a refused link is no consumer
    h.advance(OUT.retry_initial_s + 0.01)
    assert run.state == "failed" and run.failures == 2  # refused again: the wait doubles
    assert run.retry_at is not None and run.retry_at - h.now == pytest.approx(2 * OUT.retry_initial_s, abs=0.02)
    broker.refuse = False
    h.advance(2 * OUT.retry_initial_s + 0.01)
    assert run.state == "active" and run.attaches == 3 and run.failures == 0


def test_broker_detach_and_lost_connection() -> None:
    h = _mesh((OUT,))
    broker = _broker(h, "A", "broker-1")
    run = h.cores["A"].autolinks.runs[OUT.key]
    link = next(iter(broker.received)) if broker.received else None
    assert link is None  # nothing sent yet
    # The broker detaches the queue's link: failed, with its error, then attached again.
    ours = run.link
    assert ours is not None
    peer_link = next(link for session in broker.engine.sessions for link in session.links if link.name == ours.name)
    peer_link.detach(closed=True, error=Error(condition="amqp:resource-deleted", description="queue deleted"))
    h.pump()
    assert run.state == "failed" and "resource-deleted" in (run.last_error or "")
    h.advance(OUT.retry_initial_s + 0.01)
    assert run.state == "active"
    # The connection drops: inactive, and the address has no consumer left.
    wire = next(w for w in h.wires if w.a_client is broker)
    h.cut(wire)
    assert run.state == "inactive" and run.link is None
    entry = h.cores["A"].table.find("orders")
    assert entry is None or not entry.consumers
    # A new connection brings it back at once.
    _broker(h, "A", "broker-2")
    assert run.state == "active"


def test_in_flight_deliveries_get_an_outcome_when_the_broker_goes() -> None:
    h = _mesh((OUT,))
    broker = _broker(h, "A", "broker-1")
    broker.auto_accept = False  # the broker holds them unsettled
    h.converge()
    producer = h.client("B", "producer")
    sender = producer.sender("orders")
    h.pump()
    ids = [producer.send(sender, Message(body=AmqpValue(value=i))) for i in range(5)]
    h.pump()
    assert len(broker.stored()) == 5 and not producer.outcomes
    h.cut(next(w for w in h.wires if w.a_client is broker))
    h.pump()
    assert sorted(producer.outcomes) == sorted(ids)  # none silently lost
    assert all(producer.outcomes[i] is not None for i in ids)


def test_a_queue_sharded_over_two_brokers_gets_both_shares() -> None:
    one = AutoLink(address="orders", direction="out", connection="brokers", external_address="/queue/orders")
    h = _mesh((one,))
    # One auto-link matches one connection: a second one names the other broker by container-id.
    two = AutoLink(address="orders", direction="out", container_id="broker-2", external_address="/queue/orders")
    first = _broker(h, "A", "broker-1")
    h.cores["A"].autolinks.add(two, h.now)
    second = _broker(h, "A", "broker-2")
    runs = h.cores["A"].autolinks.runs
    assert runs[one.key].state == "active" and runs[two.key].state == "active"
    assert runs[one.key].conn is not runs[two.key].conn
    first.auto_accept = second.auto_accept = False  # unsettled: balanced spreads by outstanding
    h.converge()
    producer = h.client("B", "producer")
    sender = producer.sender("orders")
    h.pump()
    for i in range(20):
        producer.send(sender, Message(body=AmqpValue(value=i)))
    h.pump()
    assert len(first.stored()) + len(second.stored()) == 20
    assert len(first.stored()) >= 5 and len(second.stored()) >= 5


def test_remove_at_run_time_detaches_and_withdraws_the_consumer() -> None:
    h = _mesh((OUT,))
    _broker(h, "A", "broker-1")
    core = h.cores["A"]
    run = core.autolinks.runs[OUT.key]
    out = run.record
    assert isinstance(out, OutLink) and out in core.table.find("orders").consumers  # type: ignore[union-attr]
    assert core.autolinks.remove(OUT.key, h.now)
    h.pump()
    entry = core.table.find("orders")
    assert entry is None or not entry.consumers
    assert OUT.key not in core.autolinks.runs


def test_config_rules() -> None:
    with pytest.raises(ValidationError, match="exactly one of connection or container_id"):
        AutoLink(address="a", direction="out")
    with pytest.raises(ValidationError, match="two-phase waypoints only"):
        AutoLink(address="a", direction="in", connection="b", phase=0)
    assert AutoLink(address="a", direction="in", connection="b", phase=1).phase == 1
    with pytest.raises(ValidationError, match="auto-link names must be unique"):
        RouterConfig(auto_links=(OUT, OUT))
    # route-container is a role for listeners and connectors in every mode
    RouterConfig(listeners=(BROKERS,))
    RouterConfig.model_validate({"connectors": [{"name": "q", "host": "h", "port": 5672, "role": "route-container"}]})
    assert OUT.key == "autoLink/orders/out/brokers"


def test_management_create_read_query_delete() -> None:
    from router.management import ManagementAgent
    from router.management.model import ManagementError

    h = _mesh(())
    core = h.cores["A"]
    agent = ManagementAgent(core, core.config, clock=lambda: h.now)
    created = agent.create("router.config.autoLink", {"address": "orders", "direction": "out", "connection": "brokers",
                                                      "externalAddress": "/queue/orders"})  # fmt: skip
    assert created["identity"] == "autoLink/orders/out/brokers" and created["operStatus"] == "inactive"
    assert created["lastError"] is None  # the route-container listener `brokers` exists
    orphan = agent.create("autoLink", {"address": "x", "direction": "in", "connection": "nowhere"})
    assert orphan["lastError"] == "no route-container listener or connector named 'nowhere'"
    agent.delete("autoLink", orphan["identity"])
    broker = _broker(h, "A", "broker-1")
    names, rows = agent.query("autoLink", ["name", "operStatus", "lastError", "attachCount", "externalAddress"])
    assert rows == [["autoLink/orders/out/brokers", "active", None, 1, "/queue/orders"]]
    assert agent.read("router.config.autoLink", identity="autoLink/orders/out/brokers")["linkRef"] is not None
    assert [a.address for a in agent.config.auto_links] == ["orders"]
    with pytest.raises(ManagementError) as refused:
        agent.create("autoLink", {"address": "x", "direction": "sideways", "connection": "brokers"})
    assert refused.value.status == 400
    with pytest.raises(ManagementError) as duplicate:
        agent.create("autoLink", {"address": "orders", "direction": "out", "connection": "brokers"})
    assert duplicate.value.status == 409
    agent.delete("autoLink", "autoLink/orders/out/brokers")
    h.pump()
    assert agent.query("autoLink")[1] == [] and agent.config.auto_links == ()
    assert not any(link.state.remote.name == "ACTIVE" for s in broker.engine.sessions for link in s.links
                   if link.name.startswith("A.autolink"))  # fmt: skip


def test_reload_applies_auto_links() -> None:
    from router.management import ManagementAgent
    from router.net.reload import apply_reload, plan_reload

    h = _mesh((OUT,))
    core = h.cores["A"]
    agent = ManagementAgent(core, core.config, clock=lambda: h.now)
    _broker(h, "A", "broker-1")
    old = core.config
    changed = OUT.model_copy(update={"external_address": "/queue/orders-2"})
    new = old.model_copy(update={"auto_links": (changed, IN)})
    report = apply_reload(agent, plan_reload(old, new))
    h.pump()
    assert not report.failed, report.failed
    runs = core.autolinks.runs
    assert set(runs) == {OUT.key, IN.key}
    assert runs[OUT.key].config.external_address == "/queue/orders-2" and runs[OUT.key].state == "active"
    report = apply_reload(agent, plan_reload(new, old.model_copy(update={"auto_links": ()})))
    assert not report.failed and core.autolinks.runs == {}


WAYPOINT = (AddressConfig(prefix="orders", waypoint=True),)  # on every router, as with the anchors
WAY_IN = AutoLink(address="orders", direction="in", connection="brokers", external_address="/queue/orders")


def test_a_waypoint_serves_one_address_both_ways_through_the_queue() -> None:
    h = _mesh((OUT, WAY_IN), addresses=WAYPOINT)
    broker = _broker(h, "A", "broker-1")
    assert _state(h, OUT.key) == "active" and _state(h, WAY_IN.key) == "active"
    h.converge()
    consumer = h.client("B", "consumer")
    receiver = consumer.receiver("orders")
    h.pump()
    h.converge()
    receiver.flow(10)
    producer = h.client("B", "producer")
    sender = producer.sender("orders")
    h.pump()
    # Phase 0: the producer's messages go to the queue, not to the consumer of the address.
    ids = [producer.send(sender, Message(body=AmqpValue(value=f"order {i}"))) for i in range(3)]
    h.pump()
    assert broker.stored() == ["order 0", "order 1", "order 2"]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)
    assert consumer.bodies(receiver) == []
    # Phase 1: what the queue gives out reaches the consumer (on the other router), and is not
    # fed back into the queue.
    broker.queues["/queue/orders"] = deque(encode_message(Message(body=AmqpValue(value=f"out {i}"))) for i in range(2))
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["out 0", "out 1"]
    assert len(broker.stored()) == 3
    keys = set(h.cores["B"].table.entries)
    assert "M_$phase1/orders" in keys  # the consumer's key: the anchors' M1orders


def test_in_and_out_on_an_address_that_is_no_waypoint_is_a_loop() -> None:
    h = _mesh((OUT, WAY_IN))
    _broker(h, "A", "broker-1")
    states = {_state(h, OUT.key), _state(h, WAY_IN.key)}
    assert "failed" in states
    failed = next(r for r in h.cores["A"].autolinks.runs.values() if r.state == "failed")
    assert "waypoint" in (failed.last_error or "")


def test_broker_ends_the_session_then_a_new_one_is_begun() -> None:
    h = _mesh((OUT,))
    broker = _broker(h, "A", "broker-1")
    run = h.cores["A"].autolinks.runs[OUT.key]
    ours = run.link
    assert ours is not None and run.state == "active"
    session = next(s for s in broker.engine.sessions if any(link.name == ours.name for link in s.links))
    session.end(Error(condition="amqp:internal-error", description="broker trouble"))
    h.pump()
    assert run.state == "failed" and run.last_error == "the broker ended the session"
    entry = h.cores["A"].table.find("orders")
    assert entry is None or not entry.consumers
    h.advance(OUT.retry_initial_s + 0.01)
    assert run.state == "active" and run.link is not None and run.link.session is not ours.session


# --- the auto-link state machine under any order of broker behaviour (hypothesis) ----------------

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402


class AutoLinkMachine(RuleBasedStateMachine):
    """Brokers come and go, refuse, detach and end sessions; management adds and removes
    auto-links; time passes. Whatever the order: every state is one of the four, an active
    auto-link is registered as its address's consumer or producer on a live connection, and
    nothing else is (no consumer or producer outlives its link)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = MeshHarness()
        self.h.router("A", mode="standalone", listeners=(CLIENTS, BROKERS), auto_links=(OUT,))
        self.core = self.h.cores["A"]
        self.brokers: list[Broker] = []

    @rule(refuse=st.booleans())
    def broker_connects(self, refuse: bool) -> None:
        if len(self.brokers) < 2:
            Broker.refuse = refuse
            try:
                broker = _broker(self.h, "A", f"broker-{len(self.brokers)}")
            finally:
                Broker.refuse = False
            broker.refuse = refuse
            self.brokers.append(broker)

    @rule(i=st.integers(0, 1), refuse=st.booleans(), silent=st.booleans())
    def broker_changes_its_mind(self, i: int, refuse: bool, silent: bool) -> None:
        if i < len(self.brokers):
            self.brokers[i].refuse, self.brokers[i].silent = refuse, silent

    @rule(i=st.integers(0, 1))
    def broker_drops(self, i: int) -> None:
        if i < len(self.brokers):
            broker = self.brokers.pop(i)
            self.h.cut(next(w for w in self.h.wires if w.a_client is broker))

    @rule(i=st.integers(0, 1), end_session=st.booleans())
    def broker_detaches(self, i: int, end_session: bool) -> None:
        if i >= len(self.brokers):
            return
        broker = self.brokers[i]
        for session in broker.engine.sessions:
            if session is broker.session or session.state.local.name != "ACTIVE":
                continue
            if end_session:
                session.end()
            else:
                for link in session.links:
                    if link.state.local.name == "ACTIVE":
                        link.detach(closed=True)
        self.h.pump()

    @rule(seconds=st.sampled_from([0.1, 1.01, 2.02, 40.0]))
    def time_passes(self, seconds: float) -> None:
        self.h.advance(seconds, step=0.05)

    @rule(direction=st.sampled_from(["in", "out"]), by_container=st.booleans())
    def management_adds(self, direction: str, by_container: bool) -> None:
        where = {"container_id": "broker-1"} if by_container else {"connection": "brokers"}
        config = AutoLink(address=f"a-{direction}", direction=direction, **where)  # type: ignore[arg-type]
        if config.key not in self.core.autolinks.runs:
            self.core.autolinks.add(config, self.h.now)
            self.h.pump()

    @rule(data=st.data())
    def management_removes(self, data: st.DataObject) -> None:
        keys = sorted(self.core.autolinks.runs)
        if keys:
            self.core.autolinks.remove(data.draw(st.sampled_from(keys)), self.h.now)
            self.h.pump()

    @invariant()
    def states_are_honest(self) -> None:
        records = set()
        for run in self.core.autolinks.runs.values():
            assert run.state in ("inactive", "attaching", "active", "failed")
            if run.state == "active":
                assert run.record is not None and not run.record.gone and not run.record.conn.closed
                records.add(run.record)
            else:
                assert run.record is None
            if run.state in ("attaching", "active"):
                assert run.conn is not None and not run.conn.closed
        registered = {
            link for conn in self.core.connections.values() if conn.role == "route-container"
            for link in (*conn.out_links, *conn.in_links)
        }  # fmt: skip
        assert registered == records


TestAutoLinkMachine = AutoLinkMachine.TestCase
TestAutoLinkMachine.settings = settings(max_examples=int(os.environ.get("AUTOLINK_EXAMPLES", "60")), stateful_step_count=20, deadline=None)


def test_a_broker_that_never_answers_the_attach() -> None:
    silent = AutoLink(address="orders", direction="out", connection="brokers", external_address="/queues/orders",
                      attach_timeout_s=5.0)  # fmt: skip
    h = _mesh((silent,))
    Broker.silent = True  # like RabbitMQ 3 with an address form it does not know
    try:
        broker = _broker(h, "A", "broker-1")
    finally:
        Broker.silent = False
    run = h.cores["A"].autolinks.runs[silent.key]
    assert run.state == "attaching"
    assert h.cores["A"].next_deadline() is not None
    h.advance(5.01)
    assert run.state == "failed" and run.last_error == "the broker did not answer the attach in 5 s"
    broker.silent = False
    h.advance(silent.retry_initial_s + 0.01)
    assert run.state == "active" and run.attaches == 2
