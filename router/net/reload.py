"""Applying a changed configuration file at run time (SIGHUP, or the file watch of `router run`).

    plan = plan_reload(previous_file_config, new_file_config)   # what changed, nothing applied
    report = apply_reload(agent, plan)                          # through the management agent

Owns: what changed between two versions of the configuration file (listeners, connectors and
ssl profiles by name, address rules by content, auto-links by name, users, log levels by module, policy vhosts by hostname) and applying those changes through the
management agent's own create/update/delete, so that a file change obeys exactly the rules of a
management change (validation, a port in use refused, a listener re-opened on update, an ssl
profile's files loaded before it is used). The order keeps every step valid: new and changed
ssl profiles first, then what is deleted, then changes and additions, and deleted profiles last.

Rules (docs/management.md, "Configuration changes without restarts"):
- The diff is between the previous file and the new one: entities created through management
  that neither version of the file names are left alone.
- The router's identity (router.id, router.mode) cannot change at run time: a file changing
  either is refused whole, and the running configuration stays in force.
- Sections read only at start (http, limits, failed_logins, flow, the router's hello and dead
  intervals) are not applied: each change is logged as needing a restart; the rest is applied.
  The router's busy_poll_us is the server's own (RouterServer.reload sets it).
- A change that management refuses (a port in use, certificate files that do not load) is
  logged with its reason and skipped; the other changes are still applied.
Must not touch: sockets (the agent's ConfigControl, RouterServer, does that), the core.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ..config.models import AddressConfig, Listener, RouterConfig

log = logging.getLogger(__name__)

# (the RouterConfig section, the management entity type) for entities keyed by name.
NAMED = (("ssl_profiles", "sslProfile"), ("listeners", "listener"), ("connectors", "connector"))
IDENTITY_FIELDS = ("id", "mode")  # of the `router` section
APPLIED_BY_SERVER = ("busy_poll_us",)  # of the `router` section: the server applies it itself
RESTART_ONLY = ("http", "limits", "failed_logins", "flow")  # sections read once, at start
AUTO_LINK_TYPE = "router.config.autoLink"  # identity: the auto-link's key


class ReloadRefused(ValueError):
    """The new file cannot be applied at all (it changes the router's identity)."""


@dataclass(slots=True)
class Change:
    operation: str  # create | update | delete
    entity_type: str  # the management type's short name
    name: str  # the entity's name (an address rule: its prefix or pattern)
    attributes: dict[str, Any] = field(default_factory=dict)
    rule: AddressConfig | None = None  # for address rules (matched by content, not name)

    def __str__(self) -> str:
        return f"{self.operation} {self.entity_type} {self.name}"


@dataclass(slots=True)
class ReloadPlan:
    new: RouterConfig
    changes: list[Change] = field(default_factory=list)
    users_changed: bool = False
    needs_restart: list[str] = field(default_factory=list)  # sections changed that apply only at start

    @property
    def empty(self) -> bool:
        return not self.changes and not self.users_changed and not self.needs_restart


@dataclass(slots=True)
class ReloadReport:
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)


def _attributes(model: BaseModel) -> dict[str, Any]:
    # The configuration file's snake_case names: the management field maps accept them too.
    return model.model_dump()


def _rule_name(rule: AddressConfig) -> str:
    return f"{'prefix' if rule.prefix is not None else 'pattern'} {rule.prefix or rule.pattern}"


def _same_listener(before: Listener, after: Listener, bound_port: int | None) -> bool:
    """A listener is unchanged when equal, or when the old file said port 0 (any port) and the
    new one names the port it was given: writing the bound port back into the file (so that a
    restart listens where clients and neighbours redial) must not close and reopen it, which
    would reset connections waiting in its accept queue."""
    if before == after:
        return True
    return before.port == 0 and after.port == bound_port and before.model_copy(update={"port": after.port}) == after


def plan_reload(old: RouterConfig, new: RouterConfig, bound_ports: Mapping[str, int] | None = None) -> ReloadPlan:
    """What applying `new` over `old` (the previous file) means. ReloadRefused if the router's
    identity changes. `bound_ports` (listener name -> the port it listens on) lets a listener
    of port 0 stay as it is when the new file names its bound port."""
    for name in IDENTITY_FIELDS:
        before, after = getattr(old.router, name), getattr(new.router, name)
        if before != after:
            raise ReloadRefused(f"router.{name}: cannot change at run time ({before!r} -> {after!r}); restart the router")
    plan = ReloadPlan(new)
    for name in RESTART_ONLY:
        if getattr(old, name) != getattr(new, name):
            plan.needs_restart.append(name)
    for name in type(old.router).model_fields:
        if name in IDENTITY_FIELDS or name in APPLIED_BY_SERVER:
            continue
        if getattr(old.router, name) != getattr(new.router, name):
            plan.needs_restart.append(f"router.{name}")
    creates: list[Change] = []
    updates: list[Change] = []
    deletes: list[Change] = []
    profile_deletes: list[Change] = []
    for section, etype in NAMED:
        before = {item.name: item for item in getattr(old, section)}
        after = {item.name: item for item in getattr(new, section)}
        for name, item in after.items():
            if name not in before:
                target = creates if etype != "sslProfile" else updates
                target.append(Change("create", etype, name, _attributes(item)))
            elif etype == "listener" and _same_listener(before[name], item, (bound_ports or {}).get(name)):
                continue
            elif before[name] != item:
                updates.append(Change("update", etype, name, _attributes(item)))
        for name in before:
            if name not in after:
                (profile_deletes if etype == "sslProfile" else deletes).append(Change("delete", etype, name))
    # Address rules have no names in the file: a rule is the same rule when it is equal.
    remaining = list(new.addresses)
    for rule in old.addresses:
        if rule in remaining:
            remaining.remove(rule)
        else:
            deletes.append(Change("delete", "router.config.address", _rule_name(rule), rule=rule))
    for rule in remaining:
        creates.append(Change("create", "router.config.address", _rule_name(rule), _attributes(rule), rule=rule))
    # Auto-links and link routes by name (given, or made from what they are): one whose content
    # changed is deleted and created again (no update; routed links stay attached).
    _replace_changed({link.key: link for link in old.auto_links}, {link.key: link for link in new.auto_links},
                     AUTO_LINK_TYPE, deletes, creates)  # fmt: skip
    _replace_changed({r.route_name: r for r in old.link_routes}, {r.route_name: r for r in new.link_routes},
                     "linkRoute", deletes, creates)  # fmt: skip
    # Profiles come first (created or changed: a listener may name them), deletions next (a
    # deleted listener frees its port for a new one), profiles last (nothing names them then).
    ssl_first = [c for c in updates if c.entity_type == "sslProfile"]
    others = [c for c in updates if c.entity_type != "sslProfile"]
    plan.changes = ssl_first + deletes + others + creates + profile_deletes + _log_changes(old, new)
    plan.changes += _policy_changes(old, new)
    plan.users_changed = (old.users, old.users_file) != (new.users, new.users_file)
    return plan


def _replace_changed(before: dict[str, BaseModel], after: dict[str, BaseModel], entity_type: str,
                     deletes: list[Change], creates: list[Change]) -> None:  # fmt: skip
    """Entities keyed by name that management cannot update: a changed one is deleted and
    created again."""
    for key, item in before.items():
        if after.get(key) != item:
            deletes.append(Change("delete", entity_type, key))
    for key, item in after.items():
        if before.get(key) != item:
            creates.append(Change("create", entity_type, key, _attributes(item)))


def _policy_changes(old: RouterConfig, new: RouterConfig) -> list[Change]:
    """Vhosts by hostname, then the policy's switch and default vhost (through the `vhost` and
    `policy` entities: new connections and links follow them, open ones keep their grant)."""
    changes = []
    before = {v.hostname: v for v in old.policy.vhosts}
    after = {v.hostname: v for v in new.policy.vhosts}
    for hostname in before:
        if hostname not in after:
            changes.append(Change("delete", "vhost", hostname))
    for hostname, vhost in after.items():
        if hostname not in before:
            changes.append(Change("create", "vhost", hostname, _attributes(vhost)))
        elif before[hostname] != vhost:
            changes.append(Change("update", "vhost", hostname, _attributes(vhost)))
    switch = ("enabled", "default_vhost")
    if any(getattr(old.policy, f) != getattr(new.policy, f) for f in switch):
        changes.append(Change("update", "policy", "policy", {f: getattr(new.policy, f) for f in switch}))
    return changes


def _log_changes(old: RouterConfig, new: RouterConfig) -> list[Change]:
    changes = []
    for module in sorted(set(old.log_levels) | set(new.log_levels)):
        before, after = old.log_levels.get(module), new.log_levels.get(module)
        if before != after:  # a module no longer named inherits again
            changes.append(Change("update", "log", module, {"enable": after or "default"}))
    return changes


def apply_log_levels(agent: Any, config: RouterConfig) -> ReloadReport:
    """At start: `config.log_levels` through the management `log` entity."""
    return apply_reload(agent, plan_reload(config.model_copy(update={"log_levels": {}}), config), "configuration")


def _address_key(agent: Any, rule: AddressConfig) -> str | None:
    for entry in agent.address_rules:
        if entry.rule == rule:
            return str(entry.identity)
    return None


def _set_users(agent: Any, new: RouterConfig) -> None:
    agent.config = agent.config.model_copy(update={"users": new.users, "users_file": new.users_file})


def apply_reload(agent: Any, plan: ReloadPlan, what: str = "configuration reload") -> ReloadReport:
    """Apply `plan` through `agent` (a ManagementAgent). Never raises for a refused change: it
    is logged and listed in the report's `failed`."""
    from ..management.model import ManagementError

    report = ReloadReport(needs_restart=list(plan.needs_restart))
    for section in plan.needs_restart:
        log.warning("%s: %s changed but is read only at start; restart the router to apply it", what, section)
    # Users before the listeners that may offer PLAIN or SCRAM for them, unless users go away
    # (then after the listeners that offered those mechanisms have changed).
    users_first = plan.users_changed and bool(plan.new.users or plan.new.users_file)
    if users_first:
        _set_users(agent, plan.new)
        report.applied.append("update users")
    for change in plan.changes:
        try:
            _apply_one(agent, change)
        except ManagementError as exc:
            log.error("%s: %s refused: %s", what, change, exc.description)
            report.failed.append(f"{change}: {exc.description}")
            continue
        except Exception as exc:  # a bug must cost this change only, never the router
            log.exception("%s: %s failed", what, change)
            report.failed.append(f"{change}: {type(exc).__name__}: {exc}")
            continue
        log.info("%s: %s", what, change)
        report.applied.append(str(change))
    if plan.users_changed and not users_first:
        _set_users(agent, plan.new)
        report.applied.append("update users")
    if plan.users_changed:
        log.info("%s: update users (new logins use them)", what)
    return report


def _apply_one(agent: Any, change: Change) -> None:
    # Imported here, as the server imports the agent: only a router that reloads loads them.
    from ..management.model import ManagementError

    if change.entity_type == "router.config.address":
        assert change.rule is not None
        if change.operation == "create":
            agent.create(change.entity_type, change.attributes)
            return
        key = _address_key(agent, change.rule)
        if key is None:
            raise ManagementError(404, "no such address rule is in force (deleted through management?)")
        agent.delete(change.entity_type, key)
        return
    key = change.name if change.entity_type == AUTO_LINK_TYPE else f"{change.entity_type}/{change.name}"
    if change.entity_type == "log":
        from ..management.logs import ROOT_LOGGER

        logging.getLogger(ROOT_LOGGER if change.name == "DEFAULT" else change.name)  # known from now on
        agent.update("log", key, change.attributes)
        return
    if change.operation == "create":
        agent.create(change.entity_type, change.attributes)
    elif change.operation == "update":
        attributes = {k: v for k, v in change.attributes.items() if k != "name"}
        agent.update(change.entity_type, key, attributes)
    else:
        agent.delete(change.entity_type, key)


def describe(changes: Iterable[str]) -> str:
    items = list(changes)
    return ", ".join(items) if items else "nothing"
