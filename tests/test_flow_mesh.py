"""Flow records from routers in the mesh harness (sans-IO): known traffic (accepted, rejected,
released) over a chain of three routers, and the records' totals equal it, every delivery
counted once per router; the histograms count every delivery sent on; a traced message's hop
records share one trace id and form its path; sampled hops; the records reach a subscriber
on another router as JSON lines."""

from __future__ import annotations

import gzip
import json
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, RELEASED, Rejected
from router.amqp.performatives import Error
from router.config.models import Flow
from router.core import coreread
from router.flow.publish import CONTENT_TYPE, publish
from router.flow import recorder as recorder_module
from router.flow.recorder import FlowRecorder
from router.net.flowtask import FlowTask
from router.testing.meshharness import MeshHarness

REJECTED = Rejected(error=Error(condition="app:bad"))


def _chain(flow: Flow, *ids: str) -> tuple[MeshHarness, dict[str, FlowRecorder]]:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1, flow=flow)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    recorders = {rid: FlowRecorder(core, flow, version="test", compiled=False, boot=f"boot-{rid}") for rid, core in h.cores.items()}
    for recorder in recorders.values():
        recorder.poll(h.now)
    return h, recorders


def _records(h: MeshHarness, recorders: dict[str, FlowRecorder], interval: bool = True) -> list[dict[str, Any]]:
    out = []
    for recorder in recorders.values():
        recorder.poll(h.now)
        if interval:
            recorder.interval(h.now)
        out += recorder.take(1_000_000)
    return out


def _orders_on_a(h: MeshHarness, *, auto_accept: bool = True) -> tuple[Any, Any, Any, Any]:
    """A producer and a consumer (credit 10) of `orders` on router A: (producer, consumer, its
    sender, its receiver)."""
    producer, consumer = h.client("A", "p"), h.client("A", "c")
    consumer.auto_accept = auto_accept
    rx = consumer.receiver("orders")
    h.pump()
    rx.flow(10)
    tx = producer.sender("orders")
    h.pump()
    return producer, consumer, tx, rx


# Per harness (weakly: the id of a harness gone may be reused by the next one's)
_PAIRS: weakref.WeakKeyDictionary[MeshHarness, Any] = weakref.WeakKeyDictionary()


def _traffic(h: MeshHarness, outcomes: list[Any], annotations: dict[str, Any] | None = None) -> list[Any]:
    """Send one message per outcome from a producer on A to a consumer on C (the same two
    clients each time), which settles each with its outcome; the outcomes the producer got."""
    pair = _PAIRS.get(h)
    if pair is None:
        producer, consumer = h.client("A", "p"), h.client("C", "c")
        consumer.auto_accept = False
        rx = consumer.receiver("orders")
        h.advance(0.5)
        rx.flow(1000)
        tx = producer.sender("orders")
        h.pump()
        pair = _PAIRS[h] = (producer, consumer, tx, rx)
    producer, consumer, tx, rx = pair
    done = len(consumer.received[rx])
    ids = [producer.send(tx, Message.value(i, message_annotations=annotations)) for i in range(len(outcomes))]
    h.pump()
    for received, outcome in zip(consumer.received[rx][done:], outcomes):
        rx.dispose(received.delivery_id, state=outcome, settled=True)
    h.pump()
    return [producer.outcomes[i] for i in ids]


def test_interval_records_count_every_delivery_once_per_router_with_its_outcome() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    outcomes = [ACCEPTED] * 5 + [REJECTED] * 3 + [RELEASED] * 2
    told = _traffic(h, outcomes)
    assert [type(o).__name__ for o in told] == [type(o).__name__ for o in outcomes]
    records = _records(h, recorders)
    by_router = {rid: [r for r in records if r["router"] == rid] for rid in recorders}
    for rid, mine in by_router.items():
        (address,) = [r for r in mine if r["type"] == "address_interval" and r["address"] == "orders"]
        assert (address["deliveries"], address["accepted"], address["rejected"], address["released"]) == (10, 5, 3, 2), rid
        assert sum(address["residence_hist"]) == 10 and sum(address["settle_hist"]) == 10, rid
        sent_bytes = sum(len(encode_message(Message.value(i))) for i in range(10))
        # (other routers receive them with router annotations)
        assert (address["bytes"] == sent_bytes if rid == "A" else address["bytes"] > sent_bytes) and address["dropped"] == 0
        assert all(len(r[k]) == 32 for r in mine if r["type"].endswith("_interval") for k in ("residence_hist", "settle_hist"))
        assert [r["seq"] for r in mine] == sorted(r["seq"] for r in mine) and len({r["seq"] for r in mine}) == len(mine)
        assert all(r["boot"] == f"boot-{rid}" for r in mine)
    links = {(r["router"], r["direction"], r["role"]): r for r in records if r["type"] == "link_interval" and r["deliveries"]}
    producer_link = links[("A", "in", "normal")]
    assert (producer_link["deliveries"], producer_link["accepted"], producer_link["rejected"], producer_link["released"]) == (10, 5, 3, 2)
    assert producer_link["peer"] == "p" and producer_link["address"] == "orders"
    consumer_link = links[("C", "out", "normal")]
    assert (consumer_link["deliveries"], consumer_link["accepted"], consumer_link["rejected"]) == (10, 5, 3)
    assert links[("A", "out", "inter-router")]["peer"] == "B" and links[("B", "in", "inter-router")]["peer"] == "A"
    assert links[("B", "out", "inter-router")]["deliveries"] == 10
    # Snapshots: each router's own, and every client link opened
    routers = {r["router"]: r for r in records if r["type"] == "router"}
    assert [n["router"] for n in routers["B"]["neighbours"]] == ["A", "C"] and routers["A"]["mode"] == "interior"
    opened = [r for r in records if r["type"] == "link" and r["role"] == "normal"]
    assert {(r["router"], r["direction"], r["address"], r["state"]) for r in opened} == {("A", "in", "orders", "open"), ("C", "out", "orders", "open")}
    # A quiet interval says nothing more about them
    quiet = _records(h, recorders)
    assert not [r for r in quiet if r["type"].endswith("_interval")]


def test_an_outcome_in_the_interval_after_its_delivery_is_counted_in_the_address_record() -> None:
    """Deliveries counted in one interval record, their outcomes in the next one (no delivery of
    its own): the address's totals still count every outcome once."""
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A")
    producer, consumer, tx, rx = _orders_on_a(h, auto_accept=False)
    for i in range(4):
        producer.send(tx, Message.value(i))
    h.pump()
    first = [r for r in _records(h, recorders) if r["type"] == "address_interval" and r["address"] == "orders"]
    for received in consumer.received[rx]:
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    second = [r for r in _records(h, recorders) if r["type"] == "address_interval" and r["address"] == "orders"]
    assert sum(r["deliveries"] for r in first + second) == 4
    assert sum(r["accepted"] for r in first) == 0 and sum(r["accepted"] for r in second) == 4


def test_closed_links_get_a_closed_snapshot() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    _traffic(h, [ACCEPTED])
    _records(h, recorders)
    for client in list(h.wires):
        if client.b_client is not None or client.a_client is not None:
            h.cut(client)
    h.pump()
    closed = [r for r in _records(h, recorders, interval=False) if r["type"] == "link" and r["state"] == "closed"]
    assert {(r["router"], r["direction"]) for r in closed} >= {("A", "in"), ("C", "out")}


def _ingress(records: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Deliveries, accepted and rejected on A's producer links (where they enter the mesh)."""
    mine = [r for r in records if r["type"] == "link_interval" and r["router"] == "A" and r["direction"] == "in" and r["role"] == "normal"]
    return sum(r["deliveries"] for r in mine), sum(r["accepted"] for r in mine), sum(r["rejected"] for r in mine)


def _cut_client(h: MeshHarness, name: str) -> None:
    (wire,) = [w for w in h.wires if w.a_client is not None and w.a_client.name == name]
    h.cut(wire)


def test_a_link_that_goes_reports_what_it_carried_after_the_last_poll() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    _traffic(h, [ACCEPTED] * 2)
    records = _records(h, recorders)
    _traffic(h, [ACCEPTED] * 3 + [REJECTED])  # after the last poll; then the producer goes
    _cut_client(h, "p")
    records += _records(h, recorders, interval=False)
    assert _ingress(records) == (6, 5, 1)
    closed = [r for r in records if r["type"] == "link" and r["router"] == "A" and r["state"] == "closed"]
    assert [r["peer"] for r in closed] == ["p"]


def test_an_outcome_that_comes_after_its_delivery_was_reported_is_reported_when_the_link_goes() -> None:
    # A delivery counted in one interval record whose outcome came later, on a link that then
    # closed: its last interval record carried no new delivery and was skipped as "no
    # activity", so the outcome was never reported (the ingress links' outcomes fell short of
    # their deliveries by one, now and then, end to end).
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    _traffic(h, [ACCEPTED])
    producer, consumer, tx, rx = _PAIRS[h]
    done = len(consumer.received[rx])
    last = producer.send(tx, Message.value("late"))
    h.pump()
    records = _records(h, recorders)  # the delivery is counted; its outcome is not known yet
    for received in consumer.received[rx][done:]:
        rx.dispose(received.delivery_id, state=RELEASED, settled=True)
    h.pump()
    assert type(producer.outcomes[last]).__name__ == "Released"
    _cut_client(h, "p")
    records += _records(h, recorders, interval=False)
    mine = [r for r in records if r["type"] == "link_interval" and r["router"] == "A" and r.get("peer") == "p"]
    assert sum(r["deliveries"] for r in mine) == 2
    assert (sum(r["accepted"] for r in mine), sum(r["released"] for r in mine)) == (1, 1)


def test_a_producer_opened_and_gone_between_two_polls_is_counted() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    _traffic(h, [ACCEPTED])
    records = _records(h, recorders)
    producer, consumer, _, rx = _PAIRS[h]
    quick = h.client("A", "quick")
    tx = quick.sender("orders")
    h.pump()
    done = len(consumer.received[rx])
    ids = [quick.send(tx, Message.value(i)) for i in range(2)]
    h.pump()
    for received in consumer.received[rx][done:]:
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert [type(quick.outcomes[i]).__name__ for i in ids] == ["Accepted", "Accepted"]
    _cut_client(h, "quick")
    later = _records(h, recorders, interval=False)
    assert _ingress(records + later) == (3, 3, 0)
    quick_records = [(r["type"], r.get("state")) for r in later if r["router"] == "A" and r.get("peer") == "quick"]
    assert quick_records == [("link", "open"), ("link_interval", None), ("link", "closed")]
    # A link that carried nothing and went between two polls says nothing
    idle = h.client("A", "idle")
    idle.sender("orders")
    h.pump()
    _cut_client(h, "idle")
    assert not [r for r in _records(h, recorders, interval=False) if r.get("peer") == "idle"]


def test_a_traced_message_has_one_trace_id_and_its_hops_form_the_path() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A", "B", "C")
    _traffic(h, [ACCEPTED], annotations={"x-opt-router-trace": True, "x-opt-app": 1})
    _traffic(h, [ACCEPTED])  # not traced: no hop record
    hops = [r for r in _records(h, recorders) if r["type"] == "hop"]
    assert len(hops) == 3
    assert len({r["trace_id"] for r in hops}) == 1
    path = {r["router"]: (r["prev"], r["next"]) for r in hops}
    assert path == {"A": (None, "B"), "B": ("A", "C"), "C": ("B", None)}
    assert all(r["ingress"] == "A" and r["address"] == "orders" and r["outcome"] == "accepted" for r in hops)
    assert all(r["residence_us"] >= 0 and r["settle_us"] >= 0 for r in hops)


def test_a_client_may_name_the_trace_id_and_sampling_picks_one_in_n() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=4), "A", "B", "C")
    _traffic(h, [ACCEPTED], annotations={"x-opt-router-trace": "order-17"})
    _traffic(h, [ACCEPTED] * 8)
    hops = [r for r in _records(h, recorders) if r["type"] == "hop"]
    traces = Counter(r["trace_id"] for r in hops)
    assert traces["order-17"] == 3
    assert len(traces) == 3 and all(n == 3 for n in traces.values())  # 2 of the 8 sampled, each on 3 routers


def _collector(h: MeshHarness, rid: str) -> tuple[Any, Any]:
    """A subscriber of the records' address on router `rid`, with credit."""
    collector = h.client(rid, "collector")
    rx = collector.receiver("_flow/records")
    h.advance(0.5)
    rx.flow(100)
    h.pump()
    return collector, rx


def test_records_travel_to_a_subscriber_on_another_router() -> None:
    flow = Flow(enabled=True, sample_one_in=0)
    h, recorders = _chain(flow, "A", "B", "C")
    collector, rx = _collector(h, "C")
    _traffic(h, [ACCEPTED] * 3)
    for rid, recorder in recorders.items():
        recorder.poll(h.now)
        recorder.interval(h.now)
        assert publish(recorder, h.cores[rid], h.now)
    h.pump()
    received = collector.received[rx]
    assert received
    lines = [json.loads(line) for r in received for line in r.message.body_bytes.splitlines()]
    assert {r["router"] for r in lines} == {"A", "B", "C"}
    assert all(r.message.properties.content_type == CONTENT_TYPE for r in received)
    emitted = {rid: h.cores[rid].read.totals(h.now).flow_records_emitted for rid in recorders}
    assert sum(emitted.values()) == len(lines)


def test_with_no_subscriber_records_wait_in_the_bounded_buffer() -> None:
    flow = Flow(enabled=True, sample_one_in=0, buffer_records=10)
    h, recorders = _chain(flow, "A", "B")
    recorder, core = recorders["A"], h.cores["A"]
    assert publish(recorder, core, h.now) == []
    assert len(recorder.emitter) > 0 and core.read.totals(h.now).dropped_from_router == 0
    for _ in range(20):
        recorder.emitter.emit("hop", 1.0, {})
    totals = core.read.totals(h.now)
    assert len(recorder.emitter) == 10 and totals.flow_records_dropped > 0


def test_links_between_routers_count_the_records_own_traffic_apart() -> None:
    flow = Flow(enabled=True, sample_one_in=0)
    h, recorders = _chain(flow, "A", "B", "C")
    collector, rx = _collector(h, "C")
    _records(h, recorders)  # the counts so far: the next intervals start here
    _traffic(h, [ACCEPTED] * 4)
    for rid in ("A", "B"):  # A's batch crosses A -> B -> C, B's B -> C
        recorders[rid].emitter.emit("hop", 1.0, {})
        assert publish(recorders[rid], h.cores[rid], h.now)
        h.pump()
    assert len(collector.received[rx]) == 2
    records = _records(h, recorders)
    out = {r["router"]: r for r in records
           if r["type"] == "link_interval" and r["role"] == "inter-router" and r["direction"] == "out" and r["deliveries"]}  # fmt: skip
    assert out["A"]["peer"] == "B" and out["B"]["peer"] == "C"
    assert out["A"]["records_deliveries"] == 1 and out["B"]["records_deliveries"] == 2
    assert out["A"]["records_bytes"] > 0 and out["B"]["records_bytes"] > out["A"]["records_bytes"]
    for r in out.values():  # what is left is the users' traffic: the 4 deliveries A -> C
        assert r["deliveries"] - r["records_deliveries"] == 4
    into_c = [r for r in records if r["router"] == "C" and r["type"] == "link_interval" and r["role"] == "inter-router"
              and r["direction"] == "in" and r["deliveries"]]  # fmt: skip
    assert [r["deliveries"] - r["records_deliveries"] for r in into_c] == [4]
    ingress = [r for r in records if r["type"] == "link_interval" and r["role"] != "inter-router"]
    assert all(r["records_deliveries"] == 0 for r in ingress)


def test_the_recorder_reads_whole_only_the_links_and_addresses_that_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a second every link's credit, and at an interval only what had activity, is read:
    a snapshot of each of 10,000 links every second, and of every link and address at each
    interval, stalled the router's loop for 60-170 ms. New links are still read whole once."""
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A")
    producer, consumer, tx, _rx = _orders_on_a(h)
    quiet = [consumer.receiver(f"quiet-{i}") for i in range(20)]  # links and addresses that stay idle
    h.pump()
    for link in quiet:
        link.flow(1)
    h.pump()
    recorder = recorders["A"]
    opened = [r for r in _records(h, recorders) if r["type"] == "link" and r["state"] == "open"]
    assert {r["address"] for r in opened} >= {"orders"} | {f"quiet-{i}" for i in range(20)}
    read: dict[str, int] = Counter()
    for name in ("link_snapshot", "address_snapshot"):
        original = getattr(coreread, name)

        def counting(*args: Any, _original: Any = original, _name: str = name) -> Any:
            read[_name] += 1
            return _original(*args)

        monkeypatch.setattr(coreread, name, counting)
    h.advance(1.0)
    recorder.poll(h.now)
    recorder.interval(h.now)
    assert read == {} and recorder.take(1000) == []  # nothing moved: nothing read whole, nothing said
    producer.send(tx, Message.value("one"))
    h.pump()
    h.advance(1.0)
    recorder.poll(h.now)
    recorder.interval(h.now)
    records = recorder.take(1000)
    assert read["address_snapshot"] == 1  # "orders" alone
    assert read["link_snapshot"] == 2  # its producer's link and its consumer's
    assert {(r["type"], r.get("address")) for r in records} == {("address_interval", "orders"), ("link_interval", "orders")}
    assert sum(r["deliveries"] for r in records if r["type"] == "address_interval") == 1


def test_a_link_without_credit_is_reported_starved_with_no_activity() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A")
    consumer = h.client("A", "c")
    consumer.receiver("waiting")  # never given credit
    h.pump()
    recorder = recorders["A"]
    _records(h, recorders)  # seen open
    for _ in range(3):
        h.advance(1.0)
        recorder.poll(h.now)
    recorder.interval(h.now)
    (starved,) = [r for r in recorder.take(1000) if r["type"] == "link_interval"]
    assert starved["address"] == "waiting" and starved["deliveries"] == 0
    assert starved["credit_starved_s"] == 3.0


def _queues(h: MeshHarness, n: int, credit: int = 10) -> tuple[Any, Any, list[Any]]:
    """A producer `p` and a consumer `c` on router A with a link each to q-0 .. q-<n-1>: (producer,
    consumer, the producer's senders)."""
    producer, consumer = h.client("A", "p"), h.client("A", "c")
    receivers = [consumer.receiver(f"q-{i}") for i in range(n)]
    h.pump()
    for rx in receivers:
        rx.flow(credit)
    senders = [producer.sender(f"q-{i}") for i in range(n)]
    h.pump()
    return producer, consumer, senders


def test_an_interval_is_made_in_slices_and_what_changes_between_them_is_counted_once() -> None:
    """The records an interval must read whole are made a slice at a time (the router's loop runs
    between slices): a slice makes no more than its share, and deliveries made and links gone
    between slices are each counted once, in this interval or the next."""
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A")
    recorder = recorders["A"]
    producer, _consumer, senders = _queues(h, 6)
    records = _records(h, recorders)
    for tx in senders:
        producer.send(tx, Message.value("one"))
    h.pump()
    h.advance(10.0)
    recorder.begin_poll(h.now)  # the interval is due: 12 links and 6 addresses moved
    assert recorder.step(limit=3)  # work is left
    first = recorder.take(1000)
    assert [r["type"] for r in first] == ["link_interval"] * 3
    producer.send(senders[5], Message.value("two"))  # between slices
    h.pump()
    _cut_client(h, "p")  # every producer link goes between slices
    h.pump()
    recorder.finish()
    records += first + recorder.take(1000)
    h.advance(1.0)
    records += _records(h, recorders, interval=False)  # the links gone, with their last counts
    h.advance(10.0)
    records += _records(h, recorders)
    ingress = [r for r in records if r["type"] == "link_interval" and r["direction"] == "in"]
    egress = [r for r in records if r["type"] == "link_interval" and r["direction"] == "out"]
    addresses = [r for r in records if r["type"] == "address_interval"]
    for kind in (ingress, egress, addresses):
        counted = Counter()
        for r in kind:
            counted[r["address"]] += r["deliveries"]
        assert counted == {**{f"q-{i}": 1 for i in range(5)}, "q-5": 2}
    closed = [r for r in records if r["type"] == "link" and r["state"] == "closed"]
    assert len(closed) == 6 and all(r["peer"] == "p" for r in closed)


def test_new_links_are_read_in_slices_too() -> None:
    h, recorders = _chain(Flow(enabled=True, sample_one_in=0), "A")
    recorder = recorders["A"]
    recorder.take(1000)  # the router's snapshot
    _queues(h, 4)
    recorder.begin_poll(h.now)
    assert recorder.step(limit=5)
    assert [(r["type"], r["state"]) for r in recorder.take(1000)] == [("link", "open")] * 5
    assert not recorder.step(limit=5)
    assert len(recorder.take(1000)) == 3


async def test_the_flush_lets_the_router_s_loop_run_between_slices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    h = MeshHarness()
    flow = Flow(enabled=True, sample_one_in=0, file_dir=str(tmp_path), mesh_address=None)
    h.router("A", instance=1, flow=flow)
    h.converge()
    task = FlowTask(h.cores["A"], flow, lambda: h.now, "test")
    producer, _consumer, senders = _queues(h, 10)
    task.flush(h.now)  # 20 links seen open
    for tx in senders:
        producer.send(tx, Message.value("one"))
    h.pump()
    h.advance(10.0)
    monkeypatch.setattr(recorder_module, "SLICE", 3)
    ticks = 0

    async def other_connections() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_connections)
        await trio.lowlevel.checkpoint()
        before = ticks
        await task.flush_in_slices(h.now)
        during = ticks - before
        nursery.cancel_scope.cancel()
    assert during >= 30 // 3 - 1  # 20 link and 10 address records, three at a time
    written = [json.loads(line) for path in sorted(tmp_path.iterdir()) for line in gzip.decompress(path.read_bytes()).splitlines()]
    intervals = [r for r in written if r["type"].endswith("_interval")]
    assert len(intervals) == 30 and sum(r["deliveries"] for r in intervals if r["type"] == "address_interval") == 10
