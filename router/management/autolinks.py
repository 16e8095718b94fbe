"""The `router.config.autoLink` entity type (also `autoLink`): links the router attaches to
broker queues itself (router.core.autolinks), created, read, queried and deleted at run time.

Owns: the mapping between AutoLink's fields and the attributes (the anchors' names: `address`,
`direction`, `connection`, `containerId`, `externalAddress`, `phase`, `fallback`: refused on an
address no rule gives fallback destinations; read-only `operStatus`
inactive|attaching|active|failed, `lastError`, `linkRef`, `attachCount`), the identity (the
auto-link's `name`, by default `autoLink/<address>/<direction>/<connection or container-id>`),
and keeping the live configuration's `auto_links` in step with the core's.
An auto-link is changed by deleting it and creating the new one (the anchors have no UPDATE).
Must not touch: the links themselves (the core's AutoLinks unit attaches and detaches them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..config.models import AutoLink
from .config_entities import FieldMap, with_config
from .model import Attribute, EntityType, ManagementError

if TYPE_CHECKING:
    from ..core.autolinks import AutoLinkRun
    from .agent import ManagementAgent

AUTO_LINK = FieldMap(AutoLink)
STATUS = ("operStatus", "lastError", "linkRef", "attachCount")


class AutoLinkType(EntityType):
    short_name = "router.config.autoLink"
    aliases = ("autoLink",)
    description = ("A link the router attaches to a broker queue itself while a route-container connection "
                   "matching connection or containerId is up: out, the queue consumes the address; in, it "
                   "produces into it. Failed attaches are retried with backoff")  # fmt: skip
    attributes = AUTO_LINK.without_name() + (
        Attribute("operStatus", "string", "inactive (no matching connection), attaching, active or failed (retrying)"),
        Attribute("lastError", "string", "Why the last attach failed or the link ended"),
        Attribute("linkRef", "string", "The name of the link while there is one"),
        Attribute("attachCount", "long", "Attaches attempted"),
    )
    operations = ("CREATE", "READ", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        runs = agent.core.autolinks.runs
        for config in agent.config.auto_links:
            run = runs.get(config.key)
            if run is not None:
                yield self._entity(agent, run)

    def _entity(self, agent: ManagementAgent, run: AutoLinkRun) -> dict[str, Any]:
        attributes = {k: v for k, v in AUTO_LINK.render(run.config).items() if k != "name"}
        last_error = run.last_error
        if last_error is None and run.state == "inactive" and run.config.connection is not None:
            # Say why it may never attach: nothing of that name connects a broker.
            roles = [c.role for c in agent.config.listeners if c.name == run.config.connection]
            roles += [c.role for c in agent.config.connectors if c.name == run.config.connection]
            if "route-container" not in roles:
                last_error = f"no route-container listener or connector named {run.config.connection!r}"
        return self.entity(
            run.key, run.key, **attributes, operStatus=run.state, lastError=last_error,
            linkRef=run.link.name if run.link is not None else None, attachCount=run.attaches,
        )  # fmt: skip

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        config: AutoLink = AUTO_LINK.build(AUTO_LINK.parse(attributes, STATUS), "autoLink")
        if config.key in agent.core.autolinks.runs:
            raise ManagementError(409, f"there is an auto-link named {config.key!r} already")
        if config.fallback and agent.core.table.fallback_address(config.address) is None:
            raise ManagementError(400, f"fallback: true needs an address rule with enableFallback for {config.address!r}")
        candidate = with_config(agent, auto_links=(*agent.config.auto_links, config))
        run = agent.core.autolinks.add(config, now)
        agent.config = candidate
        return self._entity(agent, run)

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        key = entity["identity"]
        candidate = with_config(agent, auto_links=tuple(c for c in agent.config.auto_links if c.key != key))
        agent.core.autolinks.remove(key, agent.now(None))
        agent.config = candidate
