"""The management agent's API (what the HTTP face, metrics and CLI call), without messages."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from router.config.models import Listener, RouterConfig, RouterSection
from router.core.router import RouterCore
from router.management import (
    Connector, ConnectorControl, ConnectorStatusSource, ManagementAgent, ManagementError, etag,
)  # fmt: skip
from router.management.agent import ManagementAgent as Agent
from router.management.router_entities import NodeType

from .support.mgmt import StubControl


def agent(control: Any = None, **config: Any) -> ManagementAgent:
    config.setdefault("router", RouterSection(id="A"))
    cfg = RouterConfig(**config)
    return ManagementAgent(RouterCore(cfg), cfg, control, 100.0, clock=lambda: 130.0)


def error(call: Any, *args: Any, **kwargs: Any) -> ManagementError:
    with pytest.raises(ManagementError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_types_and_names() -> None:
    a = agent()
    types = a.types()
    assert "org.apache.qpid.dispatch.router.address" in types
    assert types["org.apache.qpid.dispatch.listener"]["operations"] == ["CREATE", "READ", "UPDATE", "DELETE"]
    for name in ("address", "router.config.address", "org.apache.qpid.dispatch.router.config.address",
                 "org.apache.qpid.dispatch.address"):  # fmt: skip
        assert a.entity_type(name).short_name == "router.config.address"
    assert error(a.entity_type, "queue").status == 404
    assert [t.short_name for t in a.entity_types()][:3] == ["router", "listener", "connector"]


def test_query_read_and_uptime() -> None:
    a = agent()
    names, rows = a.query("router", ["id", "mode", "uptimeSeconds"])
    assert (names, rows) == (["id", "mode", "uptimeSeconds"], [["A", "standalone", 30]])
    assert a.read("router", name="A")["uptimeSeconds"] == 30
    assert a.read("router", identity="A", now=160.0)["uptimeSeconds"] == 60
    assert a.read(None, identity="listener/amqp")["port"] == 5672
    assert error(a.read, "router", identity="A", name="B").status == 400
    assert a.find("listener", "amqp") == a.find("listener", "listener/amqp")
    assert [e["name"] for e in a.entities("listener", 0, 1)] == ["amqp"] and a.entities("listener", 1) == []
    assert error(a.entities, "listener", -1).status == 400
    # Any ulong a peer sends pages (the fuzz test found ones past sys.maxsize answered with 500).
    assert a.entities("listener", 2**64 - 1) == [] and a.entities("listener", 2**63, 1) == []
    assert [e["name"] for e in a.entities("listener", 0, 2**64 - 1)] == ["amqp"]


def test_tags_conflicts_defaults_and_gone() -> None:
    a = agent(StubControl())
    created = a.create("listener", {"name": "x", "port": 0, "linkCapacity": 5})
    assert etag(a.read("listener", name="x")) == etag(created)  # stable while unchanged
    updated = a.update("listener", "x", {"linkCapacity": 6}, if_match=f'"{etag(created)}"')
    assert updated["linkCapacity"] == 6 and etag(updated) != etag(created)
    conflict = error(a.update, "listener", "x", {"linkCapacity": 7}, if_match=etag(created))
    assert conflict.status == 409 and conflict.entity == updated
    assert a.update("listener", "listener/x", {"linkCapacity": None}, if_match="*")["linkCapacity"] == 1000
    assert error(a.delete, "listener", "x", if_match="W/\"old\"").status == 409
    a.delete("listener", "x")
    assert error(a.read, "listener", name="x").status == 410
    assert error(a.update, None, "listener/x", {}).status == 410
    assert error(a.read, "listener", name="never").status == 404
    assert a.create("listener", {"name": "x", "port": 0})["name"] == "x"  # back: no longer gone


def test_listener_update_that_cannot_bind_reopens_the_old_one() -> None:
    control = StubControl()
    a = agent(control)
    a.create("listener", {"name": "x", "port": 1234})

    def refuse(listener: Listener) -> int:
        control.create_listener = StubControl.create_listener.__get__(control)  # type: ignore[method-assign]
        raise OSError(98, "Address already in use")

    control.create_listener = refuse  # type: ignore[method-assign]
    failed = error(a.update, "listener", "x", {"port": 1235})
    assert failed.status == 409 and "in use" in failed.description
    assert a.read("listener", name="x")["port"] == 1234 and control.ports == {"x": 1234}


@dataclass
class Connectors:
    started: list[str] = field(default_factory=list)

    def create_listener(self, listener: Listener) -> int | None:
        return None

    def delete_listener(self, name: str) -> bool:
        return True

    def listener_ports(self) -> dict[str, int]:
        return {}

    def create_connector(self, connector: Connector) -> None:
        self.started.append(connector.name)

    def delete_connector(self, name: str) -> bool:
        self.started.remove(name)
        return True

    def connector_status(self, name: str) -> tuple[str, str] | None:
        return ("FAILED", "Connection refused") if name in self.started else None


def test_connectors_go_to_a_connector_control() -> None:
    control = Connectors()
    assert isinstance(control, ConnectorControl) and isinstance(control, ConnectorStatusSource)
    a = agent(control, router=RouterSection(id="A", mode="interior"))
    a.create("connector", {"name": "c", "host": "peer", "port": 5673, "saslUsername": "u", "saslPassword": "secret"})
    assert control.started == ["c"] and a.config.connectors[0].sasl_password == "secret"
    read = a.read("connector", name="c")
    assert read["saslUsername"] == "u" and read["saslPassword"] == "********"  # never shown
    assert read["role"] == "inter-router" and read["reconnectMaxSeconds"] == 30.0
    assert (read["connectionStatus"], read["connectionMsg"]) == ("FAILED", "Connection refused")
    a.update("connector", "c", {**read, "cost": 5})  # the mask sent back leaves the password alone
    assert control.started == ["c"] and a.connectors[0].cost == 5 and a.connectors[0].sasl_password == "secret"
    assert a.update("connector", "c", {"cost": 5})["cost"] == 5 and control.started == ["c"]  # no change: no restart
    a.delete("connector", "c")
    assert control.started == [] and a.connectors == () and a.config.connectors == ()
    assert error(a.create, "connector", {"host": "no-name", "port": 1}).status == 400
    assert error(a.create, "connector", {"name": "p", "host": "h", "port": 1, "saslUsername": "u"}).status == 400
    assert control.started == []


def test_connectors_follow_the_roles_the_mode_allows() -> None:
    control = Connectors()
    standalone = agent(control)
    refused = error(standalone.create, "connector", {"name": "c", "host": "peer", "port": 5673})
    assert refused.status == 400 and "needs router mode interior" in refused.description and control.started == []
    edge = agent(control, router=RouterSection(id="E", mode="edge"))
    assert edge.create("connector", {"name": "up", "host": "hub", "port": 5673, "role": "edge"})["role"] == "edge"
    assert error(edge.create, "connector", {"name": "up", "host": "hub", "port": 1, "role": "edge"}).status == 409
    assert control.started == ["up"]


def test_address_rules_switch_between_prefix_and_pattern() -> None:
    a = agent()
    rule = a.create("address", {"prefix": "a.b"})
    assert a.core.table.distribution_for("a.b.c") == "balanced"
    changed = a.update("address", rule["identity"], {"pattern": "x.*", "distribution": "closest"})
    assert (changed["prefix"], changed["pattern"]) == (None, "x.*")
    assert a.core.table.distribution_for("x.y") == "closest" and a.config.addresses[0].pattern == "x.*"
    assert a.create("address", {"name": "n", "prefix": "z"})["name"] == "n"
    assert error(a.create, "address", {"name": "n", "prefix": "z2"}).status == 409


def test_the_mesh_can_replace_router_node() -> None:
    class Nodes(NodeType):  # the attributes stay; the entities come from the mesh
        def entities(self, agent: Agent, now: float) -> Iterator[dict[str, Any]]:
            yield self.entity("B", "B", id="B", cost=1)

    a = agent()
    a.register(Nodes())
    assert a.query("router.node", ["id", "cost"]) == (["id", "cost"], [["B", 1]])
    assert a.read("router", name="A")["nodeCount"] == 1
    assert len([t for t in a.entity_types() if t.short_name == "router.node"]) == 1
