"""The reload plan as a property: for any two valid configurations, applying the plan from one to
the other through a real management agent (no network control: entities are only stored, but
every step is checked by the agent's own rules) refuses nothing and ends in the second."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.config.models import AddressConfig, Connector, Listener, RouterConfig, RouterSection, SslProfile, User
from router.core.router import RouterCore
from router.management.agent import ManagementAgent
from router.management.config_entities import SslProfileType
from router.net.reload import apply_reload, plan_reload

NAMES = ("a", "b", "c")


@st.composite
def configs(draw: st.DrawFn) -> RouterConfig:
    profiles = tuple(SslProfile(name=f"p{n}", cert_file=draw(st.sampled_from(["one.pem", "two.pem"])))
                     for n in draw(st.sets(st.sampled_from(NAMES))))  # fmt: skip
    users = draw(st.sampled_from([(), (User(username="alice", password="secret"),)]))
    listeners = []
    for name in sorted(draw(st.sets(st.sampled_from(NAMES)))):
        mechanisms = draw(st.sampled_from([("ANONYMOUS",), ("SCRAM-SHA-256",)] if users else [("ANONYMOUS",)]))
        profile = draw(st.sampled_from([None, *(p.name for p in profiles)]))
        listeners.append(Listener(name=name, port=0, idle_timeout_s=draw(st.sampled_from([8.0, 16.0])),
                                  sasl_mechanisms=mechanisms, ssl_profile=profile))  # fmt: skip
    connectors = tuple(Connector(name=f"to-{n}", host="127.0.0.1", port=draw(st.sampled_from([5673, 5674])))
                       for n in sorted(draw(st.sets(st.sampled_from(NAMES)))))  # fmt: skip
    addresses = tuple(AddressConfig(prefix=p, distribution=d) for p, d in draw(st.lists(
        st.tuples(st.sampled_from(["x", "y"]), st.sampled_from(["closest", "multicast"])), max_size=3)))  # fmt: skip
    levels = draw(st.dictionaries(st.sampled_from(["DEFAULT", "router.reloadprop"]), st.sampled_from(["info+", "debug+"])))
    return RouterConfig(router=RouterSection(id="prop", mode="interior"), listeners=tuple(listeners),
                        connectors=connectors, ssl_profiles=profiles, addresses=addresses, users=users,
                        log_levels=levels)  # fmt: skip


def _named(items: Any) -> dict[str, Any]:
    return {item.name: item for item in items}


@settings(max_examples=150, deadline=None)
@given(configs(), configs())
def test_applying_the_plan_ends_in_the_new_configuration(old: RouterConfig, new: RouterConfig) -> None:
    import logging

    saved = {n: logging.getLogger(n).level for n in ("router", "router.reloadprop")}
    try:
        agent = ManagementAgent(RouterCore(old), old)
        agent.register(SslProfileType())  # as the network layer's agent has it
        report = apply_reload(agent, plan_reload(RouterConfig(router=old.router, listeners=old.listeners,
                              connectors=old.connectors, ssl_profiles=old.ssl_profiles, addresses=old.addresses,
                              users=old.users), old))  # fmt: skip  (the log levels at start)
        report = apply_reload(agent, plan_reload(old, new))
        assert report.failed == []
        for section in ("listeners", "connectors", "ssl_profiles"):
            assert _named(getattr(agent.config, section)) == _named(getattr(new, section)), section
        assert sorted(map(repr, agent.config.addresses)) == sorted(map(repr, new.addresses))
        assert agent.config.users == new.users
        for module, enable in new.log_levels.items():
            name = "router" if module == "DEFAULT" else module
            assert logging.getLogger(name).level == {"info+": logging.INFO, "debug+": logging.DEBUG}[enable]
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
