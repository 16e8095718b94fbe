"""The vhost policy settings users of Qpid Dispatch expect (docs/security.md, "Policy"): a
vhost's aliases and max_message_size, a group's max_session_window, source_pattern and
target_pattern, allow_waypoint_links and allow_fallback_links.

- configuration: conflicts are refused with an error naming the field (an alias that selects
  another vhost, a plain list and a pattern list for one direction, `*` inside a token), and the
  anchors' settings this router does not have (allowDynamicLinkRoutes, allowAdminStatusUpdate)
  are unknown fields, not silently accepted;
- the token patterns (hypothesis): a pattern without wildcards matches only itself, `#` alone
  everything, `*` one token, `${user}` the user name taken literally;
- sans-IO: waypoint and fallback links refused and counted, the session window, the vhost's
  message-size default, management's vhost entity;
- over sockets with python-qpid-proton clients: an alias selects the vhost, target_pattern on
  links and on an anonymous sender's messages, a qd.fallback receiver refused, the router's begin
  carrying the capped window while messages still flow, the vhost's max_message_size detaching
  an oversize sender's link.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Delivery, Message
from proton.utils import LinkDetached

from router.amqp import errors as E
from router.amqp.messaging import Source, Target
from router.config.loader import ConfigError, parse_config
from router.config.models import PolicyGroup, RouterConfig
from router.core.addressing import words
from router.core.grant import message_size_limit, session_window
from router.core.policy import pattern_allowed
from router.management.model import ManagementError
from router.testing.routerharness import RouterHarness

from .support.interop import run_in_thread
from .support.router_proton import Capability, trace_frames
from .test_policy import agent_of, closed_with, policed
from .test_policy import connect as connect_core
from .test_policy_proton import PASSWORD, TIMEOUT_S, refused_link, send, vhost_stats
from .test_policy_proton import connect as connect_proton
from .tlssupport import serving


# --- configuration --------------------------------------------------------------------------------


def problems(policy: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_config({"policy": policy})
    return str(refused.value)


def vhost(hostname: str, **fields: Any) -> dict[str, Any]:
    return {"hostname": hostname, "allow_unknown_user": True, "groups": {"$default": {}}, **fields}


def test_an_alias_that_selects_another_vhost_is_refused_naming_the_field() -> None:
    taken = problems({"vhosts": [vhost("a.example"), vhost("b.example", aliases=["A.example"])]})
    assert "aliases" in taken and "'A.example' already selects vhost 'a.example'" in taken
    twice = problems({"vhosts": [vhost("a.example", aliases=["x.example"]), vhost("b.example", aliases=["X.EXAMPLE"])]})
    assert "aliases" in twice and "already selects vhost 'a.example'" in twice
    assert "aliases" in problems({"vhosts": [vhost("a.example", aliases=["a.EXAMPLE"])]})  # its own hostname
    parse_config({"policy": {"vhosts": [vhost("a.example", aliases=["c.example"]), vhost("b.example")]}})


def test_a_plain_list_and_a_pattern_list_for_one_direction_are_refused() -> None:
    both = problems(policed(targets=["orders"], target_pattern=["orders.#"]))
    assert "give targets or target_pattern, not both" in both
    assert "source_pattern" in problems(policed(sources=["a"], source_pattern=["a.*"]))
    assert "target_pattern" in problems(policed(target_pattern=["orders*"]))  # * is a whole token
    assert "source_pattern" in problems(policed(source_pattern=["#x"]))
    assert "target_pattern" in problems(policed(target_pattern=["${user}*"]))
    PolicyGroup(targets=("*",), target_pattern=("${user}.#", "a/*/c"))  # the default list is no conflict


@pytest.mark.parametrize("field", ["allow_dynamic_link_routes", "allow_admin_status_update"])
def test_the_anchors_settings_without_a_feature_here_are_unknown(field: str) -> None:
    assert field in problems(policed(**{field: True}))


def test_max_session_window_and_vhost_max_message_size_are_checked() -> None:
    assert "max_session_window" in problems(policed(max_session_window=0))
    assert "max_message_size" in problems({"vhosts": [vhost("a.example", max_message_size=0)]})


# --- token patterns -------------------------------------------------------------------------------

tokens = st.text(st.sampled_from("ab./"), min_size=1, max_size=10)
addresses = st.text(st.sampled_from("ab./*#"), min_size=0, max_size=10)


@given(tokens, addresses)
def test_a_pattern_without_wildcards_matches_only_itself(pattern: str, address: str) -> None:
    """Itself token by token: `.` and `/` separate tokens alike (as address rules)."""
    assert pattern_allowed((pattern,), address, "u") == (words(pattern) == words(address))


@given(addresses, st.one_of(st.none(), st.text(max_size=8)))
def test_hash_alone_matches_everything_and_star_one_token(address: str, user: str | None) -> None:
    assert pattern_allowed(("#",), address, user)
    assert pattern_allowed(("*",), address, user) == (len(words(address)) == 1)
    assert pattern_allowed(("a.#",), "a." + address, user) and pattern_allowed(("a.#",), "a", user)


@given(st.text(st.sampled_from("ab./*#"), min_size=1, max_size=6), addresses)
def test_the_user_is_taken_literally(user: str, address: str) -> None:
    """A `*` or `#` in a user name matches only itself; an anonymous connection matches no
    pattern naming ${user}."""
    assert pattern_allowed(("${user}",), address, user) == (words(address) == words(user))
    assert not pattern_allowed(("${user}", "${user}.#"), address, None)


def test_patterns_with_the_user() -> None:
    assert pattern_allowed(("${user}/#",), "alice/in/box", "alice")
    assert pattern_allowed(("inbox.${user}.*",), "inbox.alice.x", "alice")
    assert not pattern_allowed(("inbox.${user}.*",), "inbox.bob.x", "alice")
    assert not pattern_allowed(("orders.*",), "orders", None) and pattern_allowed(("orders.*",), "orders/eu", None)


# --- sans-IO --------------------------------------------------------------------------------------


def attach(client: Any, sending: bool, address: str, capability: str) -> Any:
    terminus: Any = (Target if sending else Source)(address=address, capabilities=(capability,))
    if sending:
        return client.session.attach_sender(f"s-{address}-{capability}", source=Source(), target=terminus)
    return client.session.attach_receiver(f"r-{address}-{capability}", source=terminus, target=Target())


def detach_error(client: Any, link: Any) -> Any:
    return next((e.error for e in client.events if type(e).__name__ == "RemoteDetach" and e.link is link), None)


def test_waypoint_and_fallback_links_are_refused_counted_and_described() -> None:
    config = {"policy": policed(allow_waypoint_links=False, allow_fallback_links=False),
              "addresses": [{"prefix": "orders", "enable_fallback": True}]}  # fmt: skip
    harness = RouterHarness(RouterConfig.model_validate(config))
    strict, other = connect_core(harness, "strict", "shop.example"), connect_core(harness, "other", None)
    links = {
        "waypoint sender": attach(strict, True, "orders", "qd.waypoint.1"),
        "waypoint receiver": attach(strict, False, "orders", "qd.waypoint"),
        "fallback receiver": attach(strict, False, "orders", "qd.fallback"),
        "not a waypoint": attach(strict, False, "orders", "qd.waypointless"),
        "elsewhere": attach(other, False, "orders", "qd.fallback"),  # the default vhost allows them
        "waypoint elsewhere": attach(other, True, "orders", "qd.waypoint.1"),
    }
    harness.pump()
    errors = {n: detach_error(other if "elsewhere" in n else strict, link) for n, link in links.items()}
    assert {n: e.condition if e else None for n, e in errors.items()} == {
        "waypoint sender": E.UNAUTHORIZED_ACCESS, "waypoint receiver": E.UNAUTHORIZED_ACCESS,
        "fallback receiver": E.UNAUTHORIZED_ACCESS, "not a waypoint": None, "elsewhere": None,
        "waypoint elsewhere": None,
    }  # fmt: skip
    assert errors["fallback receiver"].description == (
        "links with the capability 'qd.fallback' are not allowed for group '$default' of vhost 'shop.example' "
        "(allow_fallback_links is false)")  # fmt: skip
    assert "allow_waypoint_links" in errors["waypoint sender"].description
    stats, unit = harness.core.policy.stats["shop.example"], harness.core.policy
    assert (stats.senders_denied, stats.receivers_denied, unit.links_denied) == (1, 2, 3)
    assert links["elsewhere"].remote_source is not None and "qd.fallback" in links["elsewhere"].remote_source.capabilities
    waypoint = links["waypoint elsewhere"].remote_target  # allowed, and an ordinary link: not echoed
    assert waypoint is not None and "qd.waypoint.1" not in (waypoint.capabilities or ())


def test_the_session_window_and_the_message_size_of_the_vhost() -> None:
    harness = RouterHarness(RouterConfig.model_validate({"policy": policed(max_frame_size=1024, max_session_window=5000)}))
    capped, free = connect_core(harness, "capped", "shop.example"), connect_core(harness, "free", None)
    assert capped.session is not None and capped.session.remote_begin is not None
    assert capped.session.remote_begin.incoming_window == 4  # 5000 bytes in frames of 1024
    assert free.session is not None and free.session.remote_begin is not None
    assert free.session.remote_begin.incoming_window == 0x7FFFFFFF
    grant = harness.core.policy.open(None, "10.0.0.1", "shop.example")[0]
    assert grant is not None and session_window(grant, 65536, 1000) == 1  # at least one frame
    groups = {"$default": {}, "big": {"users": ["u"], "max_message_size": 9000}}
    vhosts = {"enabled": True,
              "vhosts": [{"hostname": "v", "max_message_size": 2000, "allow_unknown_user": True, "groups": groups}]}  # fmt: skip
    unit = RouterHarness(RouterConfig.model_validate({"policy": vhosts})).core.policy
    default, big = unit.open(None, "h", "v")[0], unit.open("u", "h", "v")[0]
    assert message_size_limit(default, None) == (2000, True)  # the vhost's
    assert message_size_limit(big, None) == (9000, True)  # the group's wins
    assert message_size_limit(default, 1000) == (1000, False)  # the router's smaller limit


def test_management_reads_and_creates_the_new_settings() -> None:
    harness = RouterHarness(RouterConfig.model_validate({"policy": policed(target_pattern=["orders.*"])}))
    agent = agent_of(harness)
    group = {"maxSessionWindow": 8192, "sourcePattern": ["${user}.#"], "allowWaypointLinks": False,
             "allowFallbackLinks": False}  # fmt: skip
    created = agent.create("vhost", {"hostname": "new.example", "aliases": ["New.Example.NET"], "maxMessageSize": 4096,
                                     "allowUnknownUser": True, "groups": {"$default": group}})  # fmt: skip
    assert created["aliases"] == ["New.Example.NET"] and created["maxMessageSize"] == 4096
    [read] = [v for v in agent.entities("vhost") if v["hostname"] == "new.example"]
    assert {k: read["groups"]["$default"][k] for k in group} == group
    assert read["groups"]["$default"]["targetPattern"] is None
    [shop] = [v for v in agent.entities("vhost") if v["hostname"] == "shop.example"]
    assert shop["groups"]["$default"]["targetPattern"] == ["orders.*"] and shop["aliases"] == []
    client = connect_core(harness, "c", "new.example.net")  # the alias, any case
    assert closed_with(client) is None and harness.core.policy.stats["new.example"].current == 1
    with pytest.raises(ManagementError) as taken:
        agent.create("vhost", {"hostname": "other.example", "aliases": ["new.example.net"]})
    assert taken.value.status == 400 and "aliases" in taken.value.description
    with pytest.raises(ManagementError) as unknown:
        agent.update("vhost", "vhost/new.example", {"groups": {"$default": {"allowDynamicLinkRoutes": True}}})
    assert unknown.value.status == 400 and "allowDynamicLinkRoutes" in unknown.value.description
    with pytest.raises(ManagementError) as both:
        agent.update("vhost", "vhost/new.example", {"groups": {"$default": {"sources": ["a"], "sourcePattern": ["a"]}}})
    assert both.value.status == 400 and "source_pattern" in both.value.description


# --- over sockets -----------------------------------------------------------------------------------


def proton_config() -> dict[str, Any]:
    traders = {"users": ["alice"], "target_pattern": ["orders.*", "${user}/#"], "allow_fallback_links": False,
               "allow_waypoint_links": False}  # fmt: skip
    windowed = {"users": ["bob"], "max_frame_size": 4096, "max_session_window": 10000, "max_message_size": 100_000}
    return {
        "router": {"id": "policed"},
        "users": [{"username": name, "password": PASSWORD} for name in ("alice", "bob")],
        "listeners": [{"name": "amqp", "port": 0, "sasl_mechanisms": ["PLAIN", "ANONYMOUS"], "allow_insecure_plain": True}],
        "addresses": [{"prefix": "orders", "enable_fallback": True}],
        "policy": {
            "enabled": True,
            "vhosts": [
                {"hostname": "example.com", "aliases": ["Shop.Example.NET"], "max_message_size": 2000,
                 "groups": {"traders": traders, "windowed": windowed}},
                {"hostname": "$default", "allow_unknown_user": True, "groups": {"$default": {}}},
            ],
        },
    }  # fmt: skip


@pytest.mark.interop
async def test_an_alias_target_patterns_and_fallback_links_over_sockets() -> None:
    async with serving(proton_config()) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            conn = connect_proton(port, "shop.example.net", "alice")  # the alias, in another case
            other = connect_proton(port)  # the default vhost: fallback links allowed
            try:
                got: dict[str, Any] = {
                    address: refused_link(lambda: conn.create_sender(address))
                    for address in ("orders.eu", "orders", "orders.eu.x", "alice/in/box", "bob/x")
                }
                fallback = Capability("qd.fallback")
                got["fallback receiver"] = refused_link(lambda: conn.create_receiver("orders", options=fallback))
                got["elsewhere"] = refused_link(lambda: other.create_receiver("orders", options=fallback))
                receiver = conn.create_receiver("orders.eu", credit=10)
                anonymous = conn.create_sender(None)
                got["to orders.eu"] = send(conn, anonymous, Message(address="orders.eu", body="ok"), receiver).remote_state
                refused = send(conn, anonymous, Message(address="invoices", body="no"))
                got["to invoices"] = (refused.remote_state, str(refused.remote.condition.name))
            finally:
                conn.close()
                other.close()
            return got

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
        unauthorized = "amqp:unauthorized-access"
        assert got == {
            "orders.eu": None, "orders": unauthorized, "orders.eu.x": unauthorized, "alice/in/box": None,
            "bob/x": unauthorized, "fallback receiver": unauthorized, "elsewhere": None,
            "to orders.eu": Delivery.ACCEPTED, "to invoices": (Delivery.REJECTED, unauthorized),
        }  # fmt: skip
        stats = vhost_stats(server, "example.com")  # the alias's connection counts under the vhost
        assert (stats["connectionsApproved"], stats["senderDenied"], stats["receiverDenied"]) == (1, 3, 1)
        assert stats["messagesDenied"] == 1


@pytest.mark.interop
async def test_the_session_window_is_capped_and_the_vhost_message_size_detaches() -> None:
    async with serving(proton_config()) as server:
        port = server.listener_ports()["amqp"]

        def scenario() -> dict[str, Any]:
            got: dict[str, Any] = {}
            bob = connect_proton(port, "example.com", "bob")
            frames: list[str] = []
            assert bob.conn is not None
            trace_frames(bob.conn.transport, frames)
            try:
                receiver = bob.create_receiver("orders", credit=10)  # begins the session (traced)
                sender = bob.create_sender("orders")
                begins = [line for line in frames if "<- @begin" in line]
                found = re.search(r"incoming-window=(0x[0-9a-f]+|\d+)", begins[0]) if begins else None
                got["window"] = int(found.group(1), 0) if found else begins
                body = "x" * 20_000  # five frames of 4096 each, through a window of two
                got["large"] = [send(bob, sender, Message(body=body), receiver).remote_state for _ in range(3)]
            finally:
                bob.close()
            alice = connect_proton(port, "example.com", "alice")  # no max_message_size: the vhost's 2000
            watcher = connect_proton(port)  # a consumer elsewhere, so that alice's sender gets credit
            try:
                watcher.create_receiver("orders.big", credit=10)
                try:
                    alice.create_sender("orders.big").send(Message(body="x" * 5000), timeout=TIMEOUT_S)
                    got["oversize"] = "sent"
                except LinkDetached as exc:
                    condition = exc.link.remote_condition
                    got["oversize"] = str(condition.name) if condition is not None else None
            finally:
                alice.close()
                watcher.close()
            return got

        got = await run_in_thread(scenario, timeout_s=3 * TIMEOUT_S)
        assert got == {"window": 2, "large": [Delivery.ACCEPTED] * 3, "oversize": "amqp:link:message-size-exceeded"}
        assert vhost_stats(server, "example.com")["maxMessageSizeDenied"] == 1
