"""The management agent: the single entry point every face (AMQP, HTTP, metrics, CLI) calls.

Owns: the registry of entity types, the live configuration (a RouterConfig, listeners and
connectors included, plus named address rules, starting from the configuration the router
started with), looking
entities up by identity or name, paging, version checks (If-Match: 409 with the current
description), and the memory of deleted entities (410 instead of 404, WD14 §5.2).
Must not touch: message formats (the faces'), sockets (configuration changes go through the
injected ConfigControl), the core beyond its read API and AddressTable.add_rule/remove_rule.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config.models import Connector, RouterConfig
from .address_rules import AddressRule, AddressRuleType
from .autolinks import AutoLinkType
from .link_reach import LinkRouteReachType
from .link_routes import LinkRouteType
from .authz import Authorizer
from .config_entities import ConnectorType, ListenerType
from .entities import ConnectionType, LinkType, RouterAddressType
from .router_entities import NodeType, RouterType
from .logs import LogType
from .policy_entities import PolicyType, VhostStatsType, VhostType
from .model import ConfigControl, EntityType, ManagementError, etag

if TYPE_CHECKING:
    from ..core.router import RouterCore

GONE_MEMORY = 1024  # deleted entities remembered for 410 answers


def tag_matches(given: str, entity: Mapping[str, Any]) -> bool:
    """Whether an If-Match value (a tag, possibly quoted, weak or `*`, or a list) names the
    entity's current version."""
    tags = [t.strip().removeprefix("W/").strip('"') for t in given.split(",")]
    return "*" in tags or etag(entity) in tags


class ManagementAgent:
    """See the package docstring for the API."""

    def __init__(
        self,
        core: RouterCore,
        config: RouterConfig,
        control: ConfigControl | None = None,
        started_at: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.config = config
        self.control = control
        self.clock = clock
        self.started_at = clock() if started_at is None else started_at
        self._rule_ids = itertools.count()
        self.address_rules: list[AddressRule] = [self.new_rule(rule) for rule in config.addresses]
        self.bound_ports: dict[str, int] = {}  # ports reported by the control on create
        self._types: dict[str, EntityType] = {}
        self._ordered: list[EntityType] = []
        self._gone: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.authz = Authorizer(lambda: self.config.management)  # the faces check requests with it
        for etype in (RouterType(), ListenerType(), ConnectorType(), AddressRuleType(), ConnectionType(),
                      LinkType(), RouterAddressType(), NodeType(), LogType(), PolicyType(), VhostType(),
                      VhostStatsType(), LinkRouteType(), LinkRouteReachType()):  # fmt: skip
            self.register(etype)
        self.register(AutoLinkType())

    @property
    def connectors(self) -> tuple[Connector, ...]:
        return self.config.connectors

    def new_rule(self, rule: Any, name: str | None = None) -> AddressRule:
        identity = f"address/{next(self._rule_ids)}"
        return AddressRule(identity, name or identity, rule)

    # --- types ------------------------------------------------------------------------------------

    def register(self, etype: EntityType) -> None:
        """Add an entity type (a face's own, such as the memory type), or replace the one with
        the same short name."""
        old = next((t for t in self._ordered if t.short_name == etype.short_name), None)
        if old is not None:
            self._ordered[self._ordered.index(old)] = etype
            self._types = {k: v for k, v in self._types.items() if v is not old}
        else:
            self._ordered.append(etype)
        for name in etype.names():
            self._types[name] = etype

    def entity_types(self) -> list[EntityType]:
        return list(self._ordered)

    def types(self) -> dict[str, dict[str, Any]]:
        return {t.name: t.describe() for t in self._ordered}

    def entity_type(self, name: str) -> EntityType:
        etype = self._types.get(name) if isinstance(name, str) else None
        if etype is None:
            raise ManagementError(404, f"unknown entity type {name!r}")
        return etype

    def now(self, now: float | None = None) -> float:
        return self.clock() if now is None else now

    # --- reading ----------------------------------------------------------------------------------

    def _iterate(self, type: str | None, now: float) -> Iterator[dict[str, Any]]:
        for etype in [self.entity_type(type)] if type is not None else self._ordered:
            yield from etype.entities(self, now)

    def entities(self, type: str | None = None, offset: int = 0, count: int | None = None, *,
                 now: float | None = None) -> list[dict[str, Any]]:  # fmt: skip
        """Whole entities of `type` (every type when None), from `offset`, at most `count`."""
        if not isinstance(offset, int) or offset < 0 or (count is not None and (not isinstance(count, int) or count < 0)):
            raise ManagementError(400, f"offset and count must be non-negative integers (got {offset!r}, {count!r})")
        # A peer's offset and count may be any ulong: past sys.maxsize (islice's bound) an offset
        # is past every entity, and a count is all of them.
        if offset > sys.maxsize:
            return []
        stop = None if count is None or offset + count > sys.maxsize else offset + count
        return list(itertools.islice(self._iterate(type, self.now(now)), offset, stop))

    def query(self, type: str | None = None, attribute_names: Sequence[str] | None = None, offset: int = 0,
              count: int | None = None, *, now: float | None = None) -> tuple[list[str], list[list[Any]]]:  # fmt: skip
        """The anchors' QUERY: the attribute names (all of the type's when none are asked for)
        and one row of values per entity, in that order."""
        known = self.entity_type(type).attribute_names() if type is not None else self._all_attribute_names()
        names = [str(n) for n in attribute_names] if attribute_names else known
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ManagementError(400, f"unknown attributes {unknown} for {type or 'any type'}")
        return names, [[e.get(n) for n in names] for e in self.entities(type, offset, count, now=now)]

    def _all_attribute_names(self) -> list[str]:
        return list(dict.fromkeys(n for t in self._ordered for n in t.attribute_names()))

    def read(self, type: str | None = None, name: str | None = None, identity: str | None = None, *,
             now: float | None = None) -> dict[str, Any]:  # fmt: skip
        if identity is None and name is None:
            raise ManagementError(400, "give the name or the identity of the entity")
        if identity is not None:
            _, entity = self._find(type, identity, "identity", self.now(now))
            if name is not None and entity.get("name") != name:
                raise ManagementError(400, f"identity {identity!r} and name {name!r} are different entities")
            return entity
        assert name is not None
        return self._find(type, name, "name", self.now(now))[1]

    def find(self, type: str | None, key: str, *, now: float | None = None) -> dict[str, Any]:
        """The entity whose identity (preferred) or name is `key`."""
        return self._find(type, key, "any", self.now(now))[1]

    def _find(self, type: str | None, key: str, by: str, now: float) -> tuple[EntityType, dict[str, Any]]:
        if not isinstance(key, str):
            raise ManagementError(400, f"an entity {by} is a string (got {key.__class__.__name__})")
        types = [self.entity_type(type)] if type is not None else self._ordered
        found = [(t, e) for t in types if (e := t.find(self, key, now, by)) is not None]
        if len(found) > 1:
            raise ManagementError(400, f"{key!r} names entities of several types: give the type")
        if found:
            return found[0]
        what = type or "entity"
        if any((t.short_name, key) in self._gone for t in types):
            raise ManagementError(410, f"{what} {key!r} was deleted")
        raise ManagementError(404, f"no {what} with {'name or identity' if by == 'any' else by} {key!r}")

    # --- changing ---------------------------------------------------------------------------------

    def create(self, type: str, attributes: Mapping[str, Any], *, now: float | None = None) -> dict[str, Any]:
        try:
            etype = self.entity_type(type)
        except ManagementError:  # WD14 §5.5.2: an unsupported type for a collection is a 400
            raise ManagementError(400, f"unknown entity type {type!r}") from None
        self._allowed(etype, "CREATE")
        attrs = self._attributes(attributes)
        given = attrs.pop("type", None)
        if given not in (None, "") and self._types.get(str(given)) is not etype:
            raise ManagementError(400, f"conflicting types {type!r} and {given!r}")
        if attrs.pop("identity", None) is not None:
            raise ManagementError(400, "the identity of a new entity is assigned by the router")
        entity = etype.create(self, attrs, self.now(now))
        for key in (entity["identity"], entity["name"]):
            self._gone.pop((etype.short_name, key), None)
        return entity

    def update(self, type: str | None, key: str, attributes: Mapping[str, Any], if_match: str | None = None, *,
               now: float | None = None) -> dict[str, Any]:  # fmt: skip
        """Change the writable attributes given; an attribute given as None gets its default
        (WD14 §5.6.2). `if_match`: the tag the client read (409 if it is not current)."""
        at = self.now(now)
        etype, current = self._find(type, key, "any", at)
        self._allowed(etype, "UPDATE")
        self._check_tag(current, if_match)
        attrs = self._attributes(attributes)
        for base in ("identity", "name", "type"):
            value = attrs.pop(base, None)
            same = value == current[base] or (base == "type" and self._types.get(str(value)) is etype)
            if value is not None and not same:
                raise ManagementError(400, f"the {base} of an entity cannot be changed")
        return etype.update(self, current, attrs, at)

    def delete(self, type: str | None, key: str, if_match: str | None = None, *, now: float | None = None) -> None:
        etype, current = self._find(type, key, "any", self.now(now))
        self._allowed(etype, "DELETE")
        self._check_tag(current, if_match)
        etype.delete(self, current)
        for name in (current["identity"], current["name"]):
            self._gone[(etype.short_name, name)] = None
        while len(self._gone) > GONE_MEMORY:
            self._gone.popitem(last=False)

    @staticmethod
    def _allowed(etype: EntityType, operation: str) -> None:
        if operation not in etype.operations:
            raise ManagementError(405, f"{operation} is not allowed on {etype.short_name} entities")

    @staticmethod
    def _check_tag(current: dict[str, Any], if_match: str | None) -> None:
        if if_match is not None and not tag_matches(str(if_match), current):
            raise ManagementError(409, "the entity has changed since it was read (tag mismatch)", entity=current)

    @staticmethod
    def _attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(attributes, Mapping):
            raise ManagementError(400, "the attributes must be a map")
        if not all(isinstance(k, str) for k in attributes):
            raise ManagementError(400, "attribute names must be strings")
        return dict(attributes)
