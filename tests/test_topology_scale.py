"""A thousand routers on the topology simulator (router/testing/topology_scale.py): after a link
on a long path fails, every router converges to the routes of the new network within a bound on
protocol rounds and virtual time, with a bounded number of control messages. The clock is
virtual (5 ms per hop); what the test spends is CPU for the 1,000 route computations of the warm
start and about as many for the change. bench/topology.py reports the same run, and the link
coming back, on the random geometric graph."""

from __future__ import annotations

import random

from router.testing.topology_scale import build_network, converge, failing_link, preload, ring_of_rings, warm_network
from topology.config import TopologyConfig
from topology.messages import LinkStateUpdate
from topology.mobile import EMPTY_DIGEST
from topology.routes import compute_routes

ROUTERS = 1000


def test_a_thousand_routers_converge_after_a_link_on_a_long_path_fails() -> None:
    states = ring_of_rings(ROUTERS)
    config = TopologyConfig(ra_interval_s=600.0, remote_ls_max_age_s=1200.0)  # no periodic floods
    net = warm_network(states, config)
    a, b = failing_link(states)
    diameter = max(net.nodes[name].routes.radius for name in net.nodes)

    net.cut(a, b)
    down = converge(net)
    # The two ends re-advertise; every router learns both changes along a shortest path and
    # pulls the link states it lacks: a handful of passes over the diameter, never a storm.
    assert down["rounds"] <= 2 * diameter + 4, down
    assert down["virtual_s"] <= 0.5, down
    assert down["route_computations"] <= 2 * ROUTERS, down
    assert down["messages"].get("LSU", 0) <= 4 * ROUTERS, down
    assert down["messages"].get("RA", 0) <= 2 * len(net.links) * 3, down
    truth = net.truth()
    for name in random.Random(3).sample(sorted(net.nodes), 25):
        assert net.nodes[name].routes.same_as(compute_routes(truth, net.nodes[name].router_id))
    assert net.nodes[a].routes.next_hops[b] != b  # b is reached round the cut



def test_preload_leaves_what_the_lsus_of_a_cold_start_leave() -> None:
    """The warm start's shortcut is honest: on a small network, routers handed every link state
    by `preload` hold the same link states, routes and pending requests as routers that
    received one LSU per router."""
    states = ring_of_rings(30)
    config = TopologyConfig(ra_interval_s=600.0, remote_ls_max_age_s=1200.0)
    by_preload = warm_network(states, config)
    by_lsu = build_network(states, config)
    by_lsu.run_for(config.flux_period_s + 2 * config.ra_interval_flux_s)
    truth = by_lsu.truth()
    for name, node in sorted(by_lsu.nodes.items()):
        neighbour = next(iter(node.neighbours))
        for rid, state in truth.items():
            if rid != node.router_id:
                node.receive(neighbour, LinkStateUpdate(router_id=rid, instance=by_lsu.nodes[rid].instance,
                                                        link_state=state, mobile_seq=0, digest=EMPTY_DIGEST), by_lsu.now)  # fmt: skip
    by_lsu.run_for(1.0)
    for name in states:
        warm, cold = by_preload.nodes[name], by_lsu.nodes[name]
        assert warm.link_states() == cold.link_states()
        assert warm.routes.same_as(cold.routes)
        assert not warm.routes_pending and not cold.routes_pending
        assert {r: (i.ls_seq, i.mobile_seq, i.reachable) for r, i in warm.routers().items()} == {
            r: (i.ls_seq, i.mobile_seq, i.reachable) for r, i in cold.routers().items()
        }
    assert preload  # the shortcut under test
