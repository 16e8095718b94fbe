"""A band's window follows the bytes held for it (router/core/bandwindow.py): shut once more
than its bound waits, open again at half of it, never shut for a session that carries the
control link, and what the peer last heard always says which (transport §2.5.6)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.performatives import Flow
from router.config.models import Listener
from router.core.bandwindow import control_session, count_held, data_session
from router.core.connections import ConnState
from router.core.delivery import maps_of
from router.core.touched import Touched
from router.testing.enginepair import bodies, connected_pair

BOUND = 1 << 20  # the connection's read_high_water_bytes: a band shuts past 1/8 of it


def _band() -> tuple[Any, Any]:
    pair, cs, ss = connected_pair()
    state = ConnState(pair.server, Listener(role="inter-router", read_high_water_bytes=BOUND))
    data_session(ss, state)
    pair.pump()
    pair.wire_to_client.clear()
    return pair, ss


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-BOUND // 4, BOUND // 4), max_size=40))
def test_the_window_shuts_above_the_bound_and_opens_at_half_of_it(steps: list[int]) -> None:
    pair, ss = _band()
    touched = Touched()
    shut_above = maps_of(ss).shut_above
    assert shut_above == BOUND // 8
    held = 0
    shut = False
    changes = 0
    for step in steps:
        step = max(step, -held)  # (no more is let go than is held)
        held += step
        count_held(ss, step, touched)
        was = shut
        if held > shut_above:
            shut = True
        elif held <= shut_above // 2:
            shut = False
        changes += was != shut
        assert maps_of(ss).held_bytes == held
        assert ss.window_shut == shut
    pair.pump()
    flows = bodies(b"".join(pair.wire_to_client), Flow)
    announced_shut = flows[-1].incoming_window == 0 if flows else False
    assert announced_shut == shut
    assert len(flows) == changes  # one flow per change, none between


def test_a_session_that_carries_the_control_link_is_never_shut() -> None:
    pair, cs, ss = connected_pair()
    state = ConnState(pair.server, Listener(role="inter-router", read_high_water_bytes=BOUND))
    control_session(ss)
    data_session(ss, state)  # (an older router: its default band shares the control link's session)
    count_held(ss, 4 * BOUND, Touched())
    assert not ss.window_shut
