"""Policy in the core and through management (no sockets): the address and host patterns, the
vhost chosen by the open's hostname, run-time changes through the `vhost` and `policy` entities
and a configuration reload (new connections and links follow them, open connections keep their
grant), the counters in vhostStats and /metrics, and no policy on connections between routers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.connection import Connection, ConnectionConfig
from router.config.models import Policy, PolicyGroup, RouterConfig
from router.core.connections import new_engine
from router.core.policy import PolicyUnit, address_allowed, host_allowed
from router.management import ManagementAgent
from router.management.metrics import Metrics
from router.management.model import ManagementError
from router.net.reload import apply_reload, plan_reload
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client, RouterHarness

words = st.text(st.sampled_from("abc/.-_"), min_size=1, max_size=12)


@given(words, words)
def test_a_pattern_without_wildcards_matches_only_itself(pattern: str, address: str) -> None:
    assert address_allowed((pattern,), address, "u") == (pattern == address)


@given(words, words)
def test_a_trailing_star_matches_every_rest(prefix: str, rest: str) -> None:
    assert address_allowed((prefix + "*",), prefix + rest, None)
    assert address_allowed(("*",), rest, None)


def test_user_patterns_and_hosts() -> None:
    assert address_allowed(("${user}/*",), "alice/inbox", "alice")
    assert not address_allowed(("${user}/*",), "bob/inbox", "alice")
    assert not address_allowed(("${user}/*",), "/inbox", None)  # anonymous never matches ${user}
    assert host_allowed(("10.0.0.0/8",), "10.1.2.3") and not host_allowed(("10.0.0.0/8",), "192.168.0.1")
    assert host_allowed(("192.168.0.10-192.168.0.20",), "192.168.0.15")
    assert not host_allowed(("192.168.0.10-192.168.0.20",), "192.168.0.21")
    assert host_allowed(("::1",), "[::1]") and not host_allowed(("127.0.0.1",), "localhost")
    assert host_allowed(("*",), "anything")


@pytest.mark.parametrize("pattern", ["10.0.0.0/33", "example.com", "10.0.0.9-10.0.0.1", "::1-10.0.0.1"])
def test_remote_hosts_are_checked_when_configured(pattern: str) -> None:
    with pytest.raises(ValueError, match="remote_hosts"):
        PolicyGroup(remote_hosts=(pattern,))


def policed(**group: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "vhosts": [{"hostname": "shop.example", "allow_unknown_user": True, "groups": {"$default": group}},
                   {"hostname": "$default", "allow_unknown_user": True, "groups": {"$default": {}}}],
    }  # fmt: skip


def connect(harness: RouterHarness, name: str, hostname: str | None, host: str = "10.0.0.1:5000") -> Client:
    """A client of `harness` from `host` whose open names `hostname`."""
    listener = harness.config.listeners[0]
    router_side = new_engine(harness.config, listener)
    state = harness.core.accept(router_side, listener)
    state.host = host
    engine = Connection(ConnectionConfig(container_id=name))
    client = Client(name, engine, router_side)
    harness.clients.append(client)
    engine.open(hostname=hostname)
    harness.pump()
    if engine.remote_open is not None and engine.state.remote.name != "CLOSED":
        client.session = engine.begin_session()
        harness.pump()
    return client


def closed_with(client: Client) -> str | None:
    error = client.engine.remote_error
    return str(error.condition) if error is not None else None


def refusal(client: Client, link: Any) -> str | None:
    for event in client.events:
        if type(event).__name__ == "RemoteDetach" and event.link is link:
            return str(event.error.condition) if event.error is not None else "detached"
    return None


def test_the_vhost_is_chosen_by_the_hostname_and_policy_leaves_routers_alone() -> None:
    config = RouterConfig.model_validate({"policy": policed(max_senders=0)})
    harness = RouterHarness(config)
    shop = connect(harness, "shop", "SHOP.example")  # hostnames compare without case
    other = connect(harness, "other", "unknown.example")  # the default vhost
    sender_shop, sender_other = shop.sender("orders"), other.sender("orders")
    harness.pump()
    assert refusal(shop, sender_shop) == E.RESOURCE_LIMIT_EXCEEDED
    assert refusal(other, sender_other) is None and sender_other.remotely_attached
    assert shop.engine.state.remote.name == "ACTIVE"  # the connection is kept
    # Without a default vhost, an unknown hostname is refused.
    strict = RouterHarness(RouterConfig.model_validate({"policy": {**policed(), "default_vhost": None}}))
    assert closed_with(connect(strict, "x", "unknown.example")) == E.UNAUTHORIZED_ACCESS


def test_remote_hosts_and_frame_size() -> None:
    config = RouterConfig.model_validate({"policy": policed(remote_hosts=["10.0.0.0/8"], max_frame_size=1024)})
    harness = RouterHarness(config)
    inside = connect(harness, "in", "shop.example", "10.9.9.9:4000")
    assert inside.engine.remote_max_frame_size == 1024
    assert closed_with(connect(harness, "out", "shop.example", "192.0.2.1:4000")) == E.UNAUTHORIZED_ACCESS


def agent_of(harness: RouterHarness) -> ManagementAgent:
    return ManagementAgent(harness.core, harness.config)


def test_vhosts_change_at_run_time_for_new_connections_only() -> None:
    harness = RouterHarness(RouterConfig.model_validate({"policy": policed(max_senders=1)}))
    agent = agent_of(harness)
    before = connect(harness, "before", "shop.example")
    agent.update("vhost", "vhost/shop.example", {"groups": {"$default": {"maxSenders": 0}}})
    after = connect(harness, "after", "shop.example")
    kept, refused = before.sender("orders"), after.sender("orders")
    harness.pump()
    assert refusal(before, kept) is None  # granted at its open: its group's old limit
    assert refusal(after, refused) == E.RESOURCE_LIMIT_EXCEEDED
    [entity] = [v for v in agent.entities("vhost") if v["hostname"] == "shop.example"]
    assert entity["groups"]["$default"]["maxSenders"] == 0
    agent.create("vhost", {"hostname": "new.example", "maxConnections": 0, "allowUnknownUser": True,
                           "groups": {"$default": {}}})  # fmt: skip
    assert closed_with(connect(harness, "n", "new.example")) == E.RESOURCE_LIMIT_EXCEEDED
    agent.delete("vhost", "vhost/new.example")
    assert closed_with(connect(harness, "n2", "new.example")) is None  # the default vhost now
    with pytest.raises(ManagementError) as bad:
        agent.create("vhost", {"hostname": "bad.example", "groups": {"g": {"maxSenders": -1}}})
    assert bad.value.status == 400
    agent.update("policy", "policy/policy", {"enabled": False})
    assert harness.core.policy.enabled is False
    stats = {s["hostname"]: s for s in agent.entities("vhostStats")}
    assert stats["shop.example"]["senderDenied"] == 1 and stats["shop.example"]["connectionsCurrent"] == 2
    assert "new.example" not in stats  # deleted, and none of its connections is open
    [policy] = agent.entities("policy")
    assert policy["linksDenied"] == 1 and policy["connectionsDenied"] == 1
    text = Metrics(agent).text().decode()
    assert 'amqp_router_vhost_senders_denied_total{vhost="shop.example"} 1.0' in text
    assert 'amqp_router_vhost_connections{vhost="shop.example"} 2.0' in text


def test_a_reload_applies_the_policy_section() -> None:
    old = RouterConfig.model_validate({"policy": policed(max_senders=1)})
    harness = RouterHarness(old)
    agent = agent_of(harness)
    new = RouterConfig.model_validate({"policy": {**policed(max_senders=0), "default_vhost": None}})
    report = apply_reload(agent, plan_reload(old, new))
    assert report.failed == [] and "update vhost shop.example" in report.applied
    assert harness.core.policy.rules == new.policy
    assert closed_with(connect(harness, "x", "unknown.example")) == E.UNAUTHORIZED_ACCESS


def test_connections_are_released_however_they_end() -> None:
    unit = PolicyUnit(Policy.model_validate(policed()))
    grants = [unit.open(None, "10.0.0.1", "shop.example")[0] for _ in range(3)]
    assert all(g is not None for g in grants) and unit.stats["shop.example"].current == 3
    for grant in grants:
        assert grant is not None
        unit.closed(grant)
        unit.closed(grant)  # idempotent
    stats = unit.stats["shop.example"]
    assert (stats.current, dict(stats.per_user), dict(stats.per_host)) == (0, {}, {})
    harness = RouterHarness(RouterConfig.model_validate({"policy": policed()}))
    client = connect(harness, "c", "shop.example")
    harness.disconnect(client)
    assert harness.core.policy.stats["shop.example"].current == 0


def test_connections_between_routers_are_not_subject_to_policy() -> None:
    refuse_every_client = {"enabled": True, "default_vhost": None}
    mesh = MeshHarness()
    mesh.router("A", policy=refuse_every_client)
    mesh.router("B", policy=refuse_every_client)
    mesh.link("A", "B")
    mesh.converge()
    assert mesh.cores["A"].policy.connections_processed == 0  # the inter-router open was not looked at
    client = mesh.client("A", "c")
    assert closed_with(client) == E.UNAUTHORIZED_ACCESS


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["u1", "u2", None]), st.sampled_from(["h1", "h2"]),
                          st.integers(0, 20)), max_size=60))  # fmt: skip
def test_the_connection_counts_follow_every_open_and_close(steps: list[tuple[bool, str | None, str, int]]) -> None:
    """Opens and closes in any order: the counts are those of the live grants, and a limit is
    never passed."""
    rules = Policy.model_validate({
        "enabled": True,
        "vhosts": [{"hostname": "$default", "allow_unknown_user": True, "max_connections": 5,
                    "max_connections_per_user": 3, "max_connections_per_host": 4,
                    "groups": {"g": {"users": ["u1"], "max_connections_per_user": 2}, "$default": {}}}],
    })  # fmt: skip
    unit = PolicyUnit(rules)
    live: list[Any] = []
    for opening, user, host, pick in steps:
        if opening:
            grant, error = unit.open(user, host, None)
            assert (grant is None) != (error is None)
            if grant is not None:
                live.append(grant)
        elif live:
            unit.closed(live.pop(pick % len(live)))
        stats = unit.stats_for("$default")
        assert stats.current == len(live) <= 5
        assert sum(1 for g in live if g.user == "u1") <= 2
        assert all(stats.per_user[g.user_key] <= 3 and stats.per_host[g.host] <= 4 for g in live)
        assert sum(stats.per_user.values()) == sum(stats.per_host.values()) == len(live)


def test_router_stat_vhosts_shows_the_counters() -> None:
    from rich.console import Console

    from router.cli.stat import VIEWS, ViewName, render

    harness = RouterHarness(RouterConfig.model_validate({"policy": policed(max_senders=0)}))
    client = connect(harness, "c", "shop.example")
    client.sender("orders")
    harness.pump()
    console = Console(width=300, record=True, highlight=False)
    render(VIEWS[ViewName.vhosts], agent_of(harness).entities("vhostStats"), None, console)
    text = console.export_text()
    assert text.startswith("Vhosts (policy)") and "senders denied" in text
    row = next(line for line in text.splitlines() if "shop.example" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")][:6] == ["shop.example", "1", "1", "0", "0", "1"]
    assert "10.0.0.1=1" in row


def _grant(**group: Any) -> Any:
    unit = PolicyUnit(Policy.model_validate(policed(**group)))
    grant, _ = unit.open("alice", "10.0.0.1", "shop.example")
    assert grant is not None
    return grant


@given(st.binary(max_size=300))
def test_any_bytes_get_an_answer_never_an_exception(payload: bytes) -> None:
    grant = _grant(targets=["orders"])
    error = grant.check(payload, True)
    assert error is None or error.condition in (E.DECODE_ERROR, E.UNAUTHORIZED_ACCESS)


def test_the_user_id_rule() -> None:
    from router.amqp.message import Message, encode_message
    from router.amqp.messaging import Properties

    grant = _grant(targets=["orders"])

    def check(user_id: Any, to: str | None = "orders", anonymous: bool = False) -> str | None:
        payload = encode_message(Message(properties=Properties(user_id=user_id, to=to), body=None))
        error = grant.check(payload, anonymous)
        return None if error is None else str(error.condition)

    assert check(b"alice") is None and check(None) is None
    assert check(b"bob") == E.UNAUTHORIZED_ACCESS
    assert check(b"alice", to="invoices", anonymous=True) == E.UNAUTHORIZED_ACCESS
    assert check(b"alice", to="invoices", anonymous=False) is None  # the link's target was checked at attach
    assert check("bob") == check(7) == E.DECODE_ERROR  # user-id is binary (messaging 3.2.4)
    assert grant.stats.messages_denied == 2
