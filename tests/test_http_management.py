"""The HTTP/JSON management face, /metrics and /healthz, against an in-process router.

Everything goes over real HTTP (Hypercorn on 127.0.0.1, urllib as the client): collections with
paging, entities with ETags (304 on If-None-Match, 409 on a stale If-Match), create/update/delete
of an address rule and of a listener (a created listener accepts AMQP connections at once, a
deleted one refuses new ones while the connections it accepted carry on), the error statuses,
Prometheus metrics that move with traffic, and health during a graceful shutdown.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED
from router.management.http import ManagementApp
from router.net.client import Client, connect

from .support.management import MEDIA_TYPE, managed_router, management_config, metric_samples

ADDRESS = "/management/address"


async def _traffic(client: Client, address: str, count: int) -> None:
    receiver = await client.open_receiver(address, credit=count)
    sender = await client.open_sender(address)
    for i in range(count):
        tracker = await sender.start_send(Message.value(i))
        receiver.accept(await receiver.receive())
        await tracker.wait()


async def test_discovery_types_collections_and_entities() -> None:
    async with managed_router() as router:
        root = await router.http("GET", "/management")
        assert root.status == 200 and root.headers["content-type"].startswith(MEDIA_TYPE)
        collections = root.json["collections"]
        assert {"entities", "listener", "router.address", "connection", "router.config.address"} <= set(collections)
        types = await router.http("GET", "/management/types")
        assert "org.apache.qpid.dispatch.listener" in types.json
        listeners = await router.http("GET", "/management/listener")
        assert listeners.status == 200 and listeners.headers["content-type"] == f"{MEDIA_TYPE}; type=entity-collection"
        (amqp,) = listeners.json
        assert amqp["name"] == "amqp" and amqp["boundPort"] == router.amqp_port
        # Long and short type names, name or identity, '/' in a key encoded or not.
        for path in ("/management/listener/amqp", "/management/org.apache.qpid.dispatch.listener/listener/amqp",
                     "/management/listener/listener%2Famqp"):  # fmt: skip
            entity = await router.http("GET", path)
            assert entity.status == 200 and entity.json == amqp, path
            assert entity.headers["etag"].startswith('"')
        (info,) = (await router.http("GET", "/management/router")).json
        assert info["id"] == router.id
        head = await router.http("HEAD", "/management/listener/amqp")
        assert head.status == 200 and head.body == b"" and head.headers["etag"] == entity.headers["etag"]


async def test_paging_with_top_and_skip() -> None:
    async with managed_router() as router:
        for i in range(5):
            created = await router.http("POST", ADDRESS, {"prefix": f"page{i}", "distribution": "closest"})
            assert created.status == 201
        everything = (await router.http("GET", ADDRESS)).json
        assert [e["prefix"] for e in everything] == [f"page{i}" for i in range(5)]
        page = await router.http("GET", ADDRESS + "?$top=2&$skip=1")
        assert page.status == 200 and page.json == everything[1:3]
        encoded = await router.http("GET", ADDRESS + "?%24top=1&%24skip=4")
        assert encoded.json == everything[4:]
        assert (await router.http("GET", ADDRESS + "?$skip=10")).json == []
        assert (await router.http("GET", ADDRESS + "?$top=x")).status == 400
        assert (await router.http("GET", ADDRESS + "?$skip=-1")).status == 400
        assert (await router.http("GET", "/management/entities?$top=1")).json[0]["type"] == "org.apache.qpid.dispatch.router"


async def test_address_rule_create_update_delete_with_etags() -> None:
    async with managed_router() as router:
        created = await router.http("POST", ADDRESS, {"prefix": "orders", "distribution": "closest"})
        assert created.status == 201 and created.json["distribution"] == "closest"
        location, tag = created.headers["location"], created.headers["etag"]
        read = await router.http("GET", location)
        assert read.json == created.json and read.headers["etag"] == tag
        assert (await router.http("GET", location, headers={"If-None-Match": tag})).status == 304
        assert (await router.http("GET", location, headers={"If-None-Match": '"other"'})).status == 200
        # The entity as read, one attribute changed, sent back with its tag: only the change counts.
        updated = await router.http("PUT", location, {**read.json, "distribution": "multicast"}, headers={"If-Match": tag})
        assert updated.status == 200 and updated.json["distribution"] == "multicast"
        new_tag = updated.headers["etag"]
        assert new_tag != tag
        stale = await router.http("PUT", location, {"distribution": "balanced"}, headers={"If-Match": tag})
        assert stale.status == 409 and stale.json == updated.json and stale.headers["etag"] == new_tag
        assert (await router.http("DELETE", location, headers={"If-Match": tag})).status == 409
        assert (await router.http("GET", location)).json["distribution"] == "multicast"
        deleted = await router.http("DELETE", location, headers={"If-Match": new_tag})
        assert deleted.status == 204 and deleted.body == b""
        assert (await router.http("GET", location)).status == 410  # the agent remembers it
        # The generic factory: POST to /entities with the type in the body.
        generic = await router.http("POST", "/management/entities", {"type": "address", "pattern": "a.*"})
        assert generic.status == 201 and generic.json["type"] == "org.apache.qpid.dispatch.router.config.address"


async def test_collection_etag_changes_with_content() -> None:
    async with managed_router() as router:
        first = await router.http("GET", ADDRESS)
        tag = first.headers["etag"]
        assert (await router.http("GET", ADDRESS, headers={"If-None-Match": tag})).status == 304
        await router.http("POST", ADDRESS, {"prefix": "x"})
        again = await router.http("GET", ADDRESS, headers={"If-None-Match": tag})
        assert again.status == 200 and again.headers["etag"] != tag


async def test_listener_created_at_run_time_accepts_and_deleted_refuses() -> None:
    async with managed_router() as router:
        created = await router.http("POST", "/management/listener", {"name": "extra", "host": "127.0.0.1", "port": 0})
        assert created.status == 201
        port = created.json["boundPort"]
        assert port and port != router.amqp_port
        async with connect("127.0.0.1", port) as survivor:
            receiver = await survivor.open_receiver("survives", credit=5)
            sender = await survivor.open_sender("survives")
            deleted = await router.http("DELETE", "/management/listener/extra")
            assert deleted.status == 204
            with pytest.raises(OSError):
                await trio.open_tcp_stream("127.0.0.1", port)
            # Deleting a listener stops new connections only: this one still routes.
            tracker = await sender.start_send(Message.value("still here"))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            assert delivery.message.body_value == "still here"
            assert await tracker.wait() == ACCEPTED
        assert (await router.http("GET", "/management/listener/extra")).status == 410
        # An update re-opens the listener with the new settings.
        again = await router.http("POST", "/management/listener", {"name": "again", "port": 0})
        moved = await router.http("PUT", "/management/listener/again", {"linkCapacity": 10})
        assert moved.status == 200 and moved.json["linkCapacity"] == 10
        async with connect("127.0.0.1", moved.json["boundPort"]):
            pass
        assert again.json["boundPort"]


async def test_error_statuses() -> None:
    async with managed_router() as router:
        assert (await router.http("GET", "/management/nosuch")).status == 404
        assert (await router.http("GET", "/management/listener/nosuch")).status == 404
        missing = await router.http("GET", "/nothing/here")
        assert missing.status == 404 and missing.json["status"] == 404
        bad_attribute = await router.http("POST", ADDRESS, {"prefix": "x", "bogus": 1})
        assert bad_attribute.status == 400 and "bogus" in bad_attribute.json["description"]
        bad_value = await router.http("POST", ADDRESS, {"prefix": "x", "distribution": "sideways"})
        assert bad_value.status == 400
        bad_json = await router.http("POST", ADDRESS, raw=b"{not json", headers={"Content-Type": MEDIA_TYPE})
        assert bad_json.status == 400
        not_a_map = await router.http("POST", ADDRESS, raw=b"[1]", headers={"Content-Type": "application/json"})
        assert not_a_map.status == 400
        wrong_type = await router.http("POST", ADDRESS, raw=b"prefix=x", headers={"Content-Type": "text/plain"})
        assert wrong_type.status == 415
        no_type = await router.http("PUT", "/management/listener/amqp", raw=b"{}")
        assert no_type.status == 415
        assert (await router.http("PATCH", "/management/listener/amqp", raw=b"{}",
                                  headers={"Content-Type": MEDIA_TYPE})).status == 405  # fmt: skip
        not_allowed = await router.http("DELETE", "/management/router/" + router.id)
        assert not_allowed.status == 405
        assert (await router.http("POST", "/metrics", raw=b"", headers={"Content-Type": MEDIA_TYPE})).status == 405
        taken = await router.http("POST", "/management/listener", {"name": "clash", "port": router.amqp_port})
        assert taken.status == 409 and "clash" in taken.json["description"]


async def test_metrics_change_after_traffic() -> None:
    async with managed_router() as router:
        before = await router.http("GET", "/metrics")
        assert before.status == 200 and before.headers["content-type"].startswith("text/plain")
        first = metric_samples(before.body.decode())
        assert first[("amqp_router_info", (("mode", "standalone"), ("router_id", router.id), ("version", first_version(first))))] == 1
        async with connect("127.0.0.1", router.amqp_port) as client:
            # Scraped while the links are up: an address with no links left is forgotten.
            await _traffic(client, "metered", 7)
            after = metric_samples((await router.http("GET", "/metrics")).body.decode())
        for counter in ("amqp_router_deliveries_ingress_total", "amqp_router_deliveries_egress_total",
                        "amqp_router_deliveries_accepted_total"):  # fmt: skip
            assert after[(counter, ())] >= first[(counter, ())] + 7, counter
        assert after[("amqp_router_address_deliveries_ingress_total", (("address", "metered"),))] == 7
        assert after[("amqp_router_address_deliveries_egress_total", (("address", "metered"),))] == 7
        assert ("process_resident_memory_bytes", ()) in after
        # A connection open now shows in the gauges.
        async with connect("127.0.0.1", router.amqp_port):
            now = metric_samples((await router.http("GET", "/metrics")).body.decode())
            assert now[("amqp_router_connections", ())] >= 1


async def test_busy_polls_are_metered() -> None:
    config = management_config()
    config = config.model_copy(update={"router": config.router.model_copy(update={"busy_poll_us": 100})})
    async with managed_router(config) as router:
        first = metric_samples((await router.http("GET", "/metrics")).body.decode())
        async with connect("127.0.0.1", router.amqp_port) as client:
            await _traffic(client, "polled", 5)
        after = metric_samples((await router.http("GET", "/metrics")).body.decode())
        polls = ("amqp_router_busy_polls_caught_total", "amqp_router_busy_polls_missed_total")
        assert sum(after[(name, ())] for name in polls) > sum(first[(name, ())] for name in polls)
        assert after[("amqp_router_busy_poll_seconds_total", ())] > first[("amqp_router_busy_poll_seconds_total", ())]
    # Off (the default): the counters are there and stay 0.
    async with managed_router() as router:
        async with connect("127.0.0.1", router.amqp_port) as client:
            await _traffic(client, "unpolled", 5)
        off = metric_samples((await router.http("GET", "/metrics")).body.decode())
        assert off[("amqp_router_busy_polls_caught_total", ())] == off[("amqp_router_busy_poll_seconds_total", ())] == 0


def first_version(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> str:
    (labels,) = [dict(labels) for name, labels in samples if name == "amqp_router_info"]
    return labels["version"]


async def test_healthz_ok_while_running_and_503_while_stopping() -> None:
    async with managed_router() as router:
        health = await router.http("GET", "/healthz")
        assert health.status == 200 and health.json == {"status": "ok"}
        # A peer that never speaks AMQP keeps the graceful stop waiting for its close (up to
        # the flush limit): meanwhile the HTTP side is still up and reports the stop.
        silent = await trio.open_tcp_stream("127.0.0.1", router.amqp_port)
        await router.http("GET", "/healthz")  # the connection is accepted by now
        router.server.shutdown()
        stopping = await router.http("GET", "/healthz")
        assert stopping.status == 503 and stopping.json["status"] == "shutting down"
        await silent.aclose()


def test_the_mapping_answers_without_a_server() -> None:
    """handle() is a plain function of the request: no agent call for health, JSON errors."""
    app = ManagementApp(agent=None, healthy=lambda: False)  # type: ignore[arg-type]
    answer = app.handle("GET", "/healthz", "", {}, b"")
    assert answer.status == 503 and json.loads(answer.body) == {"status": "shutting down"}
    assert app.handle("GET", "/metrics", "", {}, b"").status == 404  # no Metrics: no /metrics
    root: Any = json.loads(app.handle("GET", "/", "", {}, b"").body)
    assert root["management"] == "/management"


async def test_every_status_code_the_issue_names() -> None:
    """200, 201, 204, 304, 400, 404, 406, 409, 410 and 415 over HTTP, each from the request
    that should produce it (the AMQP face's are in test_management_proton.py)."""
    async with managed_router() as router:
        statuses = {}
        listed = await router.http("GET", ADDRESS)
        statuses[200] = listed.status
        created = await router.http("POST", ADDRESS, {"name": "codes", "prefix": "codes"})
        statuses[201] = created.status
        location, tag = created.headers["location"], created.headers["etag"]
        statuses[304] = (await router.http("GET", location, headers={"If-None-Match": tag})).status
        statuses[400] = (await router.http("POST", ADDRESS, {"prefix": "x", "pattern": "y"})).status
        statuses[404] = (await router.http("GET", "/management/address/nobody")).status
        refused = await router.http("POST", ADDRESS, {"name": "html", "prefix": "h"}, headers={"Accept": "text/html"})
        statuses[406] = refused.status
        assert (await router.http("GET", "/management/address/html")).status == 404  # refused before acting
        assert (await router.http("GET", ADDRESS, headers={"Accept": "text/html, application/json;q=0.5"})).status == 200
        assert (await router.http("GET", ADDRESS, headers={"Accept": "application/json;q=0"})).status == 406
        assert (await router.http("GET", "/metrics", headers={"Accept": "text/plain"})).status == 200
        changed = await router.http("PUT", location, {"distribution": "closest"}, headers={"If-Match": tag})
        assert changed.status == 200
        statuses[409] = (await router.http("PUT", location, {"distribution": "multicast"}, headers={"If-Match": tag})).status
        statuses[204] = (await router.http("DELETE", location)).status
        statuses[410] = (await router.http("GET", location)).status
        statuses[415] = (await router.http("POST", ADDRESS, raw=b"<a/>", headers={"Content-Type": "application/xml"})).status
        assert statuses == {code: code for code in statuses}
