"""Resource bounds of the routing core (router.core.bounds), sans-IO: unsettled deliveries per
consumer link and connection, bytes held for producers, credit sized by message bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Released
from router.config.models import Limits, Listener, RouterConfig
from router.core.delivery import SessionMaps
from router.core.links import InLink, OutLink
from router.testing.routerharness import Client, RouterHarness


def _config(**listener: Any) -> RouterConfig:
    limits = listener.pop("limits", Limits())
    return RouterConfig(listeners=(Listener(**listener),), limits=limits)


def _out(client: Client, rx: Any) -> OutLink:
    state = client.router_side.context
    (out,) = [o for o in state.out_links if o.link.name == rx.name]
    return out


def _in(client: Client, tx: Any) -> InLink:
    state = client.router_side.context
    (inl,) = [i for i in state.in_links if i.link.name == tx.name]
    return inl


def _unsettled_records(h: RouterHarness) -> int:
    """Deliveries the core remembers as sent and unsettled, over every session."""
    total = 0
    for state in h.core.connections.values():
        for session in state.engine.sessions:
            maps = session.context
            if isinstance(maps, SessionMaps):
                total += len(list(maps.outbound.items()))
    return total


def _settle_all(client: Client, rx: Any) -> None:
    for received in client.received[rx]:
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    client.received[rx] = []


def test_a_consumer_that_never_settles_stops_at_its_bound_and_another_gets_the_traffic() -> None:
    h = RouterHarness(_config(max_unsettled_per_link=20))
    producer = h.connect("p")
    hoarder = h.connect("hoarder")
    hoarder.auto_accept = False  # takes deliveries, never settles
    rx = hoarder.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(100_000)
    h.pump()
    sent = [producer.send(tx, Message.value(i)) for i in range(100)]
    h.pump()
    out = _out(hoarder, rx)
    assert len(hoarder.received[rx]) == 20 and out.outstanding == 20
    assert out.stuck and out.stuck_count == 1 and h.core.bounds.stuck_now == 1
    # The rest waits for a destination, bounded by the producer's credit window.
    assert len(h.core.table.entries["Mq"].pending) == 80
    assert tx.credit + 80 <= Listener().link_capacity

    second = h.connect("second")
    rx2 = second.receiver("q")
    h.pump()
    rx2.flow(100_000)
    h.pump()
    assert len(second.received[rx2]) == 80  # everything waiting went to the consumer that can take it
    for i in range(20):  # and from now on everything goes there
        for _ in range(100):
            producer.send(tx, Message.value(i))
        h.pump()
        assert _unsettled_records(h) == 20  # memory stays flat: the hoarder's 20, no more
    assert len(second.received[rx2]) == 80 + 2000
    assert len(hoarder.received[rx]) == 20
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent[20:])
    assert out.stuck_count == 1  # stuck once, for good (the second consumer hits the bound of 20
    # now and then too, between a batch and its settlements, and goes on)


def _hoarding_pair(bound: int, credit: int) -> tuple[RouterHarness, Client, Client, Any, Any]:
    """A producer and a consumer that settles only when told, on "q", the consumer's links
    bounded to `bound` unsettled, `credit` given: (harness, producer, consumer, tx, rx)."""
    h = RouterHarness(_config(max_unsettled_per_link=bound))
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    rx, tx = consumer.receiver("q"), producer.sender("q")
    h.pump()
    rx.flow(credit)
    return h, producer, consumer, tx, rx


def test_a_stuck_consumer_takes_deliveries_again_once_it_settles() -> None:
    h, producer, consumer, tx, rx = _hoarding_pair(bound=16, credit=1000)
    h.pump()
    for i in range(40):
        producer.send(tx, Message.value(i))
    h.pump()
    assert len(consumer.received[rx]) == 16 and _out(consumer, rx).stuck
    rx.dispose(consumer.received[rx][0].delivery_id, state=ACCEPTED, settled=True)
    consumer.received[rx] = consumer.received[rx][1:]
    h.pump()  # one settled: still within the margin (7/8 of the bound), still stuck
    assert _out(consumer, rx).stuck and len(consumer.received[rx]) == 15
    _settle_all(consumer, rx)
    h.pump()
    assert len(consumer.received[rx]) == 16  # resumed: up to the bound again
    _settle_all(consumer, rx)
    h.pump()
    assert len(consumer.received[rx]) == 40 - 32
    assert not _out(consumer, rx).stuck and h.core.bounds.stuck_now == 0
    assert _out(consumer, rx).stuck_count == 2


def test_a_bound_of_one_delivery_takes_the_next_once_the_first_is_settled() -> None:
    h, producer, consumer, tx, rx = _hoarding_pair(bound=1, credit=10)
    for n in range(3):
        producer.send(tx, Message.value(n))
    h.pump()
    for n in range(3):
        assert consumer.bodies(rx) == [n]  # one at a time
        _settle_all(consumer, rx)
        h.pump()
    assert h.core.bounds.stuck_now == 0 and len(producer.outcomes) == 3


def test_the_connection_bound_covers_all_its_consumer_links() -> None:
    h = RouterHarness(_config(max_unsettled_per_link=1000, max_unsettled_per_connection=30))
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    rx_a, rx_b = consumer.receiver("a"), consumer.receiver("b")
    tx_a, tx_b = producer.sender("a"), producer.sender("b")
    h.pump()
    rx_a.flow(1000)
    rx_b.flow(1000)
    h.pump()
    for i in range(25):
        producer.send(tx_a, Message.value(i))
        producer.send(tx_b, Message.value(i))
    h.pump()
    assert len(consumer.received[rx_a]) + len(consumer.received[rx_b]) == 30
    state = consumer.router_side.context
    assert state.stuck and state.unsettled_out == 30
    assert _out(consumer, rx_a).stuck and _out(consumer, rx_b).stuck
    rx_c = consumer.receiver("a")  # attached while the connection is stuck: stuck after one
    h.pump()
    rx_c.flow(1000)
    h.pump()
    assert len(consumer.received[rx_c]) == 1 and _out(consumer, rx_c).stuck
    _settle_all(consumer, rx_a)
    _settle_all(consumer, rx_b)
    _settle_all(consumer, rx_c)
    h.pump()
    assert not state.stuck and state.unsettled_out == 50 - 31
    assert sum(len(consumer.received[rx]) for rx in (rx_a, rx_b, rx_c)) == 50 - 31  # the rest


def test_a_stuck_consumer_going_away_releases_its_count_and_fails_what_it_held() -> None:
    h, producer, consumer, tx, rx = _hoarding_pair(bound=5, credit=100)
    h.pump()
    sent = [producer.send(tx, Message.value(i)) for i in range(8)]
    h.pump()
    assert h.core.bounds.stuck_now == 1
    h.disconnect(consumer)
    assert h.core.bounds.stuck_now == 0
    # the 5 sent are in doubt (modified), the 3 never sent are released: every one has an outcome
    assert all(d in producer.outcomes for d in sent)
    assert sum(isinstance(producer.outcomes[d], Released) for d in sent) == 3
    assert _unsettled_records(h) == 0


def test_presettled_deliveries_do_not_count_against_the_bound() -> None:
    h, producer, consumer, tx, rx = _hoarding_pair(bound=3, credit=100)
    h.pump()
    for i in range(50):
        producer.send(tx, Message.value(i), settled=True)
    h.pump()
    assert len(consumer.received[rx]) == 50 and not _out(consumer, rx).stuck


def test_multicast_skips_a_stuck_consumer() -> None:
    from router.config.models import AddressConfig

    config = RouterConfig(
        listeners=(Listener(max_unsettled_per_link=4),), addresses=(AddressConfig(prefix="mc", distribution="multicast"),)
    )
    h = RouterHarness(config)
    producer, hoarder, good = h.connect("p"), h.connect("h"), h.connect("g")
    hoarder.auto_accept = False
    rx_h, rx_g, tx = hoarder.receiver("mc"), good.receiver("mc"), producer.sender("mc")
    h.pump()
    rx_h.flow(1000)
    rx_g.flow(1000)
    h.pump()
    sent: list[int] = []
    for _ in range(40):  # until the producer's window is used up
        sent += [producer.send(tx, Message.value(i)) for i in range(min(100, tx.credit))]
        h.pump()
    out = _out(hoarder, rx_h)
    # The stuck consumer gets no more copies; the other gets every one. Its copies wait (as for
    # a consumer without credit), holding the producer's window: the producer is held back.
    assert len(hoarder.received[rx_h]) == 4 and out.stuck
    assert len(good.received[rx_g]) == len(sent) == Listener().link_capacity
    assert len(out.pending or ()) == len(sent) - 4 and tx.credit == 0
    _settle_all(hoarder, rx_h)
    h.pump()
    assert len(hoarder.received[rx_h]) == 4 and out.stuck  # the next 4 copies, stuck again
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent[:4])


# --- bytes held for producers ----------------------------------------------------------------

BIG = 100_000  # bytes of body: a "large" message for a 1 MiB bound


def _big(i: int) -> bytes:
    return encode_message(Message.data(bytes([i % 256]) * BIG))


def test_credit_shrinks_with_observed_message_size() -> None:
    h = RouterHarness(_config(read_high_water_bytes=1 << 20))
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    # Sizes not known yet: a window of the largest single-frame message (our max-frame-size)
    assert tx.credit == (1 << 20) // Listener().max_frame_size
    producer.send(tx, _big(0))
    h.pump()  # no consumer credit: it waits, and the producer's credit is taken back
    inl = _in(producer, tx)
    assert inl.size_hint > BIG
    window = (1 << 20) // inl.size_hint
    assert tx.credit + inl.held == window
    assert window * len(_big(0)) <= 1 << 20
    # a producer that respects credit never sends more than the router will hold
    while tx.credit:
        producer.send(tx, _big(1))
        h.pump()
    state = producer.router_side.context
    assert state.buffered_bytes <= 1 << 20 and not h.core.read_paused(producer.router_side)
    assert not any(isinstance(s, Released) for s in producer.outcomes.values())
    rx.flow(100)
    h.pump()
    assert len(consumer.received[rx]) == window
    assert state.buffered_bytes == 0 and h.core.bounds.buffered_total == 0


def test_a_producer_of_large_messages_has_producer_window_bytes_in_flight() -> None:
    """The bound on bytes in flight per producer link (`producer_window_bytes`, 2 MiB by
    default), below what `read_high_water_bytes` (16 MiB) alone would allow: 10 KiB messages get
    about 200 credits, not link_capacity's 1,000; raised, the window grows with it."""
    for window_bytes in (None, 8 << 20):
        h = RouterHarness(_config() if window_bytes is None else _config(producer_window_bytes=window_bytes))
        producer, consumer = h.connect("p"), h.connect("c")
        rx, tx = consumer.receiver("big"), producer.sender("big")
        h.pump()
        rx.flow(100_000)
        h.pump()
        producer.send(tx, Message.data(b"x" * 10_240))
        h.pump()
        inl = _in(producer, tx)
        assert inl.size_hint > 10_240
        expected = min(1000, (window_bytes or 2 << 20) // inl.size_hint)
        assert tx.credit + inl.held == expected
        assert len(consumer.received[rx]) == 1


def test_a_producer_of_messages_above_producer_window_bytes_keeps_two_messages_in_flight() -> None:
    """The next message may follow a 3 MiB one before its outcome: two messages' worth, where
    producer_window_bytes alone (2 MiB) would leave one."""
    h = RouterHarness(_config())
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    rx, tx = consumer.receiver("huge"), producer.sender("huge")
    h.pump()
    rx.flow(10)
    h.pump()
    producer.send(tx, Message.data(b"x" * (3 << 20)))
    h.pump()
    inl = _in(producer, tx)
    assert inl.size_hint > 3 << 20
    assert tx.credit + inl.held == 2 and tx.credit >= 1  # the first is unanswered: the next may go
    producer.send(tx, Message.value("next"))
    h.pump()
    assert len(consumer.received[rx]) == 2


def test_small_messages_keep_the_full_window_and_sizes_decay() -> None:
    h = RouterHarness(_config(read_high_water_bytes=1 << 20))
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("q"), producer.sender("q")
    h.pump()
    rx.flow(100_000)
    h.pump()
    inl = _in(producer, tx)
    producer.send(tx, Message.value("small"))
    h.pump()
    assert inl.size_hint == 0 and tx.credit >= 125
    producer.send(tx, _big(0))
    h.pump()
    assert inl.size_hint > BIG
    for i in range(100):
        producer.send(tx, Message.value(i))
        h.pump()
    assert inl.size_hint == 0  # back to small messages: the whole window again
    assert tx.credit >= 125


def test_a_first_window_of_large_messages_is_read_and_released_beyond_the_bound() -> None:
    """The producer uses the whole first window (sizes unknown yet) for large messages while no
    consumer has credit: the router reads all of it, holds what fits its bound and releases the
    rest; nothing is lost and the connection is never paused."""
    h = RouterHarness(_config(read_high_water_bytes=1 << 20, max_frame_size=16384))
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    assert tx.credit == 64  # 64 frames of 16 KiB: single-frame messages would fit
    sent = [producer.send(tx, _big(i)) for i in range(30)]  # 3 MB of multi-frame messages
    h.pump()
    state = producer.router_side.context
    assert state.buffered_bytes <= 1 << 20
    assert not h.core.read_paused(producer.router_side)
    released = [d for d in sent if isinstance(producer.outcomes.get(d), Released)]
    waiting = [d for d in sent if d not in producer.outcomes]
    assert released and waiting and len(released) + len(waiting) == 30
    assert h.core.bounds.released_over_budget == len(released)
    rx.flow(100)
    h.pump()
    assert len(consumer.received[rx]) == len(waiting)
    assert all(isinstance(producer.outcomes[d], Accepted) for d in waiting)


def test_a_streaming_delivery_growing_past_the_bound_while_waiting_is_released() -> None:
    h = RouterHarness(_config(read_high_water_bytes=1 << 18))
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    payload = encode_message(Message.data(b"z" * 600_000))
    tx.send_transfer(b"t", payload[:100_000], more=True)
    h.pump()
    state = producer.router_side.context
    assert state.buffered_bytes == 100_000
    delivery = tx.send_transfer(b"t", payload[100_000:400_000], more=True)
    h.pump()
    assert isinstance(producer.outcomes[delivery], Released)
    assert state.buffered_bytes == 0 and not h.core.read_paused(producer.router_side)
    tx.send_transfer(b"t", payload[400_000:])
    producer.send(tx, Message.value("after"))
    h.pump()
    rx.flow(10)
    h.pump()
    assert consumer.bodies(rx) == ["after"]


def test_the_router_budget_is_shared_out_as_credit() -> None:
    """Many producers of large (single-frame) messages and no consumer credit: each connection's
    window is its part of the budget, so together they never pass it and nothing needs to be
    released."""
    budget = 1 << 20
    h = RouterHarness(_config(limits=Limits(buffered_budget_bytes=budget)))
    consumer = h.connect("c")
    rx = consumer.receiver("big")
    producers = [h.connect(f"p{i}") for i in range(6)]
    links = [p.sender("big") for p in producers]
    h.pump()
    sent = 0
    for _ in range(5):
        for p, tx in zip(producers, links, strict=True):
            for _ in range(tx.credit):
                p.send(tx, Message.data(b"m" * 60_000))
                sent += 1
        h.pump()
    bounds = h.core.bounds
    assert sent >= 6 and bounds.released_over_budget == 0
    assert bounds.buffered_total <= budget and all(tx.credit == 0 for tx in links)
    assert bounds.buffered_total == sum(s.buffered_bytes for s in h.core.connections.values())
    rx.flow(1000)
    h.pump()
    assert len(consumer.received[rx]) == sent
    assert bounds.buffered_total == 0 and bounds.holders == 0 and bounds.paused_count() == 0


def test_small_message_producers_filling_the_budget_get_credit_by_bytes_not_a_release_storm() -> None:
    """Producers of small messages (no window by bytes while there is room) fill the router's
    budget: once it is nearly full their windows go by bytes too, so a producer whose deliveries
    were released is not given credit at once only to be released again."""
    budget = 1 << 20
    h = RouterHarness(_config(read_high_water_bytes=1 << 20, limits=Limits(buffered_budget_bytes=budget)))
    consumer = h.connect("c")
    rx = consumer.receiver("q")
    producers = [h.connect(f"p{i}") for i in range(10)]
    links = [p.sender("q") for p in producers]
    h.pump()
    released: list[int] = []
    for _ in range(12):
        for p, tx in zip(producers, links, strict=True):
            for _ in range(tx.credit):
                p.send(tx, Message.data(b"s" * 200))  # under 1 MiB / (4 x 1000): a "small" message here
        h.pump()
        released.append(h.core.bounds.released_over_budget)
    bounds = h.core.bounds
    assert bounds.nearly_full and bounds.buffered_total <= budget
    assert released[-1] == released[5]  # it settled: no more deliveries read only to be released
    assert all(tx.credit == 0 for tx in links)
    rx.flow(100_000)
    h.pump()
    assert bounds.buffered_total == 0 and not bounds.nearly_full
    assert all(tx.credit > 0 for tx in links)  # room again: credit again


def test_a_producer_of_messages_larger_than_its_share_still_gets_one_credit() -> None:
    """Many idle connections make each one's part of the budget smaller than one message: a
    producer still gets a credit at a time while the router has room (never none for ever)."""
    h = RouterHarness(_config(limits=Limits(buffered_budget_bytes=1 << 20)))
    idle = [h.connect(f"idle{i}") for i in range(20)]
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    assert len(idle) == 20 and (1 << 20) // len(h.core.connections) < BIG
    for _ in range(3):
        while tx.credit:
            producer.send(tx, _big(0))
        h.pump()
        rx.flow(1)
        h.pump()
    assert _in(producer, tx).size_hint > BIG and tx.credit + _in(producer, tx).held == 1
    assert len(consumer.received[rx]) == 3 and h.core.bounds.released_over_budget == 0


def test_reads_pause_the_largest_holders_first_and_never_one_holding_nothing() -> None:
    from router.amqp.connection import Connection, ConnectionConfig
    from router.core.connections import ConnState

    budget = 1 << 20
    h = RouterHarness(_config(limits=Limits(buffered_budget_bytes=budget)))
    clients = [h.connect(f"c{i}") for i in range(4)]
    states = [c.router_side.context for c in clients]
    between_routers = ConnState(Connection(ConnectionConfig(container_id="r")), Listener(role="inter-router"))
    bounds = h.core.bounds
    for state, held in zip(states, [0, 100_000, 300_000, 450_000], strict=True):
        bounds.hold(state, held)
    bounds.hold(between_routers, 200_000)
    assert bounds.buffered_total == 1_050_000 > bounds.pause_above and bounds.holders == 4
    paused = [bounds.read_paused(s) for s in states]
    # the average is 262,500: the two holding more pause, the others (and an idle one) do not
    assert paused == [False, False, True, True]
    assert not bounds.read_paused(between_routers)  # its control traffic must flow
    assert bounds.paused_count() == 2
    bounds.hold(states[3], -450_000)  # a consumer took what it held: room again, nobody pauses
    assert not any(bounds.read_paused(s) for s in states)
    bounds.hold(states[1], 2 << 20)  # past its own bound: paused whatever the router's total
    assert bounds.read_paused(states[1])


def test_held_frames_pause_a_client_at_its_bound_and_a_router_only_far_above_it() -> None:
    """Between routers the band whose frames are held shuts first (router.core.bandwindow): the
    connection is read on until its bound and four write high-water marks are passed (what a
    neighbour that ignores the window, or one that cannot be shut, sends)."""
    from router.amqp.connection import Connection, ConnectionConfig
    from router.core.connections import ConnState

    h = RouterHarness(_config())
    settings_ = {"read_high_water_bytes": 1 << 20, "write_high_water_bytes": 1 << 20}
    client = ConnState(Connection(ConnectionConfig(container_id="c")), Listener(**settings_))
    router = ConnState(Connection(ConnectionConfig(container_id="r")), Listener(role="inter-router", **settings_))
    bounds = h.core.bounds
    for state in (client, router):
        state.held_frame_bytes = (1 << 20) + 1
    assert bounds.read_paused(client) and not bounds.read_paused(router)
    router.held_frame_bytes = 5 << 20
    assert not bounds.read_paused(router)
    router.held_frame_bytes += 1
    assert bounds.read_paused(router)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "settle", "flow", "settle_some"]), st.integers(1, 40)), max_size=30))
def test_the_unsettled_bound_holds_whatever_the_order(steps: list[tuple[str, int]]) -> None:
    """Any mix of sends, settlements and credit: no link ever holds more than its bound, the
    connection's count is the sum of its links', every delivery is sent or waits."""
    h = RouterHarness(_config(max_unsettled_per_link=7, max_unsettled_per_connection=10))
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    rx_a, rx_b, tx = consumer.receiver("q"), consumer.receiver("q"), producer.sender("q")
    h.pump()
    sent = 0
    for op, n in steps:
        if op == "send":
            for _ in range(min(n, tx.credit)):
                producer.send(tx, Message.value(sent))
                sent += 1
        elif op == "flow":
            rx_a.flow(n)
            rx_b.flow(n // 2)
        elif op == "settle":
            _settle_all(consumer, rx_a)
        else:
            for rx in (rx_a, rx_b):
                for received in consumer.received[rx][:n]:
                    rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
                consumer.received[rx] = consumer.received[rx][n:]
        h.pump()
        outs = [_out(consumer, rx_a), _out(consumer, rx_b)]
        state = consumer.router_side.context
        assert all(o.outstanding <= 7 for o in outs) and state.unsettled_out <= 10
        assert state.unsettled_out == sum(o.outstanding for o in outs)
        assert all(o.outstanding == len(consumer.received[rx]) for o, rx in zip(outs, (rx_a, rx_b), strict=True))
        assert h.core.bounds.stuck_now == sum(o.stuck for o in outs)
        waiting = len(h.core.table.entries["Mq"].pending)
        settled = sum(1 for d in producer.outcomes)
        assert settled + state.unsettled_out + waiting == sent


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300_000), st.integers(0, 3)), min_size=1, max_size=25))
def test_bytes_held_stay_within_the_bounds_whatever_the_sizes(steps: list[tuple[int, int]]) -> None:
    """A producer that uses all its credit with messages of any size (single- and multi-frame,
    growing and shrinking) and a consumer that gives credit now and then: the bytes held for
    the producer never pass its connection's bound nor the router's, the accounting matches
    the waiting deliveries, and every delivery is delivered, waiting or released."""
    bound = 1 << 19
    h = RouterHarness(_config(read_high_water_bytes=bound, max_frame_size=16384,
                              limits=Limits(buffered_budget_bytes=1 << 20)))  # fmt: skip
    producer, consumer = h.connect("p"), h.connect("c")
    rx, tx = consumer.receiver("big"), producer.sender("big")
    h.pump()
    sent = 0
    state = producer.router_side.context
    for size, credit in steps:
        for _ in range(min(tx.credit, 40)):
            producer.send(tx, Message.data(b"s" * size))
            sent += 1
        if credit:
            rx.flow(credit)
        h.pump()
        bounds = h.core.bounds
        assert state.buffered_bytes <= bound and bounds.buffered_total <= 1 << 20
        waiting = h.core.table.entries["Mbig"].pending
        assert state.buffered_bytes == sum(f.size for f in waiting if not f.done)
        assert bounds.buffered_total == state.buffered_bytes
        assert not h.core.read_paused(producer.router_side)
        delivered = len(consumer.received[rx])
        released = sum(isinstance(s, Released) for s in producer.outcomes.values())
        assert delivered + released + sum(1 for f in waiting if not f.done) == sent


def test_across_the_mesh_a_stuck_consumer_holds_back_nothing_but_itself() -> None:
    """A producer on router A, a consumer that never settles on router B (bound 10): B stops
    sending to it; the data link between the routers is not bounded that way, so a second
    consumer on B then gets everything that waited and everything after."""
    from router.testing.meshharness import MeshHarness

    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B")
    h.converge()
    tight = Listener(name="tight", max_unsettled_per_link=10)
    producer, hoarder = h.client("A", "p"), h.client("B", "h", listener=tight)
    hoarder.auto_accept = False
    rx = hoarder.receiver("far")
    h.advance(0.5)
    rx.flow(1000)
    tx = producer.sender("far")
    h.pump()
    sent = [producer.send(tx, Message.value(i)) for i in range(40)]
    h.pump()
    assert len(hoarder.received[rx]) == 10
    (out,) = [o for o in hoarder.router_side.context.out_links]
    assert out.stuck and h.cores["B"].bounds.stuck_now == 1
    assert not any(o.stuck for s in h.cores["A"].connections.values() for o in s.out_links)
    good = h.client("B", "g", listener=tight)
    rx2 = good.receiver("far")
    h.advance(0.5)
    rx2.flow(1000)
    h.pump()
    for i in range(100):
        sent.append(producer.send(tx, Message.value(i)))
        h.pump()
    assert len(good.received[rx2]) == 130 and len(hoarder.received[rx]) == 10
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent[10:])
