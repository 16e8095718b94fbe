"""Fuzzing what a peer router sends, in process (bench/fuzzpeer.py, bounded): mutated sessions of
an interior router on the inter-router listener, of an edge router on the edge listener, and of
an interior on the uplink of an edge router (seeds recorded on a fixed clock: bench/fuzzseeds.py),
each on a connection of its own to the fuzzed router, a fixed random seed, while a well-behaved
client sends on another connection.

Asserted per role: nothing escapes the engine or the core; once an input's connection is gone
the router holds nothing of it (its peer, neighbour, routes, routers, addresses, link routes,
held frames, a footprint of the core); no deadline stays in the past; a close the router sends
carries a condition the spec defines; most inputs get past the open; the well-behaved client's
messages all come back accepted. ROUTER_PEER_FUZZ_INPUTS (default 300) inputs per role, a few
seconds; bench/fuzz.py --peer runs hundreds of thousands.
"""

from __future__ import annotations

import os
import random
import traceback

import pytest

from bench.fuzz import GoodClient, Inputs
from bench.fuzzpeer import PeerTarget
from bench.fuzzpeerinputs import PeerInputs
from bench.fuzzseeds import Reads, edge_session, interior_session, uplink_session
from router.amqp import errors as E

INPUTS = int(os.environ.get("ROUTER_PEER_FUZZ_INPUTS", "300"))
SEED = 20240611
SESSIONS = {"router": interior_session, "edge": edge_session, "uplink": uplink_session}
SPEC_CONDITIONS = {v for k, v in vars(E).items() if k.isupper() and isinstance(v, str) and v.startswith("amqp:")}


def _target(kind: str, seed: Reads) -> tuple[PeerTarget, GoodClient]:
    target = PeerTarget(kind, seed)
    good = GoodClient(target.core, target.core.config)
    good.send(target.h.now)
    target.settle()
    target.rebase()
    return target, good


def test_the_seeds_are_the_same_every_time_and_go_through() -> None:
    for kind, session in SESSIONS.items():
        seed = session()
        assert seed == session(), kind
        target = PeerTarget(kind, seed)
        sink, far = target.mesh.clients[:2]
        before = (sink.got, far.outcomes_seen)
        assert target.run(seed) is None and target.held() == [], kind
        # Deliveries to `sink` (3 to one address, one streamed, one multicast) and the outcomes
        # of the deliveries to `far` the peer's consumer took.
        assert (sink.got - before[0], far.outcomes_seen - before[1] > 0) == (5, True), kind


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_mutated_peer_sessions_break_nothing_and_leave_nothing(kind: str) -> None:
    seed = SESSIONS[kind]()
    target, good = _target(kind, seed)
    inputs = PeerInputs(random.Random(SEED), [seed], Inputs(random.Random(SEED), []).refield)
    failures: list[str] = []
    for n in range(1, INPUTS + 1):
        reads = inputs.next()
        error = target.run(reads)
        if error is not None:
            failures.append(f"input {n}: " + "".join(traceback.format_exception(error))[-1500:])
        held = target.held(deep=n % 10 == 0 or n == INPUTS)
        if held:
            failures.append(f"input {n} left: {held}")
            target.rebase()
        if n % 100 == 0:
            good.send(target.h.now)
    good.pump(target.h.now)
    assert not failures, "\n".join(failures[:5])
    assert target.stuck == 0, "a deadline stayed in the past"
    conditions = {k.split(": ", 1)[1] for k in target.stats if k.startswith("closed: amqp:")}
    assert conditions <= SPEC_CONDITIONS
    assert target.stats["peer set up"] > INPUTS // 2, target.stats  # most get past the open
    assert good.sent == good.received == good.accepted >= INPUTS // 100 + 1
