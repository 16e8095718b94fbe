"""AMQP Management WD14 at the management node (HTTP over AMQP), sans-IO: discovery, collections,
self addresses, every status code the draft names, ETags, tag-checked updates and paging."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from router.amqp.messaging import AmqpSequence
from router.config.models import RouterConfig, RouterSection

from .support.mgmt import MgmtHarness, StubControl

MEDIA = "application/amqp-management+amqp"


@pytest.fixture
def m() -> MgmtHarness:
    return MgmtHarness(RouterConfig(router=RouterSection(id="R1")), control=StubControl())


def test_discovery_document_and_304(m: MgmtHarness) -> None:
    reply = m.http("GET")  # no `to`: the node itself
    assert reply.status == 200 and reply.message.properties.content_type == f"{MEDIA}; type=discovery-document"  # type: ignore[union-attr]
    collections = reply.body["collections"]
    assert collections["entities"] == {"label": "All entities", "address": "entities"}
    # §3.2's reserved keys for the main collections, beside the normative schema's names
    assert collections["entity"] == collections["entities"]
    assert collections["type"] == {"label": "Entity types", "address": "types"} and collections["type"]["address"] == reply.body["types"]["address"]
    assert collections["router.address"]["address"] == "router.address"
    assert reply.body["types"]["address"] == "types"
    assert all(type(k).__name__ == "Symbol" for k in reply.body)  # §3.2: symbol keys
    again = m.http("GET", "$management", **{"If-None-Match": reply.etag})
    assert (again.status, again.body, again.headers["ETag"]) == (304, None, reply.etag)
    assert m.http("GET", "_topo/0/R1/$management", **{"if-none-match": '"other"'}).status == 200


def test_entity_types(m: MgmtHarness) -> None:
    reply = m.http("GET", "$management/types")
    assert reply.status == 200
    names = {t["name"] for t in reply.body}
    assert "org.apache.qpid.dispatch.router.address" in names and "org.apache.qpid.dispatch.log" in names
    one = m.http("GET", "$management/types/router.address").body
    properties = {p["name"]: p for p in one["properties"]}
    assert one["version"] == "1.0" and one["operations"] == ["READ"]
    assert properties["subscriberCount"]["type"] == "ulong" and not properties["subscriberCount"]["writable"]
    assert m.http("GET", "$management/types/nothing").status == 404


def test_collections_and_self_addresses(m: MgmtHarness) -> None:
    reply = m.http("GET", "$management/router.address")
    assert reply.status == 200 and reply.message.properties.content_type == f"{MEDIA}; type=entity-collection"  # type: ignore[union-attr]
    for entity in reply.body:
        assert entity["id"] == entity["identity"] and entity["self"] == f"$management/router.address/{quote(entity['id'], safe='')}"
        one = m.http("GET", entity["self"])
        assert one.status == 200 and one.body["key"] == entity["key"]
    [router] = m.http("GET", "_local/$management/router").body
    assert router["id"] == "R1" and router["self"] == "_local/$management/router/R1"
    everything = m.http("GET", "$management/entities").body
    assert {e["type"] for e in everything} >= {"org.apache.qpid.dispatch.router", "org.apache.qpid.dispatch.connection"}
    assert m.http("GET", "router/R1").status == 200  # a target without the node's name is relative to it


def test_create_read_update_delete(m: MgmtHarness) -> None:
    created = m.http("POST", "$management/router.config.address", {"name": "q", "prefix": "queue", "distribution": "closest"})
    assert created.status == 201 and created.headers["Location"] == created.body["self"] == "$management/router.config.address/address%2F0"
    assert created.etag == f'"{created.body["tag"]}"'
    read = m.http("GET", created.headers["Location"])
    assert read.status == 200 and read.etag == created.etag and read.body["distribution"] == "closest"
    assert m.http("GET", created.headers["Location"], **{"If-None-Match": read.etag}).status == 304
    changed = dict(read.body, distribution="multicast")
    updated = m.http("PUT", read.body["self"], changed)
    assert updated.status == 200 and updated.body["distribution"] == "multicast" and updated.etag != read.etag
    assert m.h.core.table.distribution_for("queue.x") == "multicast"
    # the tag read first is stale now: 409 with the current description, nothing changed
    stale = m.http("PUT", read.body["self"], dict(read.body, distribution="balanced"))
    assert stale.status == 409 and stale.body["distribution"] == "multicast" and stale.etag == updated.etag
    assert m.http("GET", read.body["self"], **{"If-None-Match": read.etag}).status == 200  # changed: not 304
    no_tag = {k: v for k, v in updated.body.items() if k != "tag"}
    assert m.http("PUT", read.body["self"], no_tag).status == 400  # §5.6.2: the tag must be sent
    assert m.http("PUT", read.body["self"], no_tag, **{"If-Match": updated.etag}).status == 200  # or If-Match
    assert m.http("DELETE", read.body["self"], **{"If-Match": '"stale"'}).status == 409
    assert m.http("DELETE", read.body["self"]).status == 204
    assert m.http("GET", read.body["self"]).status == 410
    assert m.http("DELETE", read.body["self"]).status == 410
    assert m.h.core.table.distribution_for("queue.x") == "balanced"


def test_generic_factory_and_creation_errors(m: MgmtHarness) -> None:
    made = m.http("POST", "$management/entities", {"type": "listener", "name": "extra", "port": 0})
    assert made.status == 201 and made.body["type"] == "org.apache.qpid.dispatch.listener"
    assert made.body["boundPort"] == 40001 and made.headers["Location"] == "$management/listener/listener%2Fextra"
    assert m.http("POST", "$management/entities", {"name": "x", "port": 0}).status == 400  # no type
    assert m.http("POST", "$management/entities", {"type": "$queue", "name": "q"}).status == 400  # §5.5.2
    assert m.http("POST", "$management/listener", {"type": "connector", "name": "x"}).status == 400
    assert m.http("POST", "$management/listener", {"name": "extra", "port": 0}).status == 409
    assert m.http("POST", "$management/listener", {"name": "bad", "port": "many"}).status == 400
    assert m.http("POST", "$management/listener", {"name": "y", "id": "mine"}).status == 400
    refused = m.http("POST", "$management/router.address", {"name": "x"})
    assert refused.status == 405 and refused.headers["Allow"] == "GET, HEAD, OPTIONS"


def test_paging_with_top_and_skip(m: MgmtHarness) -> None:
    for i in range(5):
        assert m.http("POST", "$management/address", {"prefix": f"p{i}"}).status == 201
    page = m.http("GET", "$management/router.config.address?$top=2&$skip=1")
    assert [e["prefix"] for e in page.body] == ["p1", "p2"]
    assert [e["prefix"] for e in m.http("GET", "$management/address?$skip=3").body] == ["p3", "p4"]
    assert [e["prefix"] for e in m.http("GET", "$management/address?$top=1").body] == ["p0"]
    empty = m.http("GET", "$management/address?$skip=5")
    assert (empty.status, empty.body) == (204, None)  # §5.5.1: an empty segment
    assert m.http("GET", "$management/connector").status == 204  # an empty collection
    assert m.http("GET", "$management/address?$top=two").status == 400
    assert m.http("GET", "$management/address?$skip=-1").status == 400


def test_content_negotiation(m: MgmtHarness) -> None:
    assert m.http("GET", None, Accept="application/json").status == 406
    assert m.http("GET", None, Accept=f"application/json, {MEDIA};q=0").status == 406
    assert m.http("GET", None, Accept=f"text/html, {MEDIA}").status == 200
    assert m.http("GET", None, Accept="*/*").status == 200
    json_body = m.http("POST", "$management/address", {"prefix": "j"}, content_type="application/json")
    assert json_body.status == 415
    assert m.http("POST", "$management/address", {"prefix": "j"}, content_type=MEDIA + "; type=entity").status == 201
    assert m.http("POST", "$management/address", {"prefix": "k"}, **{"Content-Type": "text/plain"}).status == 415


def test_bad_requests_and_unknown_addresses(m: MgmtHarness) -> None:
    assert m.http("POST", "$management/address", ["prefix", "x"]).status == 400
    assert m.http("POST", "$management/address", [AmqpSequence(value=[1])]).status == 400
    assert m.http("POST", "$management/address").status == 400  # no body
    assert m.http("GET", "$management/nothing").status == 404
    assert m.http("GET", "$management/listener/nobody").status == 404
    assert m.http("GET", "$management/listener/a/b").status == 404
    assert m.http("BREW", "$management").status == 501
    options = m.http("OPTIONS", "$management/listener/amqp")
    assert options.status == 204 and options.headers["Allow"] == "GET, PUT, DELETE, HEAD, OPTIONS"
    not_allowed = m.http("PUT", "$management/router.address/M0$management", {"tag": "x"})
    assert not_allowed.status == 405 and "PUT" not in not_allowed.headers["Allow"]
    error = m.http("DELETE", "$management")
    assert error.status == 405 and isinstance(error.body, str)
    reply = m.request({"http:request": "1.1"})  # neither a method nor an operation
    assert reply.properties is not None and reply.properties.subject == "400"


def test_entities_reflect_traffic(m: MgmtHarness) -> None:
    m.traffic("metered", 2)
    entity = m.http("GET", "$management/router.address/M0metered")
    assert entity.status == 200 and entity.body["deliveriesEgress"] == 2 and entity.body["address"] == "metered"
    by_name = m.http("GET", "$management/router.address/metered")  # a plain address works as the name
    assert by_name.body["id"] == "M0metered"
    m.traffic("metered", 1, name="again")
    assert m.http("GET", "$management/router.address/M0metered", **{"If-None-Match": entity.etag}).status == 200
