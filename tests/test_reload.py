"""Applying a changed configuration file at run time: the plan (what changed), applying it to a
running RouterServer through the management agent, and `router run` on SIGHUP and on a file
change, with an invalid file refused while the running configuration stays in force."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from router.amqp.message import Message
from router.config.models import AddressConfig, Connector, Listener, RouterConfig, RouterSection
from router.net.busypoll import busy_poll_in_force
from router.net.client import connect
from router.net.reload import ReloadRefused, plan_reload
from router.net.server import RouterServer
from tests.support.router_process import RouterProcess, core_ready

ROUTER = RouterSection(id="reload-router")
AMQP = Listener(name="amqp", port=0)


def config(**fields: Any) -> RouterConfig:
    fields.setdefault("listeners", (AMQP,))
    fields.setdefault("router", ROUTER)
    return RouterConfig(**fields)


# --- the plan -------------------------------------------------------------------------------------


def test_identity_changes_refuse_the_whole_file() -> None:
    with pytest.raises(ReloadRefused, match=r"router\.id"):
        plan_reload(config(), RouterConfig(router=RouterSection(id="someone-else"), listeners=(AMQP,)))
    with pytest.raises(ReloadRefused, match=r"router\.mode"):
        plan_reload(config(), RouterConfig(router=RouterSection(id=ROUTER.id, mode="interior"), listeners=(AMQP,)))


def test_the_plan_names_every_change_in_a_valid_order() -> None:
    edge = RouterSection(id=ROUTER.id, mode="edge")
    old = config(router=edge, addresses=(AddressConfig(prefix="a", distribution="multicast"), AddressConfig(prefix="keep")),
                 connectors=(Connector(name="gone", host="127.0.0.1", port=1, role="edge"),))  # fmt: skip
    new = config(router=edge, listeners=(AMQP.model_copy(update={"idle_timeout_s": 5.0}), Listener(name="two", port=0)),
                 addresses=(AddressConfig(prefix="keep"), AddressConfig(prefix="b")))  # fmt: skip
    plan = plan_reload(old, new)
    assert [str(c) for c in plan.changes] == [
        "delete connector gone", "delete router.config.address prefix a",  # deletions first
        "update listener amqp", "create listener two", "create router.config.address prefix b",
    ]
    assert not plan.users_changed and plan.needs_restart == []


def test_sections_read_at_start_are_reported_not_applied() -> None:
    new = config(limits={"max_connections": 10}, router=RouterSection(id=ROUTER.id, hello_interval_s=2.0))
    plan = plan_reload(config(), new)
    assert plan.needs_restart == ["limits", "router.hello_interval_s"]
    assert plan.changes == []


def test_a_listener_of_port_zero_given_its_bound_port_is_unchanged() -> None:
    """Writing the port a listener got back into the file (so that a restart listens where peers
    redial) is no change: reopening would reset connections waiting to be accepted."""
    bound = config(listeners=(AMQP.model_copy(update={"port": 45678}),))
    assert plan_reload(config(), bound, {"amqp": 45678}).changes == []
    # Another port, or another field changed too, is an update.
    assert [str(c) for c in plan_reload(config(), bound, {"amqp": 45679}).changes] == ["update listener amqp"]
    changed = config(listeners=(AMQP.model_copy(update={"port": 45678, "idle_timeout_s": 5.0}),))
    assert [str(c) for c in plan_reload(config(), changed, {"amqp": 45678}).changes] == ["update listener amqp"]


# --- a running server -----------------------------------------------------------------------------


async def roundtrip(port: int, address: str = "reload/check") -> object:
    async with connect("127.0.0.1", port) as client:
        receiver = await client.open_receiver(address, credit=1)
        sender = await client.open_sender(address)
        tracker = await sender.start_send(Message.value("hi"))
        receiver.accept(await receiver.receive())
        return await tracker.wait()


needs_core = pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")


@needs_core
async def test_reload_applies_listeners_addresses_and_users(nursery: trio.Nursery) -> None:
    start = config(addresses=(AddressConfig(prefix="old"),))
    server = RouterServer(start)
    await nursery.start(server.run)
    new = config(listeners=(AMQP, Listener(name="two", port=0)), addresses=(AddressConfig(prefix="new", distribution="multicast"),),
                 users=({"username": "alice", "password": "secret"},))  # fmt: skip
    report = server.reload(new)
    assert report.failed == []
    assert "create listener two" in report.applied and "update users" in report.applied
    ports = server.listener_ports()
    assert set(ports) == {"amqp", "two"}
    assert type(await roundtrip(ports["two"])).__name__ == "Accepted"
    rules = [(r.rule.prefix, r.rule.distribution) for r in server.agent.address_rules]
    assert rules == [("new", "multicast")]
    assert [u.username for u in server.config.users] == ["alice"]
    # Back again: the listener goes, the first one keeps serving.
    report = server.reload(start)
    assert "delete listener two" in report.applied
    assert set(server.listener_ports()) == {"amqp"}
    assert type(await roundtrip(ports["amqp"])).__name__ == "Accepted"
    server.shutdown()


async def test_busy_poll_us_is_applied_at_run_time(nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="router.net.server")
    off = config(router=RouterSection(id=ROUTER.id, busy_poll_us=0))  # (the default polls on a pinned host)
    server = RouterServer(off)
    await nursery.start(server.run)
    assert server.poller.busy_poll_s == 0 and server.busy_poll_counters()["in_force_us"] == 0
    polling = config(router=RouterSection(id=ROUTER.id, busy_poll_us=80))
    assert plan_reload(off, polling).needs_restart == []  # not "read only at start"
    report = server.reload(polling)
    assert report.applied == ["update router.busy_poll_us 0 -> 80"] and report.needs_restart == []
    assert server.poller.busy_poll_s == 80e-6
    assert "busy polling: 80 us" in caplog.text  # (and a warning where it cannot be afforded)
    (entity,) = server.agent.entities("router")
    assert entity["busyPollUs"] == 80  # what is in force, not the file the router started with
    # The router serves on, polling; and the file unchanged is no change.
    assert type(await roundtrip(server.listener_ports()["amqp"])).__name__ == "Accepted"
    assert server.reload(polling).applied == []
    server.reload(off)
    assert server.poller.busy_poll_s == 0 and server.agent.entities("router")[0]["busyPollUs"] == 0
    # Back to the default: decided again from where the router runs (router.net.busypoll).
    assert server.reload(config()).applied == ["update router.busy_poll_us 0 -> auto"]
    assert server.busy_poll_setting is None and server.busy_poll_us == busy_poll_in_force(None)[0]
    server.shutdown()


async def test_writing_the_bound_port_into_the_file_keeps_the_listener(nursery: trio.Nursery) -> None:
    server = RouterServer(config())
    await nursery.start(server.run)
    port = server.listener_ports()["amqp"]
    sockets = server._listeners._open["amqp"].sockets
    async with connect("127.0.0.1", port) as client:  # open across the reload
        report = server.reload(config(listeners=(AMQP.model_copy(update={"port": port}),)))
        assert report.applied == [] and report.failed == []
        assert server._listeners._open["amqp"].sockets is sockets  # never closed and reopened
        receiver = await client.open_receiver("reload/kept", credit=1)
        assert receiver is not None
    assert server.listener_ports() == {"amqp": port}
    server.shutdown()


async def test_a_refused_change_is_reported_and_the_rest_applied(nursery: trio.Nursery) -> None:
    server = RouterServer(config())
    await nursery.start(server.run)
    taken = server.listener_ports()["amqp"]
    new = config(listeners=(AMQP, Listener(name="clash", port=taken)), addresses=(AddressConfig(prefix="x"),))
    report = server.reload(new)
    assert len(report.failed) == 1 and report.failed[0].startswith("create listener clash")
    assert "create router.config.address prefix x" in report.applied
    assert set(server.listener_ports()) == {"amqp"}
    with pytest.raises(ReloadRefused):
        server.reload(RouterConfig(router=RouterSection(id="other"), listeners=(AMQP,)))
    server.shutdown()


# --- `router run` ---------------------------------------------------------------------------------


async def wait_for_line(router: RouterProcess, text: str, timeout: float = 10.0) -> str:
    """The first stderr line containing `text` (the output is read by threads: look again often)."""
    with trio.fail_after(timeout):
        while True:
            for line in list(router.stderr):
                if text in line:
                    return line
            await trio.sleep(0.02)


@needs_core
@pytest.mark.process
async def test_router_run_reloads_on_sighup(tmp_path: Path) -> None:
    first = {"router": {"id": "reload-router"}, "listeners": [{"name": "amqp", "port": 0}]}
    # No file watch: each change below is applied by its SIGHUP.
    with RouterProcess.running(tmp_path, first, run_args=("--watch-interval-s", "0")) as router:
        port = router.ports["amqp"]
        path = router.config_path
        # SIGHUP: a new address rule and a new listener.
        second = dict(first, addresses=[{"prefix": "fanout", "distribution": "multicast"}],
                      listeners=[{"name": "amqp", "port": port}, {"name": "two", "port": 0}])  # fmt: skip
        path.write_text(yaml.safe_dump(second))
        router.send_signal(signal.SIGHUP)
        line = await wait_for_line(router, "configuration reloaded (SIGHUP)")
        assert "create listener two" in line and "create router.config.address prefix fanout" in line
        # An invalid file: one line naming the field, and the router goes on serving.
        path.write_text(yaml.safe_dump(dict(second, listeners=[{"name": "amqp", "port": "many"}])))
        router.send_signal(signal.SIGHUP)
        line = await wait_for_line(router, "configuration reload refused")
        assert "listeners[0].port" in line, line
        assert type(await roundtrip(port)).__name__ == "Accepted"
        # A file changing the router id is refused whole.
        path.write_text(yaml.safe_dump(dict(second, router={"id": "another"})))
        router.send_signal(signal.SIGHUP)
        line = await wait_for_line(router, "router.id: cannot change at run time")
        assert "refused" in line
        assert type(await roundtrip(port)).__name__ == "Accepted"
    assert "Traceback" not in router.output


async def test_log_levels_follow_the_file(nursery: trio.Nursery) -> None:
    import logging

    server = RouterServer(config())
    await nursery.start(server.run)
    before = logging.getLogger("router.net.reload_test").level
    try:
        report = server.reload(config(log_levels={"router.net.reload_test": "debug+"}))
        assert report.applied == ["update log router.net.reload_test"]
        assert logging.getLogger("router.net.reload_test").level == logging.DEBUG
        server.reload(config())  # no longer named: it inherits again
        assert logging.getLogger("router.net.reload_test").level == logging.NOTSET
    finally:
        logging.getLogger("router.net.reload_test").setLevel(before)
    server.shutdown()


@needs_core
@pytest.mark.process
async def test_a_configmap_style_symlink_swap_is_seen(tmp_path: Path) -> None:
    """Kubernetes mounts a ConfigMap as `router.yaml -> ..data/router.yaml` with `..data` a link to
    a timestamped directory, and updates it by swapping `..data` atomically."""
    import os


    def version(name: str, config: dict[str, Any]) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "router.yaml").write_text(yaml.safe_dump(config))

    first = {"router": {"id": "reload-router"}, "listeners": [{"name": "amqp", "port": 0}]}
    version("v1", first)
    os.symlink("v1", tmp_path / "..data")
    os.symlink("..data/router.yaml", tmp_path / "router.yaml")
    router = RouterProcess(tmp_path / "router.yaml", listeners=1, run_args=("--watch-interval-s", "0.1"))
    router.start()
    try:
        port = router.ports["amqp"]
        version("v2", dict(first, listeners=[{"name": "amqp", "port": port}, {"name": "two", "port": 0}]))
        os.symlink("v2", tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")  # the atomic swap
        line = await wait_for_line(router, "configuration reloaded (the file changed)")
        assert "create listener two" in line
        assert type(await roundtrip(port)).__name__ == "Accepted"
    finally:
        code = router.stop()
    assert code == 0, router.output


async def test_a_failing_change_costs_that_change_only(nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    server = RouterServer(config())
    await nursery.start(server.run)

    def broken(listener: Listener) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(server, "create_listener", broken)
    report = server.reload(config(listeners=(AMQP, Listener(name="two", port=0)), addresses=(AddressConfig(prefix="x"),)))
    assert [f.split(":")[0] for f in report.failed] == ["create listener two"]
    assert "create router.config.address prefix x" in report.applied
    assert not server.stopping
    server.shutdown()
