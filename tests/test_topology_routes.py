"""Route computation from literal topologies: ASCII art in, next hops / costs / hops / radius /
valid origins out (docs/mesh-protocol.md, "Routes"). The art is parsed by
router/testing/topology_art.py: `A -1- B` is a two-way link of cost 1, `A -1/5- B` an asymmetric
configuration, `A -1-> B` a one-way claim."""

from __future__ import annotations

import pytest

from topology.graph import COST_MAX, LinkState, build_graph
from topology.routes import Routes, compute_routes

from router.testing.topology_art import parse_topology, ring


def routes_of(art: str, me: str) -> Routes:
    return compute_routes(parse_topology(art), me)


def test_line() -> None:
    """
        A -1- B -3- C
    """
    art = "A -1- B -3- C"
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "B", "C": "B"}
    assert dict(a.costs) == {"B": 1, "C": 4}
    assert dict(a.hops) == {"B": 1, "C": 2}
    assert a.radius == 2
    b = routes_of(art, "B")
    assert dict(b.next_hops) == {"A": "A", "C": "C"}
    assert dict(b.costs) == {"A": 1, "C": 3}
    assert b.radius == 1
    # B relays A <-> C; A and C are leaves and relay nothing.
    assert b.valid_origins("C") == {"A"}
    assert b.valid_origins("A") == {"C"}
    assert b.upstream("C", "A") == "A"
    assert b.valid_origins("B") == {"A", "C"}  # traffic for me from anyone reaches me
    assert a.valid_origins("C") == frozenset()
    assert a.valid_origins("B") == frozenset()
    assert a.valid_origins("A") == {"B", "C"}
    assert a.upstream("A", "C") == "B"
    assert not a.is_valid_origin("C", "B")


def test_ring_breaks_ties_by_router_id() -> None:
    """
        A -1- B
        |     |
        D -1- C      (A -1- D and B -1- C)
    """
    art = "A -1- B -1- C -1- D -1- A"
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "B", "C": "B", "D": "D"}  # C: B and D tie, B < D
    assert dict(a.costs) == {"B": 1, "C": 2, "D": 1}
    assert dict(a.hops) == {"B": 1, "C": 2, "D": 1}
    assert a.radius == 2
    # D's traffic to B goes D -> A -> B (A < C), so A relays it; C's traffic to A comes via B.
    assert a.valid_origins("B") == {"D"}
    assert a.upstream("B", "D") == "D"
    assert a.valid_origins("D") == {"B"}
    assert a.valid_origins("C") == frozenset()
    c = routes_of(art, "C")
    assert dict(c.next_hops) == {"A": "B", "B": "B", "D": "D"}
    b = routes_of(art, "B")
    assert b.valid_origins("A") == {"C"}
    assert b.valid_origins("D") == frozenset()


def test_ring_of_five_radius() -> None:
    states = ring(5)
    r = compute_routes(states, "R0")
    assert dict(r.costs) == {"R1": 1, "R2": 2, "R3": 2, "R4": 1}
    assert dict(r.next_hops) == {"R1": "R1", "R2": "R1", "R3": "R4", "R4": "R4"}
    assert r.radius == 2


def test_full_mesh() -> None:
    """Every pair linked: everything is one hop, and nobody relays for anybody."""
    art = """
        A -1- B -1- C -1- D -1- A
        A -1- C
        B -1- D
    """
    for me in "ABCD":
        r = routes_of(art, me)
        others = set("ABCD") - {me}
        assert dict(r.next_hops) == {d: d for d in sorted(others)}
        assert set(r.costs.values()) == {1}
        assert r.radius == 1
        for dest in others:
            assert r.valid_origins(dest) == frozenset()
        assert r.valid_origins(me) == others


def test_two_paths_with_different_costs() -> None:
    """
        A -1- B -1- D
        |           |
        +----5- C -1+      the direct A-C link (5) loses to A-B-D-C (3)
    """
    art = """
        A -1- B -1- D
        A -5- C -1- D
    """
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "B", "C": "B", "D": "B"}
    assert dict(a.costs) == {"B": 1, "C": 3, "D": 2}
    assert dict(a.hops) == {"B": 1, "C": 3, "D": 2}
    assert a.radius == 3
    c = routes_of(art, "C")
    assert dict(c.next_hops) == {"A": "D", "B": "D", "D": "D"}
    assert c.costs["A"] == 3
    d = routes_of(art, "D")
    assert d.valid_origins("A") == {"C"}
    b = routes_of(art, "B")
    assert b.valid_origins("A") == {"C", "D"}
    assert b.upstream("A", "C") == "D"


def test_cheaper_path_wins_over_fewer_hops() -> None:
    art = """
        A -10- D
        A -1- B -1- C -1- D
    """
    a = routes_of(art, "A")
    assert a.next_hops["D"] == "B" and a.costs["D"] == 3
    assert a.hops["D"] == 3


def test_asymmetric_costs_take_the_max_of_both_ends() -> None:
    """
        A -1/5- B       A configures 1, B configures 5: the link costs 5 both ways
        A -3- C -1- B
    """
    art = """
        A -1/5- B
        A -3- C -1- B
    """
    graph = build_graph(parse_topology(art))
    assert graph["A"]["B"]["cost"] == 5
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "C", "C": "C"}
    assert dict(a.costs) == {"B": 4, "C": 3}
    b = routes_of(art, "B")
    assert dict(b.next_hops) == {"A": "C", "C": "C"}
    assert b.costs["A"] == 4
    # Either end raising the cost is enough.
    flipped = routes_of("A -5/1- B\nA -3- C -1- B", "A")
    assert dict(flipped.costs) == dict(a.costs)


def test_partition() -> None:
    """
        A -1- B         C -1- D      no link between the halves
    """
    art = """
        A -1- B
        C -1- D
    """
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "B"}
    assert a.reachable == {"B"}
    assert a.radius == 1
    assert a.valid_origins("C") == frozenset()
    assert a.upstream("C", "D") is None
    assert not a.is_valid_origin("B", "C")
    assert a.all_valid_origins() == {"B": frozenset()}
    c = routes_of(art, "C")
    assert dict(c.next_hops) == {"D": "D"}


def test_one_way_claim_is_ignored() -> None:
    """A lists C, C does not list A: no link. The path to C goes round through B."""
    art = """
        A -1- B -2- C
        A -1-> C
    """
    a = routes_of(art, "A")
    assert dict(a.next_hops) == {"B": "B", "C": "B"}
    assert a.costs["C"] == 3
    assert "A" not in build_graph(parse_topology(art))["C"]
    back = routes_of("A -1- B -2- C\nA <-1- C", "A")  # C lists A, A does not list C
    assert dict(back.next_hops) == dict(a.next_hops)
    lonely = routes_of("A -1-> B", "A")
    assert lonely.reachable == frozenset()
    assert lonely.radius == 0


def test_router_listing_itself_is_no_link() -> None:
    states = parse_topology("A -1- B")
    states["A"] = LinkState(seq=2, peers={"A": 1, "B": 1})
    a = compute_routes(states, "A")
    assert dict(a.next_hops) == {"B": "B"} and a.valid_origins("A") == {"B"}


def test_link_to_router_without_link_state_is_ignored() -> None:
    states = parse_topology("A -1- B")
    states["A"] = LinkState(seq=2, peers={"B": 1, "X": 1})  # X never advertised anything
    assert compute_routes(states, "A").reachable == {"B"}


def test_tie_break_uses_smallest_first_hop_over_all_equal_paths() -> None:
    """
        S -1- B -1- P -1- D
        S -1- A -1- Q -1- D

    S's tree reaches D through P (P < Q), but the next hop is the smallest first hop of any
    least-cost path: A. That is also S's parent in D's tree, so every router agrees.
    """
    art = """
        S -1- B -1- P -1- D
        S -1- A -1- Q -1- D
    """
    s = routes_of(art, "S")
    assert s.next_hops["D"] == "A"
    assert s.costs["D"] == 3
    d = routes_of(art, "D")
    assert d.next_hops["S"] == "P"  # from D: first hops P and Q, P < Q
    a = routes_of(art, "A")
    assert a.valid_origins("D") == {"S"}
    b = routes_of(art, "B")
    assert b.valid_origins("D") == frozenset()  # S's traffic to D goes through A, not B


def test_ties_do_not_depend_on_insertion_order() -> None:
    """networkx breaks ties by insertion order; we break them by id (architecture rule 9)."""
    art = """
        S -1- Z -1- T
        S -1- M -1- T
        S -1- A -1- T
    """
    states = parse_topology(art)
    backwards = dict(reversed(list(states.items())))
    for mapping in (states, backwards):
        s = compute_routes(mapping, "S")
        assert s.next_hops["T"] == "A"
        assert compute_routes(mapping, "A").valid_origins("T") == {"S"}
        assert compute_routes(mapping, "Z").valid_origins("T") == frozenset()


def test_alone_or_unknown() -> None:
    alone = compute_routes({}, "A")
    assert alone.reachable == frozenset() and alone.radius == 0
    assert alone.valid_origins("A") == frozenset()
    assert alone.upstream("A", "B") is None
    missing = compute_routes(parse_topology("B -1- C"), "A")  # A has no link state
    assert missing.reachable == frozenset()


def test_same_as_and_inputs_are_not_mutated() -> None:
    states = parse_topology("A -1- B -1- C")
    copy = dict(states)
    first = compute_routes(states, "A")
    assert first.valid_origins("A") == {"B", "C"}
    assert states == copy
    assert first.same_as(compute_routes(copy, "A"))
    assert not first.same_as(compute_routes(copy, "B"))
    assert not first.same_as(compute_routes(parse_topology("A -2- B -1- C"), "A"))
    with pytest.raises(TypeError):
        first.next_hops["C"] = "C"  # type: ignore[index]


def test_routes_differ_when_only_valid_origins_do() -> None:
    r"""
        M -1- O         O-D costs 5, then 1: O stops sending to D through M. Nothing changes
         \    |         in M's own paths, but its valid origins for D do, so the routes are
          1-- D         not the same.
    """
    before = routes_of("M -1- O -5- D -1- M", "M")
    after = routes_of("M -1- O -1- D -1- M", "M")
    assert dict(before.next_hops) == dict(after.next_hops) and dict(before.costs) == dict(after.costs)
    assert before.valid_origins("D") == {"O"} and after.valid_origins("D") == frozenset()
    assert not before.same_as(after)
    assert before.same_as(routes_of("D -1- M -1- O -5- D", "M"))
    assert before.same_as(routes_of("M -1- O -5- D -1- M\nX -1- Y", "M"))  # unreachable: moot


def test_link_state_validation() -> None:
    with pytest.raises(ValueError):
        LinkState(seq=1, peers={"": 1})
    for bad in (0, -1, COST_MAX + 1, True, 1.5):
        with pytest.raises(ValueError):
            LinkState(seq=1, peers={"B": bad})  # type: ignore[dict-item]
    state = LinkState(seq=3, peers={"C": 2, "B": 1})
    assert list(state.peers) == ["B", "C"]
    assert state == LinkState(seq=3, peers={"B": 1, "C": 2})
    assert hash(state) == hash(LinkState(seq=3, peers={"B": 1, "C": 2}))
    with pytest.raises(AttributeError):
        state.seq = 4  # type: ignore[misc]


def test_art_parser_rejects_nonsense() -> None:
    for bad in ("A -1-", "A B", "A -x- B", "A -1- A", "A -1/2-> B"):
        with pytest.raises(ValueError):
            parse_topology(bad)
