"""Properties of route computation on random graphs (hypothesis), checked against a brute-force
reference (tests/support/topology_graphs.py) that shares no code with topology/routes.py or
topology/graph.py beyond their input type, LinkState:

- the routes do not depend on the order in which the link-state mapping was built;
- following next hops from any router reaches the destination at exactly costs[D], and the
  next hop is the smallest-id neighbour on a least-cost path (so every router agrees: the
  next hop of X to D is X's parent in D's tree);
- hops and radius describe the paths by which traffic reaches me;
- valid origins and `upstream` match the canonical paths, and multicast forwarded with them
  reaches every target exactly once, with no router receiving a copy twice.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from topology.graph import LinkState
from topology.routes import Routes, compute_routes

from .support.topology_graphs import Reference, topologies


def all_routes(states: dict[str, LinkState]) -> dict[str, Routes]:
    return {rid: compute_routes(states, rid) for rid in states}


def snapshot(routes: Routes, ids: list[str]) -> tuple[object, ...]:
    origins = tuple((d, routes.valid_origins(d)) for d in ids)
    return dict(routes.next_hops), dict(routes.costs), dict(routes.hops), routes.radius, origins


@given(topologies(), st.randoms(use_true_random=False))
def test_routes_do_not_depend_on_mapping_order(states: dict[str, LinkState], rnd: object) -> None:
    items = list(states.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    shuffled: dict[str, LinkState] = {}
    for rid, state in items:
        peers = list(state.peers.items())
        rnd.shuffle(peers)  # type: ignore[attr-defined]
        shuffled[rid] = LinkState(seq=state.seq, peers=dict(peers))
    ids = sorted(states)
    for rid in ids:
        assert snapshot(compute_routes(states, rid), ids) == snapshot(compute_routes(shuffled, rid), ids)


@given(topologies())
def test_next_hops_follow_least_cost_paths(states: dict[str, LinkState]) -> None:
    ref = Reference(states)
    routes = all_routes(states)
    for x, rx in routes.items():
        assert set(rx.next_hops) == {d for d in ref.ids if ref.reachable(x, d)}
        for d, hop in rx.next_hops.items():
            # The next hop is the smallest-id neighbour on some least-cost path: the same rule
            # on every router, so X's next hop is X's parent in D's tree.
            assert hop == ref.next_hop(x, d)
            assert rx.costs[d] == ref.dist[x][d]
            walk, cost = [x], 0
            while walk[-1] != d:
                here = walk[-1]
                step = routes[here].next_hops[d]
                cost += ref.edges[here][step]
                walk.append(step)
                assert len(walk) <= len(ref.ids), "forwarding loop"
            assert cost == rx.costs[d]
            assert routes[d].costs[x] == rx.costs[d]  # costs are symmetric


@given(topologies())
def test_hops_and_radius_describe_paths_towards_me(states: dict[str, LinkState]) -> None:
    ref = Reference(states)
    for me, routes in all_routes(states).items():
        expected = {o: len(ref.path(o, me)) - 1 for o in ref.ids if ref.reachable(o, me)}
        assert dict(routes.hops) == expected
        assert routes.radius == max(expected.values(), default=0)


@given(topologies())
def test_valid_origins_and_upstream_match_canonical_paths(states: dict[str, LinkState]) -> None:
    ref = Reference(states)
    for me, routes in all_routes(states).items():
        for d in ref.ids:
            if d == me:
                expected = frozenset(o for o in ref.ids if ref.reachable(o, me))
            else:
                expected = ref.valid_origins(me, d) if ref.reachable(me, d) else frozenset()
            assert routes.valid_origins(d) == expected
            for o in ref.ids:
                up = routes.upstream(d, o)
                if o in expected:
                    path = ref.path(o, d)
                    assert up == path[path.index(me) - 1]
                    assert routes.is_valid_origin(d, o)
                else:
                    assert up is None


def multicast(routes: dict[str, Routes], origin: str, targets: frozenset[str], check_upstream: bool) -> tuple[dict[str, int], dict[str, int]]:
    """Forward one message from `origin` to the routers in `targets` the way the core does:
    at each router, one copy per distinct next hop of the targets for which the ingress router
    is a valid origin (reference §2.8), delivering locally when I am a target. Returns
    (deliveries per router, copies received per router)."""
    delivered: dict[str, int] = {}
    received: dict[str, int] = {}
    queue: list[tuple[str, str | None]] = [(origin, None)]  # (router, neighbour it came from)
    while queue:
        here, came_from = queue.pop()
        r = routes[here]

        def accepted(dest: str) -> bool:
            if came_from is None:
                return True
            if check_upstream:
                return r.upstream(dest, origin) == came_from
            return r.is_valid_origin(dest, origin)

        if here in targets and accepted(here):
            delivered[here] = delivered.get(here, 0) + 1
        hops = {r.next_hops[d] for d in targets if d != here and d in r.next_hops and accepted(d)}
        for hop in sorted(hops):
            received[hop] = received.get(hop, 0) + 1
            assert sum(received.values()) <= len(routes) ** 2, "multicast storm"
            queue.append((hop, here))
    return delivered, received


@given(topologies(min_size=2), st.data())
def test_multicast_reaches_every_target_exactly_once(states: dict[str, LinkState], data: st.DataObject) -> None:
    ref = Reference(states)
    routes = all_routes(states)
    origin = data.draw(st.sampled_from(ref.ids))
    targets = frozenset(data.draw(st.lists(st.sampled_from(ref.ids), unique=True)))
    reachable = {t for t in targets if t == origin or ref.reachable(origin, t)}
    for check_upstream in (False, True):
        delivered, received = multicast(routes, origin, targets, check_upstream)
        assert delivered == dict.fromkeys(reachable, 1)
        # Canonical paths from one origin never re-merge once they part (both would have taken
        # the smaller first hop), so no router even receives a copy twice.
        assert all(count == 1 for count in received.values())
        on_paths = {m for t in reachable - {origin} for m in ref.path(origin, t)[1:]}
        assert set(received) == on_paths


@given(topologies())
def test_bulk_valid_origins_match_one_destination_at_a_time(states: dict[str, LinkState]) -> None:
    """all_valid_origins() skips the Dijkstra of destinations no neighbour reaches through me."""
    for me in states:
        bulk = compute_routes(states, me).all_valid_origins()
        single = compute_routes(states, me)
        assert bulk == {d: single.valid_origins(d) for d in single.next_hops}
        assert set(bulk) == set(single.reachable)


@given(topologies())
def test_costs_and_reachability_agree_with_networkx(states: dict[str, LinkState]) -> None:
    """networkx's Dijkstra over the same graph (build_graph) is the reference for costs and
    reachability; our own Dijkstra adds only the id tie-breaks networkx does not make."""
    import networkx as nx

    from topology.graph import build_graph

    graph = build_graph(states)
    for me in states:
        routes = compute_routes(states, me)
        expected = nx.single_source_dijkstra_path_length(graph, me, weight="cost") if me in graph else {me: 0}
        assert dict(routes.costs) == {d: c for d, c in expected.items() if d != me}
        for dest, hop in routes.next_hops.items():
            # the next hop starts some least-cost path: cost(me, hop) + dist(hop, dest) == dist(me, dest)
            via = graph[me][hop]["cost"] + nx.dijkstra_path_length(graph, hop, dest, weight="cost")
            assert via == expected[dest]
