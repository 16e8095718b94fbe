"""TopologyNode driven by hand: the public API's contract (inputs, tick, outputs, deadlines,
events), the timers (HELLO, RA stable and in flux, request retry, dead interval) and bad input."""

from __future__ import annotations

import pytest

from topology.config import TopologyConfig
from topology.events import AddressesChanged, RoutesChanged
from topology.graph import LinkState
from topology.messages import Hello, LinkStateRequest, LinkStateUpdate, MobileAddressRequest, MobileAddressUpdate
from topology.messages import RouterAdvert
from topology.node import TopologyNode

from router.testing.topology_sim import Network


def sent(node: TopologyNode, kind: type) -> list[tuple[str | None, object]]:
    return [(to, m) for to, m in node.take_outgoing() if isinstance(m, kind)]


def two_way(node: TopologyNode, peer: str, now: float, instance: int = 9) -> None:
    """Make `peer` a two-way neighbour of `node` by hand."""
    node.neighbour_up(peer, now=now)
    node.receive(peer, Hello(router_id=peer, instance=instance, seen=(node.router_id,)), now)


def test_hello_lists_heard_neighbours_and_answers_at_once() -> None:
    a = TopologyNode("A", 1)
    a.neighbour_up("B", 3, now=0.0)
    assert sent(a, Hello) == [("B", Hello(router_id="A", instance=1, seen=()))]
    a.receive("B", Hello(router_id="B", instance=5), 0.1)  # B does not list A yet
    assert sent(a, Hello) == [("B", Hello(router_id="A", instance=1, seen=("B",)))]  # at once
    assert dict(a.neighbours) == {}
    a.receive("B", Hello(router_id="B", instance=5, seen=("A",)), 0.2)
    assert dict(a.neighbours) == {"B": 3} and a.link_state.seq == 1
    a.tick(0.2)
    out = a.take_outgoing()
    assert (None, Hello(router_id="A", instance=1, seen=("B",))) in out  # first periodic HELLO
    adverts = [m for to, m in out if isinstance(m, RouterAdvert) and to is None]
    assert adverts and adverts[0].ls_seq == 1 and adverts[0].mobile_seq == 0


def test_hello_every_interval_and_dead_interval() -> None:
    a = TopologyNode("A", 1)
    two_way(a, "B", 0.0)
    a.tick(0.0)
    a.take_outgoing()
    hellos = []
    now = 0.0
    while now < 10:
        now = a.next_deadline()
        a.tick(now)
        hellos += [now for _, m in sent(a, Hello)]
    assert hellos[:3] == [1.0, 2.0, 3.0]
    assert "B" not in a.neighbours  # nothing heard from B since 0.0: dead at 3.0
    assert a.routes_pending or a.routes.reachable == frozenset()


def test_advert_timers_stable_and_in_flux() -> None:
    cfg = TopologyConfig()
    a = TopologyNode("A", 1, cfg)
    adverts: list[float] = []
    now = 0.0
    while now < 200:
        if now == 100.0:
            two_way(a, "B", now)  # a change: RA at once, then every 4 s for 8 s, then every 30 s
        a.tick(now)
        adverts += [now for _, m in sent(a, RouterAdvert)]
        if now >= 100.0:
            a.receive("B", Hello(router_id="B", instance=9, seen=("A",)), now)  # keep B alive
        now = min(a.next_deadline(), float(int(now) + 1))
    assert adverts == [0.0, 30.0, 60.0, 90.0, 100.0, 104.0, 108.0, 138.0, 168.0, 198.0]
    assert cfg.ra_interval_s == 30 and cfg.ra_interval_flux_s == 4 and cfg.flux_period_s == 8


def test_local_addresses_are_merged_until_the_tick() -> None:
    a = TopologyNode("A", 1)
    a.tick(0.0)
    a.take_outgoing()
    a.set_local_addresses(added=["x", "y"])
    a.set_local_addresses(added=["z"], removed=["y"])  # y never existed: nothing to remove
    assert a.next_deadline() <= 0.0
    a.tick(0.5)
    maus = [m for _, m in sent(a, MobileAddressUpdate)]
    assert len(maus) == 1 and maus[0].added == ("x", "z") and maus[0].removed == ()
    assert a.mobile_seq == 1 and a.local_addresses == {"x", "z"}
    a.set_local_addresses(added=["q"])
    a.set_local_addresses(removed=["q"])  # gone again before the tick: no update at all
    a.tick(0.6)
    assert sent(a, MobileAddressUpdate) == [] and a.mobile_seq == 1
    with pytest.raises(ValueError):
        a.set_local_addresses(added=["x"], removed=["x"])
    with pytest.raises(ValueError):
        a.set_local_addresses(added=[""])


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        TopologyNode("", 1)
    with pytest.raises(ValueError):
        TopologyNode("A", -1)
    a = TopologyNode("A", 1)
    for cost in (0, -2, True, 1.5):
        with pytest.raises(ValueError):
            a.neighbour_up("B", cost)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        a.neighbour_up("A")
    with pytest.raises(ValueError):
        TopologyConfig(hello_interval_s=3, dead_interval_s=3)
    with pytest.raises(ValueError):
        TopologyConfig(ra_interval_s=0)
    with pytest.raises(ValueError, match="remote_ls_max_age_s"):
        TopologyConfig(remote_ls_max_age_s=10.0)  # shorter than the 30 s between adverts


def test_messages_from_elsewhere_are_ignored() -> None:
    a = TopologyNode("A", 1)
    a.receive("B", Hello(router_id="B", instance=1, seen=("A",)), 0.0)  # no connection to B
    a.neighbour_up("B", now=0.0)
    a.receive("B", Hello(router_id="C", instance=1, seen=("A",)), 0.0)  # C speaking on B's link
    assert a.counters.ignored_foreign == 2 and dict(a.neighbours) == {}
    two_way(a, "B", 0.1)
    a.neighbour_down("B", now=0.2)
    assert dict(a.neighbours) == {}
    a.receive("B", Hello(router_id="B", instance=9, seen=("A",)), 0.3)
    assert a.counters.ignored_foreign == 3


def test_events_are_coalesced_per_poll() -> None:
    a = TopologyNode("A", 1)
    two_way(a, "B", 0.0)
    a.receive("B", RouterAdvert(router_id="B", instance=9, ra_seq=1, ls_seq=1, mobile_seq=1, digest=bytes(16)), 0.0)
    assert [type(m) for to, m in a.take_outgoing() if to == "B" and not isinstance(m, Hello)] == [LinkStateRequest, MobileAddressRequest]
    a.receive("B", LinkStateUpdate(router_id="B", instance=9, link_state=LinkState(seq=1, peers={"A": 1}),
                                   mobile_seq=1, digest=bytes(16)), 0.0)  # fmt: skip
    assert a.take_events() == [] and a.routes_pending
    a.tick(0.0)
    assert a.next_deadline() == 0.0 + TopologyConfig().route_delay_s
    a.tick(a.next_deadline())
    events = a.take_events()
    assert [type(e) for e in events] == [RoutesChanged]
    assert events[0].added == {"B"} and a.take_events() == []
    from topology.mobile import digest_of

    a.receive("B", MobileAddressUpdate(router_id="B", instance=9, mobile_seq=1, digest=digest_of(["x", "y"]),
                                       added=("x", "y")), 0.1)  # fmt: skip
    a.receive("B", MobileAddressUpdate(router_id="B", instance=9, mobile_seq=2, digest=digest_of(["x"]),
                                       removed=("y",)), 0.1)  # fmt: skip
    events = a.take_events()
    assert events == [AddressesChanged(changes={"x": frozenset({"B"}), "y": frozenset()})]
    assert a.address_table() == {"x": {"B"}} and a.routers_for("x") == {"B"}


def test_lost_request_is_retried() -> None:
    net = Network()
    net.build("A -1- B -1- C")
    lost: list[float] = []

    def drop(sender: str, receiver: str, message: object) -> bool:
        if isinstance(message, LinkStateRequest) and not lost:
            lost.append(net.now)
            return True
        return False

    for link in net.links.values():
        link.drop = drop
    t = net.run_until_converged(limit=10)
    assert lost and t >= lost[0] + TopologyConfig().request_retry_s


def test_routers_and_link_states_read_api() -> None:
    net = Network()
    net.build("A -1- B -2- C")
    net.run_until_converged()
    a = net.node("A")
    assert a.link_states() == net.truth()
    info = a.routers()
    assert set(info) == {"B", "C"} and all(r.reachable for r in info.values())
    assert info["C"].ls_seq == net.node("C").link_state.seq


def test_ticking_at_the_deadline_always_makes_progress() -> None:
    """heard_at + dead_s is the deadline; `now - heard_at >= dead_s` is false there for some
    floats (13.006268391387822 + 3.0), which once made a driver tick at the same time forever."""
    a = TopologyNode("A", 1)
    heard = 13.006268391387822
    two_way(a, "B", heard)
    now = heard
    while now < heard + 10:
        a.tick(now)
        deadline = a.next_deadline()
        assert deadline > now
        now = deadline
    assert "B" not in a.neighbours


def test_a_neighbour_the_owner_does_not_read_is_not_judged_silent() -> None:
    """Its HELLOs wait unread behind data the owner holds back (backpressure): while held it
    stays a two-way neighbour; one never heard is not made heard; released, its dead interval
    runs again from the last hold."""
    from topology.events import NeighbourSilent

    a = TopologyNode("A", 1, TopologyConfig(hello_interval_s=1.0, dead_interval_s=3.0))
    two_way(a, "B", now=0.0)
    a.neighbour_up("C", now=0.0)  # C never says HELLO
    for t in range(1, 30):
        a.hold_neighbour("B", float(t))
        a.hold_neighbour("C", float(t))
        a.tick(float(t))
    silent = [e.router_id for e in a.take_events() if isinstance(e, NeighbourSilent)]
    assert silent == ["C"] and dict(a.neighbours) == {"B": 1}
    a.tick(31.9)
    assert dict(a.neighbours) == {"B": 1}
    a.tick(32.0)  # three seconds after the last hold
    assert [e.router_id for e in a.take_events() if isinstance(e, NeighbourSilent)] == ["B"]
    assert dict(a.neighbours) == {}


def test_a_silent_neighbour_is_reported_once_after_its_dead_interval() -> None:
    from topology.events import NeighbourSilent

    a = TopologyNode("A", 1, TopologyConfig(hello_interval_s=1.0, dead_interval_s=3.0))
    two_way(a, "B", now=0.0)
    a.neighbour_up("C", now=0.0)  # C never says HELLO
    for t in (1.0, 2.0, 2.9):
        a.receive("B", Hello(router_id="B", instance=9, seen=("A",)), t)
        a.tick(t)
    assert not [e for e in a.take_events() if isinstance(e, NeighbourSilent)]
    assert a.next_deadline() <= 3.0  # C's dead interval since its connection came up
    a.tick(3.0)
    assert [e for e in a.take_events() if isinstance(e, NeighbourSilent)] == [NeighbourSilent(router_id="C", silent_s=3.0)]
    a.tick(5.9)  # B's last HELLO was at 2.9
    (silent,) = [e for e in a.take_events() if isinstance(e, NeighbourSilent)]
    assert silent.router_id == "B" and silent.silent_s == pytest.approx(3.0)
    assert dict(a.neighbours) == {}
    a.tick(20.0)  # each silence is reported once
    assert not [e for e in a.take_events() if isinstance(e, NeighbourSilent)]
