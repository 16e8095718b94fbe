"""The attach reply names only what the router honours (messaging §3.5.3: the sending end sets
the filter actually in place): no filter, distribution mode, default outcome, durability or
capability the router does not apply is echoed. A python-qpid-proton receiver asking for a JMS
selector (and more) sees the selector, which the router applies, and nothing else it asked
for; a filter the router does not know is not echoed, so its receiver can detach instead of
trusting a filter that is not there; a sender's target is answered the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton import Data, Described, Terminus, symbol
from proton.reactor import DurableSubscription, Filter, LinkOption, Selector
from proton.utils import BlockingConnection

from .support.interop import run_in_thread
from .support.management import managed_router

pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0


class _AsksForEverything(LinkOption):
    """Source and target fields the router does not honour, set by the client."""

    def apply(self, link: Any) -> None:
        for terminus in (link.source, link.target):
            terminus.capabilities.put_array(False, Data.SYMBOL)
            terminus.capabilities.enter()
            terminus.capabilities.put_symbol(symbol("queue"))
            terminus.capabilities.exit()
            terminus.timeout = 60
        link.source.distribution_mode = Terminus.DIST_MODE_COPY
        link.source.outcomes.put_array(False, Data.SYMBOL)
        link.source.outcomes.enter()
        link.source.outcomes.put_symbol(symbol("amqp:accepted:list"))
        link.source.outcomes.exit()


def _data(d: Data) -> Any:
    d.rewind()
    return d.get_object() if d.next() is not None else None


def _terminus(t: Terminus) -> dict[str, Any]:
    return {
        "address": t.address, "durability": t.durability, "expiry": t.expiry_policy, "timeout": t.timeout,
        "dist": t.distribution_mode, "filter": _data(t.filter), "capabilities": _data(t.capabilities),
        "outcomes": _data(t.outcomes),
    }  # fmt: skip


def attach_and_look(port: int) -> dict[str, Any]:
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        selector = conn.create_receiver("orders", options=[Selector("color = 'red'"), _AsksForEverything()])
        other = conn.create_receiver("invoices", name="by-filter",
                                     options=[Filter({symbol("my-filter"): Described(symbol("example:my-filter"), "x > 1")}),
                                              DurableSubscription()])  # fmt: skip
        sender = conn.create_sender("orders", options=_AsksForEverything())
        sender.link.send(_message("blue"))  # not waiting for the outcomes: released, then accepted
        sender.link.send(_message("red"))
        got = selector.receive(timeout=TIMEOUT_S)
        selector.accept()
        return {
            "selector": _terminus(selector.link.remote_source),
            "filter": _terminus(other.link.remote_source),
            "target": _terminus(sender.link.remote_target),
            "delivered": got.body,
        }
    finally:
        conn.close()


def _message(color: str) -> Any:
    from proton import Message

    return Message(body=color, properties={"color": color})


async def test_receiver_sees_only_the_filters_in_force() -> None:
    async with managed_router() as router:
        got = await run_in_thread(attach_and_look, router.amqp_port, timeout_s=2 * TIMEOUT_S)
    selector = got["selector"]
    assert selector["filter"] == {symbol("selector"): Described(symbol("apache.org:selector-filter:string"), "color = 'red'")}
    assert list(selector["capabilities"].elements) == [symbol("APACHE.ORG:SELECTOR")]  # (apache-filters.xml)
    assert got["filter"]["filter"] is None  # an unknown filter: not applied, not claimed
    assert got["filter"]["capabilities"] is None
    for name in ("selector", "filter"):
        source = got[name]
        assert source["address"] == ("orders" if name == "selector" else "invoices")
        assert source["dist"] == Terminus.DIST_MODE_UNSPECIFIED
        assert source["durability"] == Terminus.NONDURABLE and source["timeout"] == 0
        assert source["expiry"] == Terminus.EXPIRE_WITH_LINK
        assert set(source["outcomes"]) == {"amqp:accepted:list", "amqp:rejected:list",
                                           "amqp:released:list", "amqp:modified:list"}  # fmt: skip
    target = got["target"]
    assert target["address"] == "orders" and target["capabilities"] is None and target["timeout"] == 0
    # And it is applied: the blue message does not reach the "red" selector.
    assert got["delivered"] == "red"
