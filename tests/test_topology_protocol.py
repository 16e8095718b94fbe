"""The inter-router protocol on a simulated network (router/testing/topology_sim.py): every
message crosses a link as an encoded body, time is virtual, links can lose, drop, rewrite or be
cut. "Converged" means every router holds the link states of its partition, computes the routes
those give and publishes the address table its partition's consumers give."""

from __future__ import annotations

import random

import pytest

from router.amqp.encode import encode
from topology.codec import to_map
from topology.config import TopologyConfig
from topology.events import AddressesChanged, AddressResync, DuplicateRouterId, RouterRestarted, RoutesChanged
from topology.messages import Hello, MobileAddressUpdate, RouterAdvert
from topology.mobile import digest_of

from router.testing.topology_sim import Network


def test_two_routers_converge() -> None:
    net = Network()
    net.add("A", addresses=["orders"])
    net.add("B", addresses=["orders", "audit"])
    net.link("A", "B", cost=2, cost_b=5)
    t = net.run_until_converged(limit=5)
    assert t < 0.2  # a handful of one-way delays and one route delay, no timer periods
    a, b = net.node("A"), net.node("B")
    assert dict(a.routes.next_hops) == {"B": "B"} and dict(a.routes.costs) == {"B": 5}
    assert a.address_table() == {"orders": {"B"}, "audit": {"B"}}
    assert b.address_table() == {"orders": {"A"}}
    assert dict(a.neighbours) == {"B": 2} and dict(b.neighbours) == {"A": 5}
    routes_events = net.events("A", RoutesChanged)
    assert routes_events[-1].routes.reachable == {"B"}
    assert set().union(*(e.added for e in routes_events)) == {"B"}
    changes: dict[str, frozenset[str]] = {}
    for event in net.events("A", AddressesChanged):
        changes.update(event.changes)
    assert changes == {"orders": {"B"}, "audit": {"B"}}
    info = a.routers()["B"]
    assert info.reachable and info.instance == b.instance and info.mobile_seq == b.mobile_seq == 1


@pytest.mark.parametrize(
    "art",
    [
        "A -1- B -1- C -1- D -1- E -1- F",
        "A -1- B -2- C -1- D -3- E -1- F -1- G -1- H -1- A",
        "A -1- B -1- C -1- D -1- E -1- A\nA -1- C -1- E -1- B -1- D -1- A",
        "A -1- B -1- C -1- D\nA -5- D\nB -1- E -1- F -2- G\nG -1- C",
    ],
    ids=["line", "ring", "full-mesh", "two-paths"],
)
def test_routers_converge(art: str) -> None:
    net = Network()
    net.build(art)
    for i, name in enumerate(sorted(net.nodes)):
        net.set_addresses(name, added=[f"q{i % 3}", f"only-{name}"])
    net.run_until_converged(limit=10)
    # Quiet: nothing more to pull, and routes do not move while time passes.
    before = {name: node.routes for name, node in net.nodes.items()}
    sent = net.stats.by_opcode.copy()
    net.run_for(120)
    assert not net.problems()
    assert all(node.routes is before[name] for name, node in net.nodes.items())
    for op in ("LSR", "LSU", "MAR"):
        assert net.stats.by_opcode.get(op, 0) == sent.get(op, 0), f"{op} sent while stable"


@pytest.mark.parametrize("seed", range(4))
def test_random_network_with_uneven_delays_converges(seed: int) -> None:
    rnd = random.Random(seed)
    net = Network(seed=seed)
    names = [f"R{i:02d}" for i in range(20)]
    for name in names:
        net.add(name, addresses=[f"a{rnd.randrange(6)}"])
    for i, name in enumerate(names[1:], 1):  # a random tree, then chords
        net.link(name, rnd.choice(names[:i]), rnd.randint(1, 4), delay=rnd.uniform(0.001, 0.05))
    for _ in range(15):
        a, b = rnd.sample(names, 2)
        if frozenset((a, b)) not in net.links:
            net.link(a, b, rnd.randint(1, 4), rnd.randint(1, 4), delay=rnd.uniform(0.001, 0.05))
    net.run_until_converged(limit=10)
    for _ in range(10):  # consumers come and go while links flap
        name = rnd.choice(names)
        net.set_addresses(name, added=[f"b{rnd.randrange(4)}"], removed=[f"a{rnd.randrange(6)}"])
        link = rnd.choice(list(net.links.values()))
        net.cut(link.a, link.b)
        net.run_for(rnd.uniform(0, 0.3))
        net.restore(link.a, link.b)
    net.run_until_converged(limit=10)


def test_address_changes_travel_as_differential_updates() -> None:
    net = Network()
    net.build("A -1- B -1- C -1- D")
    net.run_until_converged()
    for step in range(5):
        net.set_addresses("A", added=[f"x{step}"], removed=[f"x{step - 2}"] if step >= 2 else [])
        net.run_until_converged(limit=2)
    assert net.node("D").address_table() == {"x3": {"A"}, "x4": {"A"}}
    assert net.node("A").mobile_seq == 5
    assert net.stats.by_opcode.get("MAR", 0) == 0  # no full resync needed
    assert not any(net.events(name, AddressResync) for name in net.nodes)


def test_restart_with_new_instance_flushes_old_state() -> None:
    net = Network()
    net.build("A -1- B -1- C -1- D -1- A")
    net.set_addresses("C", added=["old"])
    net.run_until_converged()
    old = net.node("C").instance
    new = net.restart("C", addresses=["new"])
    assert new.instance > old and new.link_state.seq == 0
    net.run_until_converged(limit=5)
    for name in "ABD":
        assert net.node(name).address_table() == {"new": {"C"}}
        restarts = net.events(name, RouterRestarted)
        assert [(e.router_id, e.old_instance, e.new_instance) for e in restarts] == [("C", old, new.instance)]
        assert net.node(name).routers()["C"].instance == new.instance


def test_restart_of_a_router_with_more_history_than_its_new_instance() -> None:
    """The new instance starts at seq 0: the old instance's higher seqs must not shadow it."""
    net = Network()
    net.build("A -1- B -1- C")
    net.run_until_converged()
    for i in range(6):  # C's link state and address seqs climb
        net.cut("B", "C")
        net.restore("B", "C")
        net.set_addresses("C", added=[f"c{i}"])
        net.run_until_converged()
    net.restart("C", addresses=["fresh"])
    net.run_until_converged(limit=5)
    assert net.node("A").address_table() == {"fresh": {"C"}}


def mau_filter(seq: int, origin: str = "A"):  # type: ignore[no-untyped-def]
    def drop(sender: str, receiver: str, message: object) -> bool:
        return (
            isinstance(message, MobileAddressUpdate) and not message.is_full
            and message.router_id == origin and message.mobile_seq == seq
        )  # fmt: skip

    return drop


def test_lost_update_is_healed_by_a_full_resync_on_the_gap() -> None:
    """A's MAU 1 and the RA announcing it are lost on the only path; MAU 2 shows the gap."""
    net = Network()
    net.build("A -1- B -1- C")
    net.run_until_converged()
    lost = {"n": 0}

    def drop(sender: str, receiver: str, message: object) -> bool:
        if sender == "A" and isinstance(message, (MobileAddressUpdate, RouterAdvert)) and message.mobile_seq == 1 \
                and not (isinstance(message, MobileAddressUpdate) and message.is_full):
            lost["n"] += 1
            return True
        return False

    net.get_link("A", "B").drop = drop
    net.set_addresses("A", added=["one"])
    net.run_for(0.5)
    assert lost["n"] >= 2 and net.node("C").address_table() == {}
    net.set_addresses("A", added=["two"])
    net.run_until_converged(limit=2)
    assert net.node("C").address_table() == {"one": {"A"}, "two": {"A"}}
    assert [(e.router_id, e.reason) for e in net.events("B", AddressResync)] == [("A", "gap")]
    assert net.node("B").counters.resync_gap == 1
    assert net.stats.by_opcode["MAR"] >= 1


def test_lost_update_is_healed_by_the_next_advert() -> None:
    net = Network()
    net.build("A -1- B")
    net.run_until_converged()
    net.get_link("A", "B").drop = mau_filter(1)
    net.set_addresses("A", added=["one"])
    net.run_until_converged(limit=2)  # the RA right after the MAU shows seq 1: B pulls it
    assert net.node("B").address_table() == {"one": {"A"}}


def test_silent_drift_is_healed_by_the_digest() -> None:
    """B's copy of A's addresses goes wrong without any seq showing it (a differential update
    rewritten in flight, its digest made to match): the digest in A's adverts catches it."""
    net = Network()
    net.build("A -1- B -1- C")
    net.run_until_converged()

    def rewrite(sender: str, receiver: str, message):  # type: ignore[no-untyped-def]
        if isinstance(message, MobileAddressUpdate) and message.added == ("real",):
            return MobileAddressUpdate(router_id="A", instance=message.instance, mobile_seq=message.mobile_seq,
                                       digest=digest_of(["ghost"]), added=("ghost",))  # fmt: skip
        return message

    net.get_link("A", "B").rewrite = rewrite
    net.set_addresses("A", added=["real"])
    net.run_until_converged(limit=5)
    assert net.node("C").address_table() == {"real": {"A"}}
    assert [(e.router_id, e.reason) for e in net.events("B", AddressResync)] == [("A", "digest")]


def test_update_whose_content_breaks_its_digest_is_resynced() -> None:
    net = Network()
    net.build("A -1- B")
    net.run_until_converged()

    def rewrite(sender: str, receiver: str, message):  # type: ignore[no-untyped-def]
        if isinstance(message, MobileAddressUpdate) and message.added:
            return MobileAddressUpdate(router_id="A", instance=message.instance, mobile_seq=message.mobile_seq,
                                       digest=message.digest, added=("ghost",))  # fmt: skip
        return message

    net.get_link("A", "B").rewrite = rewrite
    net.set_addresses("A", added=["real"])
    net.run_until_converged(limit=5)
    assert net.node("B").counters.resync_digest == 1


def test_newer_versions_and_unknown_opcodes_are_counted_and_ignored() -> None:
    net = Network()
    net.build("A -1- B")
    net.run_until_converged()
    b = net.node("B")
    hello = to_map(Hello(router_id="A", instance=net.node("A").instance))
    net.inject("A", "B", encode({**hello, "pv": 2, "seen": {"a": "new shape"}}))
    net.inject("A", "B", encode({"op": "TELEPORT", "pv": 1, "id": "A", "instance": 1}))
    net.inject("A", "B", Hello(router_id="A", instance=net.node("A").instance, version=2))
    net.inject("A", "B", b"\xa1\x03abc")  # a string, not a map
    routes = b.routes
    net.run_for(1)
    assert b.counters.ignored_version == 2
    assert b.counters.ignored_opcode == 1
    assert net.stats.malformed == 1
    assert b.routes is routes and not net.problems()


def test_dead_interval_drops_a_silent_neighbour() -> None:
    """
        A -1- B         B's messages to A are lost: A drops B after the dead interval, and
        |     |         B drops A once A's HELLOs stop listing it. Traffic goes round by C-D.
        D -1- C
    """
    net = Network()
    net.build("A -1- B -1- C -1- D -1- A")
    net.run_until_converged()
    assert net.node("A").routes.next_hops["B"] == "B"
    start = net.now
    net.get_link("A", "B").drop = lambda sender, receiver, message: sender == "B"
    net.run_until(lambda: "B" not in net.node("A").neighbours, limit=10)
    assert 3.0 - 1.0 <= net.now - start <= 3.0 + 0.1  # last HELLO heard up to one interval ago
    net.run_until(lambda: net.node("A").routes.next_hops.get("B") == "D", limit=2)
    net.run_until(lambda: "A" not in net.node("B").neighbours, limit=2)
    assert net.node("C").routes.costs["A"] == 2
    net.get_link("A", "B").drop = None
    net.run_until(lambda: "B" in net.node("A").neighbours and "A" in net.node("B").neighbours, limit=3)
    net.run_until_converged(limit=2)


def test_dead_interval_follows_configuration() -> None:
    cfg = TopologyConfig(hello_interval_s=0.1, dead_interval_s=0.3)
    net = Network(cfg)
    net.build("A -1- B")
    net.run_until_converged()
    start = net.now
    net.get_link("A", "B").drop = lambda sender, receiver, message: True
    net.run_until(lambda: not net.node("A").neighbours, limit=5)
    assert net.now - start <= 0.3 + 0.01


def test_partition_and_heal() -> None:
    net = Network()
    net.build("A -1- B -1- C -1- D -1- E -1- F -1- A")
    for name in "ABCDEF":
        net.set_addresses(name, added=["all", f"at-{name}"])
    net.run_until_converged()
    net.cut("A", "B")
    net.cut("D", "E")
    net.run_until_converged(limit=2)
    assert net.node("A").routes.reachable == {"E", "F"}
    assert net.node("A").address_table() == {"all": {"E", "F"}, "at-E": {"E"}, "at-F": {"F"}}
    assert net.node("B").routes.reachable == {"C", "D"}
    # Both halves move on while apart.
    net.set_addresses("C", added=["late"], removed=["at-C"])
    net.set_addresses("F", removed=["all"])
    net.cut("E", "F")
    net.restore("E", "F")
    net.run_for(5)
    net.restore("A", "B")
    net.restore("D", "E")
    net.run_until_converged(limit=3)
    assert net.node("F").address_table()["late"] == {"C"}
    assert "F" not in net.node("C").address_table()["all"]


def test_partition_longer_than_the_link_state_max_age() -> None:
    cfg = TopologyConfig(remote_ls_max_age_s=10.0, ra_interval_s=4.0)
    net = Network(cfg)
    net.build("A -1- B -1- C -1- D")
    net.run_until_converged()
    net.cut("B", "C")
    net.run_for(30)
    assert set(net.node("A").routers()) == {"B"}  # C and D aged out
    net.restore("B", "C")
    net.run_until_converged(limit=3)


def test_duplicate_router_id_is_reported() -> None:
    """
        X1 -1- M -1- N -1- X2       two routers configured with id X

    Routers in between follow the newer instance (X2) and drop the older one's messages as
    stale; the newer instance's adverts reach the older one, which reports the clash once.
    """
    net = Network()
    net.add("X1", router_id="X")
    net.build("M -1- N")
    net.add("X2", router_id="X")
    net.link("X1", "M")
    net.link("N", "X2")
    net.run_for(5)
    reports = net.events("X1", DuplicateRouterId)
    assert [(e.router_id, e.instance) for e in reports] == [("X", net.node("X2").instance)]
    assert net.node("M").routes.next_hops["X"] == "N"
    assert net.node("M").counters.ignored_stale > 0


def test_lossy_links_converge() -> None:
    net = Network(seed=7)
    net.build("A -1- B -1- C -1- D -1- E -1- A\nA -2- C\nB -2- D")
    for link in net.links.values():
        link.loss = 0.2
    for name in "ABCDE":
        net.set_addresses(name, added=[f"at-{name}"])
    net.run_until(lambda: not net.problems(), limit=120, check_every=0.5)
    assert net.stats.lost > 0


def test_cost_change() -> None:
    net = Network()
    net.build("A -1- B -1- C\nA -3- C")
    net.run_until_converged()
    assert net.node("A").routes.next_hops["C"] == "B"
    link = net.get_link("A", "B")
    link.cost_a = 5
    net.node("A").neighbour_up("B", 5, now=net.now)
    net._after("A")
    net.run_until_converged(limit=2)
    assert net.node("A").routes.next_hops["C"] == "C"
    assert net.node("B").routes.costs["A"] == 4  # via C now: the A-B link costs max(5, 1)


def test_router_gone_for_good_is_forgotten() -> None:
    cfg = TopologyConfig(remote_ls_max_age_s=10.0, ra_interval_s=4.0)
    net = Network(cfg)
    net.build("A -1- B -1- C")
    net.set_addresses("C", added=["c"])
    net.run_until_converged()
    net.unlink("B", "C")
    net.run_until(lambda: "C" not in net.node("A").routes.reachable, limit=1)
    assert net.node("A").address_table() == {}
    net.run_for(15)
    assert "C" not in net.node("A").routers()


@pytest.mark.parametrize("seed", range(12))
def test_chaos_then_calm_converges(seed: int) -> None:
    """Random links flapping, routers restarting, consumers coming and going and lossy links
    for a while; once the network is left alone it must converge."""
    rnd = random.Random(seed)
    net = Network(seed=seed)
    names = [f"R{i}" for i in range(rnd.randint(3, 12))]
    for name in names:
        net.add(name)
    for i, name in enumerate(names[1:], 1):
        net.link(name, rnd.choice(names[:i]), rnd.randint(1, 3), delay=rnd.uniform(0.001, 0.03))
    for _ in range(len(names) // 2):
        a, b = rnd.sample(names, 2)
        if frozenset((a, b)) not in net.links:
            net.link(a, b, rnd.randint(1, 3), rnd.randint(1, 3), delay=rnd.uniform(0.001, 0.03))
    links = list(net.links.values())
    for _ in range(40):
        action = rnd.random()
        name = rnd.choice(names)
        link = rnd.choice(links)
        if action < 0.3:
            gain, lose = rnd.sample(range(5), 2)
            net.set_addresses(name, added=[f"a{gain}"], removed=[f"a{lose}"] * (rnd.random() < 0.5))
        elif action < 0.5:
            net.cut(link.a, link.b)
        elif action < 0.7:
            net.restore(link.a, link.b)
        elif action < 0.8:
            net.restart(name, addresses=net.addresses[name])
        else:
            link.loss = rnd.choice((0.0, 0.3, 1.0))
        net.run_for(rnd.choice((0.0, 0.01, 0.2, 1.0, 5.0)))
    for link in links:
        link.loss = 0.0
    net.run_until(lambda: not net.problems(), limit=120, check_every=0.25)


def test_valid_origins_change_is_reported_even_when_my_paths_do_not() -> None:
    net = Network()
    net.build("M -1- O -5- D -1- M")
    net.run_until_converged()
    assert net.node("M").routes.valid_origins("D") == {"O"}
    for a, b in (("O", "D"), ("D", "O")):
        net.get_link(a, b).cost_a = net.get_link(a, b).cost_b = 1
        net.node(a).neighbour_up(b, 1, now=net.now)
        net._after(a)
    net.run_until_converged(limit=2)
    last = net.events("M", RoutesChanged)[-1]
    assert last.routes is net.node("M").routes
    assert last.routes.valid_origins("D") == frozenset()
    assert last.changed == frozenset()  # no next hop or cost of M's moved


@pytest.mark.parametrize("n", [3, 5, 9])
def test_a_link_failure_costs_distance_plus_two_rounds(n: int) -> None:
    """A line of n routers loses its last link. The RA of the router left behind reaches the far
    end after n-2 hops; each router pulls the new link state from the neighbour the RA came
    from, which answers as soon as it holds it: one request and one answer more, not a round
    trip to the owner per router."""
    names = [chr(ord("A") + i) for i in range(n)]
    net = Network()
    net.build(" -1- ".join(names))
    net.run_until_converged()
    net.reset_rounds()
    start = net.now
    net.cut(names[-2], names[-1])
    t = net.run_until_converged(limit=2)
    assert net.rounds == (n - 2) + 2
    assert t - start <= TopologyConfig().route_delay_s + net.rounds * net.delay + 1e-9
