"""The `router.config.linkRoute` entity: created, read, queried and deleted through the
management agent, applied to the core's link routes at once, and applied by a configuration
reload (by name)."""

from __future__ import annotations

from typing import Any

import pytest

from router.config.models import LinkRouteConfig, RouterConfig, RouterSection
from router.core.router import RouterCore
from router.management import ManagementAgent, ManagementError
from router.net.reload import apply_reload, plan_reload


def agent(**config: Any) -> ManagementAgent:
    cfg = RouterConfig(router=RouterSection(id="A"), **config)
    return ManagementAgent(RouterCore(cfg), cfg, None, 100.0, clock=lambda: 130.0)


def test_configured_routes_read_with_the_anchors_names() -> None:
    a = agent(link_routes=(LinkRouteConfig(prefix="queue", direction="in", connection="broker",
                                           add_external_prefix="x/"),))  # fmt: skip
    entity = a.read("linkRoute", name="in:queue")
    assert entity["identity"] == "linkRoute/in:queue"
    assert entity["type"] == "org.apache.qpid.dispatch.router.config.linkRoute"
    assert (entity["prefix"], entity["direction"], entity["connection"], entity["addExternalPrefix"]) == (
        "queue", "in", "broker", "x/")
    assert entity["operStatus"] == "inactive" and entity["routedLinkCount"] == 0


def test_create_query_delete_at_run_time() -> None:
    a = agent()
    created = a.create("router.config.linkRoute", {"name": "txn", "prefix": "$coordinator", "direction": "in",
                                                   "containerId": "broker-1"})  # fmt: skip
    assert created["identity"] == "linkRoute/txn" and created["containerId"] == "broker-1"
    assert "txn" in a.core.link_routes.routes
    names, rows = a.query("linkRoute", ["name", "prefix", "operStatus"])
    assert rows == [["txn", "$coordinator", "inactive"]]
    assert a.config.link_routes[0].prefix == "$coordinator"  # the live configuration has it too
    with pytest.raises(ManagementError) as duplicate:
        a.create("linkRoute", {"name": "txn", "prefix": "other", "direction": "in", "connection": "c"})
    assert duplicate.value.status == 409
    a.delete("linkRoute", "linkRoute/txn")
    assert not a.core.link_routes.routes and not a.config.link_routes
    assert a.query("linkRoute", ["name"])[1] == []


@pytest.mark.parametrize("attributes", [
    {"direction": "in", "connection": "c"},  # neither prefix nor pattern
    {"prefix": "a", "pattern": "b", "direction": "in", "connection": "c"},
    {"prefix": "a", "direction": "sideways", "connection": "c"},
    {"prefix": "a", "direction": "in"},  # no container
    {"prefix": "a", "direction": "in", "connection": "c", "operStatus": "active", "bogus": 1},
])  # fmt: skip
def test_bad_routes_are_400(attributes: dict[str, Any]) -> None:
    a = agent()
    with pytest.raises(ManagementError) as refused:
        a.create("linkRoute", attributes)
    assert refused.value.status == 400
    assert not a.core.link_routes.routes


def test_update_is_not_offered() -> None:
    a = agent(link_routes=(LinkRouteConfig(prefix="q", direction="out", connection="broker"),))
    with pytest.raises(ManagementError) as refused:
        a.update("linkRoute", "linkRoute/out:q", {"prefix": "r"})
    assert refused.value.status == 405


def test_reload_applies_link_routes_by_name() -> None:
    old = RouterConfig(router=RouterSection(id="A"), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),
        LinkRouteConfig(name="keep", prefix="k", direction="out", connection="broker"),
    ))  # fmt: skip
    a = agent(link_routes=old.link_routes)
    new = old.model_copy(update={"link_routes": (
        LinkRouteConfig(name="keep", prefix="k", direction="out", connection="broker"),
        LinkRouteConfig(prefix="q", direction="out", connection="broker", del_external_prefix="q/"),
    )})  # fmt: skip
    report = apply_reload(a, plan_reload(old, new))
    assert not report.failed, report.failed
    assert sorted(a.core.link_routes.routes) == ["keep", "out:q"]
    assert a.core.link_routes.routes["out:q"].config.del_external_prefix == "q/"
    assert sorted(r.route_name for r in a.config.link_routes) == ["keep", "out:q"]
