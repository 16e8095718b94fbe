"""The management model of the router and its AMQP faces (sans-IO: no sockets, tasks or clock).

One model of manageable entity types (model.py; entities.py, router_entities.py, logs.py:
operational; config_entities.py, address_rules.py, their attributes mapped from the models by
fieldmap.py: configuration; metrics.py: memory) behind one entry point, the agent (agent.py); two
AMQP dialects at the management node (node.py): AMQP Management WD14 over the HTTP-over-AMQP
mapping (amqp_http.py) and the operation dialect of the anchors' tools (operations.py). The
HTTP/JSON face (http.py; http_resources.py, http_responses.py) and metrics (metrics.py) use the
same agent. Who may read and write is authz.py's (every face asks `agent.authz` before it acts; the
HTTP face learns who asks through http_auth.py). docs/management.md describes the types, the
attributes and both dialects; docs/security.md who may do what.

    agent = ManagementAgent(core, config, control, started_at)   # control: ConfigControl | None
    install(core, agent)            # the node at $management and _local/$management

The agent's API (stable; every failure raises ManagementError(status, description), with
`entity` set to the current description on a 409):

    agent.types() -> dict[str, dict]                # long type name -> its description
    agent.entity_types() -> list[EntityType]
    agent.entity_type(name) -> EntityType           # long, short or alias name; 404 if unknown
    agent.query(type=None, attribute_names=None, offset=0, count=None)
        -> (attribute_names, rows)                  # rows: one list of values per entity
    agent.entities(type=None, offset=0, count=None) -> list[dict]
    agent.read(type, name=None, identity=None) -> dict
    agent.find(type, key) -> dict                   # key: identity (preferred) or name
    agent.create(type, attributes) -> dict
    agent.update(type, key, attributes, if_match=None) -> dict      # key: identity or name
    agent.delete(type, key, if_match=None) -> None
    agent.config                                    # the live RouterConfig
    agent.authz.check(requester, write=...)         # 403 (counted) unless allowed (authz.py)
    etag(entity) -> str                             # a digest of an entity's attributes

`type` may be None where an entity is looked up (any type). Every method takes `now=` (the
core's clock, monotonic in a running router: uptimes are differences of it; wall-clock
timestamps go through `core.wall_time`); without it the agent's clock is used. An entity is a dict with
`identity`, `name`, `type` (the long name) and its attributes (camelCase).
"""

from __future__ import annotations

from .agent import ManagementAgent
from ..config.models import Connector
from .model import (
    Attribute, ConfigControl, ConnectorControl, ConnectorStatusSource, EntityType, ManagementError, etag,
)  # fmt: skip
from .node import ManagementNode, install

__all__ = [
    "Attribute", "ConfigControl", "Connector", "ConnectorControl", "ConnectorStatusSource", "EntityType", "ManagementAgent",
    "ManagementError", "ManagementNode", "etag", "install",
]  # fmt: skip
