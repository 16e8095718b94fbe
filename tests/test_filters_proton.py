"""Source filters with python-qpid-proton receivers through a router over sockets: the JMS
selector (`proton.reactor.Selector`), the legacy direct, topic and headers bindings and no-local
(described filter maps built with proton's Described/symbol/ulong), invalid selectors, and
hostile filter-sets (wrong types, huge maps): each refused clearly, the router going on."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from proton import Delivery, Described, Message, Timeout, symbol, ulong
from proton.reactor import Filter, Selector
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached

from router.config.models import AddressConfig

from .support.interop import run_in_thread
from .support.management import managed_router, management_config

pytestmark = pytest.mark.interop

TIMEOUT_S = 10.0
SELECTOR = symbol("apache.org:selector-filter:string")
DIRECT = symbol("apache.org:legacy-amqp-direct-binding:string")
TOPIC_CODE = ulong(0x0000468C_00000001)  # the topic binding by its numeric descriptor
HEADERS = symbol("apache.org:legacy-amqp-headers-binding:map")
NO_LOCAL = symbol("apache.org:no-local-filter:list")


def _config() -> Any:
    config = management_config("filters")
    return config.model_copy(update={"addresses": (AddressConfig(prefix="mc", distribution="multicast"),)})


def _outcomes(conn: Any, sender: Any, receiver: Any, *messages: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Send each message (without blocking: the receiver on this thread accepts), take what the
    receiver gets, then the outcome of each: 'accepted' or 'released' (what no consumer's filter
    passes is released by the router)."""
    deliveries = []
    for fields in messages:
        deliveries.append(Message(**fields).send(sender.link))
    got: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not all(d.settled for d in deliveries) and time.monotonic() < deadline:
        try:  # (polled: the deliveries the router releases settle with nothing to receive)
            conn.wait(lambda: all(d.settled for d in deliveries), timeout=0.05)  # the sender's side
        except Timeout:
            pass
        try:
            message = receiver.receive(timeout=0.05)
        except Timeout:
            continue
        receiver.accept()
        got.append(message.body)
    names = {Delivery.ACCEPTED: "accepted", Delivery.RELEASED: "released"}
    return [names.get(d.remote_state, str(d.remote_state)) for d in deliveries], got


def every_filter_type(port: int) -> dict[str, Any]:
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    other = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        out: dict[str, Any] = {"offered": [str(c) for c in conn.conn.remote_offered_capabilities or []]}
        selected = conn.create_receiver("sel", options=Selector("color = 'red' AND JMSPriority > 4 AND amqp.subject LIKE 'o%'"))
        tx = other.create_sender("sel")
        out["selector"], out["selector_got"] = _outcomes(
            other, tx, selected,
            {"body": "hit", "properties": {"color": "red"}, "priority": 9, "subject": "order"},
            {"body": "low", "properties": {"color": "red"}, "priority": 1, "subject": "order"},
            {"body": "blue", "properties": {"color": "blue"}, "priority": 9, "subject": "order"})  # fmt: skip
        echo = selected.link.remote_source.filter
        echo.rewind()
        out["selector_echo"] = echo.get_object() if echo.next() is not None else None

        direct = conn.create_receiver("ex.direct", options=Filter({symbol("d"): Described(DIRECT, "orders.eu")}))
        out["direct"], out["direct_got"] = _outcomes(
            other, other.create_sender("ex.direct"), direct,
            {"body": "eu", "subject": "orders.eu"}, {"body": "us", "subject": "orders.us"})  # fmt: skip

        topic = conn.create_receiver("ex.topic", options=Filter({symbol("t"): Described(TOPIC_CODE, "*.stock.#")}))
        out["topic"], out["topic_got"] = _outcomes(
            other, other.create_sender("ex.topic"), topic,
            *({"body": s, "subject": s} for s in ("usd.stock", "eur.stock.db", "stock.nasdaq")))  # fmt: skip

        headers = conn.create_receiver("ex.headers", options=Filter({symbol("h"): Described(
            HEADERS, {symbol("x-match"): symbol("all"), "color": "red", "size": None})}))  # fmt: skip
        out["headers"], out["headers_got"] = _outcomes(
            other, other.create_sender("ex.headers"), headers,
            {"body": "both", "properties": {"color": "red", "size": 2}}, {"body": "one", "properties": {"color": "red"}})

        mine = conn.create_receiver("mc.chat", options=Filter({symbol("nl"): Described(NO_LOCAL, [])}))
        own, _ = _outcomes(conn, conn.create_sender("mc.chat"), mine, {"body": "own"})
        theirs, got = _outcomes(other, other.create_sender("mc.chat"), mine, {"body": "other"})
        out["no_local"], out["no_local_got"] = own + theirs, got
        return out
    finally:
        conn.close()
        other.close()


async def test_every_filter_type_with_proton_receivers() -> None:
    async with managed_router(_config()) as router:
        got = await run_in_thread(every_filter_type, router.amqp_port, timeout_s=6 * TIMEOUT_S)
    assert {"APACHE.ORG:LEGACY_AMQP_EXCHANGE_FILTERS", "APACHE.ORG:NO_LOCAL", "APACHE.ORG:SELECTOR"} <= set(got["offered"])
    assert got["selector"] == ["accepted", "released", "released"] and got["selector_got"] == ["hit"]
    assert got["selector_echo"] == {
        symbol("selector"): Described(SELECTOR, "color = 'red' AND JMSPriority > 4 AND amqp.subject LIKE 'o%'")}
    assert got["direct"] == ["accepted", "released"] and got["direct_got"] == ["eu"]
    assert got["topic"] == ["accepted", "accepted", "released"] and got["topic_got"] == ["usd.stock", "eur.stock.db"]
    assert got["headers"] == ["accepted", "released"] and got["headers_got"] == ["both"]
    assert got["no_local"] == ["released", "accepted"] and got["no_local_got"] == ["other"]


def _refusal(conn: Any, address: str, option: Any) -> str:
    try:  # (each its own link name: proton names a link by its address)
        conn.create_receiver(address, name=f"hostile-{next(_names)}", options=option)
    except LinkDetached as exc:
        condition = exc.link.remote_condition
        return f"{condition.name}: {condition.description}"
    return "attached"


_names = itertools.count()


def _not_described(port: int) -> str:
    """A filter-set value that is not a described filter breaks messaging §3.5.8: the attach
    cannot be decoded, and the connection is closed with amqp:decode-error."""
    bad = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        bad.create_receiver("q", options=Filter({symbol("x"): "not described"}))
    except ConnectionClosed as exc:
        condition = exc.connection.remote_condition
        return f"{condition.name}: {condition.description}"
    finally:
        try:
            bad.close()
        except Exception:  # proton: already closed by the peer
            pass
    return "attached"


def hostile_filter_sets(port: int) -> dict[str, Any]:
    not_described = _not_described(port)
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        out = {
            "invalid": _refusal(conn, "q", Selector("color = = 'red'")),
            "long": _refusal(conn, "q", Selector("a = 1 OR " * 1000 + "a = 1")),
            "deep": _refusal(conn, "q", Selector("(" * 200 + "a" + ")" * 200)),
            "selector_int": _refusal(conn, "q", Filter({symbol("s"): Described(SELECTOR, 42)})),
            "direct_list": _refusal(conn, "q", Filter({symbol("d"): Described(DIRECT, ["x"])})),
            "headers_str": _refusal(conn, "q", Filter({symbol("h"): Described(HEADERS, "x")})),
            "headers_huge": _refusal(conn, "q", Filter({symbol("h"): Described(
                HEADERS, {"x-match": symbol("any"), **{f"k{i}": i for i in range(1000)}})})),  # fmt: skip
            "many": _refusal(conn, "q", Filter({symbol(f"f{i}"): Described(DIRECT, "x") for i in range(200)})),
        }
        # The same connection goes on: a plain receiver and a sender still work.
        receiver = conn.create_receiver("q")
        delivery = Message(body="still served").send(conn.create_sender("q").link)
        out["after"] = receiver.receive(timeout=TIMEOUT_S).body
        receiver.accept()
        conn.wait(lambda: delivery.settled, timeout=TIMEOUT_S)
        out["outcome"] = delivery.remote_state == Delivery.ACCEPTED
        out["not_described"] = not_described
        return out
    finally:
        conn.close()


async def test_hostile_filter_sets_are_refused_and_the_router_goes_on() -> None:
    async with managed_router(_config()) as router:
        got = await run_in_thread(hostile_filter_sets, router.amqp_port, timeout_s=6 * TIMEOUT_S)
    assert got.pop("after") == "still served" and got.pop("outcome") is True
    assert got.pop("not_described") == "amqp:decode-error: source.filter value must be a described filter, got str"
    for name, refusal in got.items():
        assert refusal.startswith("amqp:invalid-field: "), (name, refusal)
    assert "position 8" in got["invalid"]
    assert "longer than" in got["long"] and "nested deeper" in got["deep"]
    assert "needs a string" in got["selector_int"] and "needs a string" in got["direct_list"]
    assert "needs a map" in got["headers_str"] and "more than" in got["headers_huge"]
    assert "at most" in got["many"]
