"""`router manage` against a real `router run` process: get-types/-attributes/-operations,
query, create/read/update/delete with JSON in (ATTR=VALUE pairs or --stdin) and out, a listener
created at run time that accepts connections and refuses them once deleted, `--router <own id>`,
get-mgmt-nodes, and the errors a user meets: unreachable router, unknown type, bad attribute,
bad value, bad JSON (one line on stderr, non-zero exit, no traceback).

One router serves the module; each test uses names of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from router.net.client import connect

from .support.management import ProcessRouter, cli, cli_json, one_line_error, router_with_http

ROUTER_ID = "manage-router"
PREFIX = "org.apache.qpid.dispatch."


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessRouter]:
    with router_with_http(tmp_path_factory.mktemp("manage"), ROUTER_ID) as proc:
        yield proc


def manage(router: ProcessRouter, *args: str, stdin: str | None = None) -> Any:
    return cli_json("manage", *args, "-b", router.bus, stdin=stdin)


def test_types_attributes_operations_and_nodes(router: ProcessRouter) -> None:
    types = manage(router, "get-types")
    assert isinstance(types, dict)
    for short in ("router", "listener", "connector", "router.config.address", "connection", "router.link",
                  "router.address", "router.node", "log", "memory"):  # fmt: skip
        assert PREFIX + short in types, short
    assert types[PREFIX + "listener"] == [PREFIX + "entity", PREFIX + "configurationEntity"]
    assert manage(router, "get-types", "router.address") == {
        PREFIX + "router.address": [PREFIX + "entity", PREFIX + "operationalEntity"]
    }
    attributes = manage(router, "get-attributes", "router.address")
    wanted = {"name", "distribution", "subscriberCount", "remoteCount", "deliveriesIngress", "deliveriesEgress"}
    assert wanted <= set(attributes[PREFIX + "router.address"])
    assert manage(router, "get-operations", "log") == {PREFIX + "log": ["READ", "UPDATE"]}
    assert manage(router, "get-mgmt-nodes") == [f"amqp:/_topo/0/{ROUTER_ID}/$management"]
    # The same through the mesh address of this router.
    assert manage(router, "get-mgmt-nodes", "--router", ROUTER_ID) == [f"amqp:/_topo/0/{ROUTER_ID}/$management"]


def test_query_with_and_without_attribute_names(router: ProcessRouter) -> None:
    [listener] = manage(router, "query", "--type", "listener")
    assert listener["name"] == "amqp" and listener["boundPort"] == router.amqp_port and listener["maxSessions"] == 256
    rows = manage(router, "query", "--type", "org.apache.qpid.dispatch.router.address", "name", "subscriberCount")
    assert isinstance(rows, list) and all(set(row) == {"name", "subscriberCount"} for row in rows)
    assert "M0$management" in {row["name"] for row in rows}
    [router_entity] = manage(router, "query", "--type", "router", "id", "mode", "--router", ROUTER_ID)
    assert router_entity == {"id": ROUTER_ID, "mode": "standalone"}
    one_line = cli("manage", "query", "--type", "router", "id", "--indent", "0", "-b", router.bus)
    assert one_line.stdout == f'[{{"id": "{ROUTER_ID}"}}]\n'


def test_address_rule_create_read_update_delete(router: ProcessRouter) -> None:
    created = manage(router, "create", "--type", "address", "--name", "cli-orders", "prefix=cli.orders", "distribution=closest")
    assert isinstance(created, dict)
    assert (created["name"], created["prefix"], created["distribution"]) == ("cli-orders", "cli.orders", "closest")
    assert created["type"] == PREFIX + "router.config.address"
    identity = created["identity"]
    assert manage(router, "read", "--type", "address", "--name", "cli-orders") == created
    assert manage(router, "read", "--type", "router.config.address", "--identity", identity) == created
    updated = manage(router, "update", "--type", "address", "--name", "cli-orders", "distribution=multicast")
    assert updated == {**created, "distribution": "multicast"}
    reset = manage(router, "update", "--type", "address", "--identity", identity, "distribution")  # ATTR alone: default
    assert isinstance(reset, dict) and reset["distribution"] == "balanced"
    deleted = cli("manage", "delete", "--type", "address", "--name", "cli-orders", "-b", router.bus)
    assert deleted.returncode == 0 and deleted.stdout == "" and deleted.stderr == ""
    gone = one_line_error(cli("manage", "read", "--type", "address", "--name", "cli-orders", "-b", router.bus))
    assert gone == f"error: {router.bus}: READ address cli-orders: 404 address 'cli-orders' was deleted"


def test_create_from_stdin_json(router: ProcessRouter) -> None:
    one = manage(router, "create", "--type", "address", "--stdin", stdin=json.dumps({"name": "cli-one", "pattern": "one.*"}))
    assert isinstance(one, dict) and one["pattern"] == "one.*" and one["name"] == "cli-one"
    batch = [{"type": "address", "name": "cli-a", "prefix": "a"}, {"type": "address", "name": "cli-b", "prefix": "b"}]
    made = manage(router, "create", "--stdin", stdin=json.dumps(batch))
    assert isinstance(made, list) and [m["name"] for m in made] == ["cli-a", "cli-b"]
    names = {row["name"] for row in manage(router, "query", "--type", "address", "name")}
    assert {"cli-one", "cli-a", "cli-b"} <= names
    for name in ("cli-one", "cli-a", "cli-b"):
        assert cli("manage", "delete", "--type", "address", "--name", name, "-b", router.bus).returncode == 0


async def _connects(port: int) -> bool:
    try:
        with trio.fail_after(5):
            async with connect("127.0.0.1", port):
                return True
    except OSError:
        return False


def test_a_listener_created_at_run_time_accepts_and_refuses_once_deleted(router: ProcessRouter) -> None:
    listener = manage(router, "create", "--type", "listener", "name=cli-extra", "host=127.0.0.1", "port=0", "linkCapacity=7")
    assert isinstance(listener, dict) and listener["linkCapacity"] == 7
    port = listener["boundPort"]
    assert isinstance(port, int) and port not in (0, router.amqp_port)
    assert trio.run(_connects, port)
    assert cli("manage", "delete", "--type", "listener", "--name", "cli-extra", "-b", router.bus).returncode == 0
    assert not trio.run(_connects, port)


def test_log_level_changes_at_run_time(router: ProcessRouter) -> None:
    changed = manage(router, "update", "--type", "log", "--name", "log/DEFAULT", "enable=warning+")
    assert isinstance(changed, dict) and changed["enable"] == "warning+"
    restored = manage(router, "update", "--type", "log", "--name", "log/DEFAULT", "enable=info+")
    assert isinstance(restored, dict) and restored["enable"] == "info+"


def test_errors_the_router_answers_are_one_line(router: ProcessRouter) -> None:
    bus = router.bus
    unknown_type = one_line_error(cli("manage", "query", "--type", "queue", "-b", bus))
    assert unknown_type == f"error: {bus}: QUERY queue: 404 unknown entity type 'queue'"
    create_unknown = one_line_error(cli("manage", "create", "--type", "queue", "name=q", "-b", bus))
    assert create_unknown == f"error: {bus}: CREATE queue q: 400 unknown entity type 'queue'"
    bad_attribute = one_line_error(cli("manage", "create", "--type", "address", "prefix=x", "bogus=1", "-b", bus))
    assert bad_attribute.startswith(f"error: {bus}: CREATE address: 400 unknown attribute 'bogus'")
    bad_value = one_line_error(cli("manage", "create", "--type", "address", "prefix=x", "distribution=sideways", "-b", bus))
    assert "400" in bad_value and "distribution" in bad_value
    bad_query = one_line_error(cli("manage", "query", "--type", "router", "nonsense", "-b", bus))
    assert bad_query == f"error: {bus}: QUERY router: 400 unknown attributes ['nonsense'] for router"
    not_allowed = one_line_error(cli("manage", "delete", "--type", "router", "--name", ROUTER_ID, "-b", bus))
    assert "501" in not_allowed and "DELETE is not allowed on router entities" in not_allowed
    remote = one_line_error(cli("manage", "query", "--type", "router", "--router", "elsewhere", "-b", bus))
    assert remote == f"error: {bus}: no management node at _topo/0/elsewhere/$management (is the router id right?)"
    # Nothing above changed the router.
    assert [r["name"] for r in manage(router, "query", "--type", "address")] == []


def test_usage_and_connection_errors_are_one_line(router: ProcessRouter) -> None:
    bus = router.bus
    bad_json = one_line_error(cli("manage", "create", "--type", "address", "--stdin", "-b", bus, stdin="{prefix: x"), code=2)
    assert bad_json.startswith("error: stdin: invalid JSON: ")
    not_a_map = one_line_error(cli("manage", "create", "--type", "address", "--stdin", "-b", bus, stdin="[1, 2]"), code=2)
    assert not_a_map == "error: stdin: expected a JSON map of attributes, or a list of maps"
    bad_pair = one_line_error(cli("manage", "create", "--type", "address", "prefix", "-b", bus), code=2)
    assert bad_pair == "error: expected ATTR=VALUE, got 'prefix'"
    no_key = one_line_error(cli("manage", "read", "--type", "address", "-b", bus), code=2)
    assert no_key == "error: give --name or --identity"
    unreachable = one_line_error(cli("manage", "get-types", "-b", "127.0.0.1:1"))
    assert unreachable == "error: cannot connect to 127.0.0.1:1: Connection refused"
