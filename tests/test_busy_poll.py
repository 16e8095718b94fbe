"""Busy polling (router.busy_poll_us): bounded, by default on only for a router pinned to one CPU
of its own (in process and under taskset); a `router run` configured with it serves
python-qpid-proton request/reply round trips and counts its busy polls in the `router` entity
(`router stat`). The poller's side (a write caught while it polls, trio's deadlines kept) is in
tests/test_net_poller.py."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton.reactor import Container

from router.config.models import RouterConfig, RouterSection
from router.net.busypoll import AUTO_US, advice, cpu_quota, in_force
from router.net.server import RouterServer

from .support.interop import run_container
from .support.management import ProcessRouter, cli_json, router_with_http
from .support.router_proton import RequestResponse

TIMEOUT_S = 10.0


def test_busy_poll_us_is_auto_by_default_and_bounded() -> None:
    assert RouterSection(id="r").busy_poll_us is None
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=-1)
    with pytest.raises(ValueError, match="busy_poll_us"):
        RouterSection(id="r", busy_poll_us=10_001)


def test_by_default_a_router_polls_only_on_a_cpu_of_its_own() -> None:
    assert in_force(None, {3}, 8, None) == (AUTO_US, "auto: pinned to CPU 3 of 8, a CPU of its own; 0 turns it off")
    assert in_force(None, {3}, 8, 1.0) == (AUTO_US, in_force(None, {3}, 8, None)[1])  # a whole CPU's quota
    assert in_force(None, {0, 1}, 8, None) == (0, "auto: the router shares its CPUs")  # two CPUs: not one of its own
    assert in_force(None, set(range(8)), 8, None)[0] == 0
    assert in_force(None, {0}, 1, None)[0] == 0  # the host's only CPU
    assert in_force(None, {2}, 4, 0.5) == (0, "auto: pinned to CPU 2, but under a CPU quota of 0.5 CPUs")
    # A setting is a setting, wherever the router runs.
    assert in_force(0, {3}, 8, None) == (0, "router.busy_poll_us")
    assert in_force(200, set(range(8)), 8, None) == (200, "router.busy_poll_us")


async def test_a_router_pinned_to_one_cpu_polls_by_default_and_not_when_told_not_to(caplog: pytest.LogCaptureFixture) -> None:
    """The placement is read from the process itself (its CPU affinity), as `taskset` or a
    Kubernetes Guaranteed pod under the static CPU manager sets it."""
    allowed = os.sched_getaffinity(0)
    if (os.cpu_count() or 1) < 2 or (cpu_quota() or 1.0) < 1.0:
        pytest.skip("needs a host with two CPUs or more, and no CPU quota below one CPU")
    try:
        os.sched_setaffinity(0, {min(allowed)})
        with caplog.at_level(logging.INFO, logger="router.net.server"):
            pinned = RouterServer(RouterConfig(router=RouterSection(id="pinned")))
        assert (pinned.busy_poll_us, pinned.busy_poll_setting) == (AUTO_US, None)
        assert f"busy polling: {AUTO_US} us" in caplog.text and f"auto: pinned to CPU {min(allowed)}" in caplog.text
        assert RouterServer(RouterConfig(router=RouterSection(id="off", busy_poll_us=0))).busy_poll_us == 0
    finally:
        os.sched_setaffinity(0, allowed)
    if len(allowed) > 1:
        assert RouterServer(RouterConfig(router=RouterSection(id="shared"))).busy_poll_us == 0


@pytest.mark.process
def test_router_run_under_taskset_polls_by_default(tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2 or (cpu_quota() or 1.0) < 1.0:
        pytest.skip("needs taskset, a host with two CPUs or more, and no CPU quota below one CPU")
    cpu = max(allowed)
    with router_with_http(tmp_path, "pinned", prefix=("taskset", "-c", str(cpu))) as router:
        assert cli_json("stat", "general", "--json", "-b", router.bus)["busyPollUs"] == AUTO_US
        assert f"auto: pinned to CPU {cpu} of" in router.process.output


def test_a_cpu_quota_is_read_from_cgroup_v2_or_v1(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path) is None  # neither: no quota known
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    assert cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")  # v2 decides when it is there
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cpu_quota(tmp_path) == 0.5


def test_busy_polling_under_a_quota_below_a_cpu_or_on_a_one_cpu_host_is_advised_against() -> None:
    assert advice(0, 0.5, 1) == []  # off: nothing to say
    assert advice(50, None, 2) == []
    assert advice(50, 1.0, 8) == []  # a whole CPU: one polling thread is never throttled
    (quota,) = advice(50, 0.5, 4)
    assert "CPU quota of 0.5 CPUs" in quota and "busy_poll_us to 0" in quota
    (one_cpu,) = advice(50, None, 1)
    assert "one CPU" in one_cpu
    assert len(advice(50, 0.25, 1)) == 2


@pytest.fixture
def busy_router(tmp_path: Path) -> Iterator[ProcessRouter]:
    with router_with_http(tmp_path, "busy", router={"id": "busy", "busy_poll_us": 200}) as router:
        yield router


@pytest.mark.interop
@pytest.mark.process
def test_a_busy_polling_router_serves_proton_request_reply_and_counts_its_polls(busy_router: ProcessRouter) -> None:
    before = cli_json("stat", "general", "--json", "-b", busy_router.bus)
    assert before["busyPollUs"] == 200
    # Each request after the previous reply (a lone message each), replies to a dynamic address.
    clients = RequestResponse(busy_router.process, "busy-requests", 20, one_at_a_time=True)
    run_container(Container(clients), timeout_s=TIMEOUT_S)
    clients.check()
    assert clients.responses == [(i, f"REQUEST {i}") for i in range(20)]
    assert clients.accepted == 40  # every request and reply was told accepted
    after = cli_json("stat", "general", "--json", "-b", busy_router.bus)
    polls = after["busyPollCaught"] + after["busyPollMissed"] - before["busyPollCaught"] - before["busyPollMissed"]
    assert polls >= 40  # at least one busy poll before each message's wake-up
    assert after["busyPollMicroseconds"] > before["busyPollMicroseconds"]
    assert "busy polling: 200 us" in busy_router.process.output  # said at start
