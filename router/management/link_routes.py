"""The `router.config.linkRoute` entity type (also `linkRoute`, the anchors' names): link routes,
created and deleted at run time.

Owns: the mapping between LinkRouteConfig and the entity's attributes (the anchors' names:
`prefix`, `pattern`, `direction`, `connection`, `containerId`, `addExternalPrefix`,
`delExternalPrefix`), what it shows of the route at work (`operStatus`: active while a route
container for it is connected here, and `routedLinkCount`: client links routed through it now),
and applying creates and deletes to the core's LinkRoutes and the live configuration.
Must not touch: pairs already routed (a deleted route stops matching new attaches; links
attached through it stay until they detach).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..config.models import LinkRouteConfig
from .config_entities import FieldMap, with_config
from .model import Attribute, EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

LINK_ROUTE = FieldMap(LinkRouteConfig)
READ_ONLY = ("operStatus", "routedLinkCount")


class LinkRouteType(EntityType):
    short_name = "router.config.linkRoute"
    aliases = ("linkRoute",)
    description = ("Link route: an attach whose address matches is passed on to a route container (a broker or "
                   "service) and relayed end to end. Deleting one leaves links already routed attached")  # fmt: skip
    attributes = (
        *LINK_ROUTE.without_name(),
        Attribute("operStatus", "string", "active while a route container for this route is connected to this router, "
                  "else inactive"),
        Attribute("routedLinkCount", "long", "client links routed through this route at this router now"),
    )  # fmt: skip
    operations = ("CREATE", "READ", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        routes = agent.core.link_routes
        counts: dict[str, int] = {}
        for pair in routes.pairs:
            counts[pair.route] = counts.get(pair.route, 0) + 1
        for route in routes.routes.values():
            attributes = LINK_ROUTE.render(route.config)
            attributes.pop("name", None)
            yield self.entity(f"linkRoute/{route.name}", route.name, **attributes,
                              operStatus="active" if route.containers else "inactive",
                              routedLinkCount=counts.get(route.name, 0))  # fmt: skip

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        config: LinkRouteConfig = LINK_ROUTE.build(LINK_ROUTE.parse(attributes, READ_ONLY), "linkRoute")
        if config.route_name in agent.core.link_routes.routes:
            raise ManagementError(409, f"there is a link route named {config.route_name!r} already")
        agent.config = with_config(agent, link_routes=(*agent.config.link_routes, config))
        agent.core.link_routes.add(config)
        entity = self.find(agent, config.route_name, now, by="name")
        assert entity is not None
        return entity

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        name = entity["name"]
        agent.config = with_config(agent, link_routes=tuple(r for r in agent.config.link_routes if r.route_name != name))
        agent.core.link_routes.remove(name)
