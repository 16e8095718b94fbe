"""The `router.config.address` entity type (also `address`): address semantics by prefix or
pattern, created, changed and deleted at run time.

Owns: naming the configured rules (the configuration file gives them none: `address/<n>`), and
applying changes to the core's AddressTable (add_rule/remove_rule) and to the live configuration.
Must not touch: entries already in the address table (a new or changed rule applies to addresses
looked up from then on; an existing entry keeps its distribution until it is unused and dropped).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.models import AddressConfig
from .config_entities import FieldMap, with_config
from .model import EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

ADDRESS = FieldMap(AddressConfig)


@dataclass(slots=True)
class AddressRule:
    """A configured address rule as management names it (the configuration has no names)."""

    identity: str
    name: str
    rule: AddressConfig


class AddressRuleType(EntityType):
    short_name = "router.config.address"
    aliases = ("address",)  # the configuration file's (and qdrouterd.conf's) section name
    description = ("Address semantics by prefix or pattern. Changes apply to addresses looked up from "
                   "then on; an address in use keeps its distribution until it is unused")  # fmt: skip
    attributes = ADDRESS.attributes
    operations = ("CREATE", "READ", "UPDATE", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for rule in agent.address_rules:
            yield self._entity(rule)

    def _entity(self, rule: AddressRule) -> dict[str, Any]:
        return self.entity(rule.identity, rule.name, **ADDRESS.render(rule.rule))

    def _commit(self, agent: ManagementAgent, rules: list[AddressRule]) -> None:
        agent.config = with_config(agent, addresses=tuple(r.rule for r in rules))
        agent.address_rules = rules

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        name = attributes.pop("name", None)
        if name is not None and (not isinstance(name, str) or not name):
            raise ManagementError(400, "the name of an address rule is a non-empty string")
        if name is not None and any(name in (r.name, r.identity) for r in agent.address_rules):
            raise ManagementError(409, f"there is an address rule named {name!r} already")
        config: AddressConfig = ADDRESS.build(ADDRESS.parse(attributes), "address")
        rule = agent.new_rule(config, name)
        self._commit(agent, [*agent.address_rules, rule])
        agent.core.table.add_rule(config)
        return self._entity(rule)

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        rule = next(r for r in agent.address_rules if r.identity == entity["identity"])
        changes = ADDRESS.parse(attributes)
        if changes.get("prefix") is not None:  # giving one of prefix|pattern replaces the other
            changes.setdefault("pattern", None)
        elif changes.get("pattern") is not None:
            changes.setdefault("prefix", None)
        config: AddressConfig = ADDRESS.build(ADDRESS.merge(rule.rule, changes), "address")
        if config == rule.rule:
            return entity
        updated = AddressRule(rule.identity, rule.name, config)
        self._commit(agent, [updated if r is rule else r for r in agent.address_rules])
        agent.core.table.remove_rule(rule.rule)
        agent.core.table.add_rule(config)
        return self._entity(updated)

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        rule = next(r for r in agent.address_rules if r.identity == entity["identity"])
        self._commit(agent, [r for r in agent.address_rules if r is not rule])
        agent.core.table.remove_rule(rule.rule)
