"""Fallback destinations with python-qpid-proton clients over sockets (docs/brokers.md,
"Fallback destinations"): a receiver with the source capability qd.fallback keeps what is sent
while the address has no consumer; a sender with the target capability qd.fallback (a shovel
emptying the store) gets credit only once a regular consumer is there, and what it sends goes to
that consumer, never back to the fallback. The capability is echoed where it is honoured."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Delivery, Message

from .support.interop import run_in_thread
from .support.router_proton import Capability
from .test_policy_proton import TIMEOUT_S, connect, send
from .tlssupport import serving

pytestmark = pytest.mark.interop

CONFIG = {
    "router": {"id": "fallback"},
    "listeners": [{"name": "amqp", "port": 0}],
    "addresses": [{"prefix": "orders", "enable_fallback": True}],
}


def _capabilities(terminus: Any) -> list[str]:
    data = terminus.capabilities
    data.rewind()
    return [str(c) for c in (data.get_object() or [])] if data.next() else []


async def test_a_fallback_keeps_messages_and_a_fallback_sender_drains_to_consumers_only() -> None:
    async with serving(CONFIG) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            conn = connect(port)  # (one connection: a blocking client pumps only the one it waits on)
            try:
                kept = conn.create_receiver("orders", credit=10, options=Capability("qd.fallback"))
                sender = conn.create_sender("orders")
                # (send() takes and accepts each message at its receiver, then waits for the outcome)
                stored = send(conn, sender, Message(address="orders", body="kept"), kept)
                drain = conn.create_sender("orders", name="drain", options=Capability("qd.fallback", "target"))
                # (a message on the same connection and its outcome: any credit the router gave
                # the drain would have arrived before it)
                also = send(conn, sender, Message(address="orders", body="also kept"), kept)
                credit_alone = drain.link.credit
                consumer = conn.create_receiver("orders", credit=10, name="consumer")
                conn.wait(lambda: drain.link.credit > 0, timeout=TIMEOUT_S)
                drained = send(conn, drain, Message(address="orders", body="from the store"), consumer)
                return {
                    "stored": (stored.remote_state, also.remote_state),
                    "echoed": (_capabilities(kept.link.remote_source), _capabilities(drain.link.remote_target)),
                    "drain credit alone": credit_alone, "drained": drained.remote_state,
                    "fallback got more": kept.link.queued,
                }  # fmt: skip
            finally:
                conn.close()

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
    assert got == {
        "stored": (Delivery.ACCEPTED, Delivery.ACCEPTED),
        "echoed": (["qd.fallback"], ["qd.fallback"]),
        "drain credit alone": 0, "drained": Delivery.ACCEPTED,
        "fallback got more": 0,
    }  # fmt: skip
