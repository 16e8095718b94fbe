"""Shared test settings.

The hypothesis profile keeps the codec suite fast enough to run on every change (a few hundred
examples per property, no per-example deadline because the first call into Proton's C library
is slow) and stores no example database in the working tree.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A thorough run: HYPOTHESIS_PROFILE=thorough
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# --- interoperability tests: nothing may outlive a test -------------------------------------------

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

from .support.interop import listening_tcp_ports, proton_threads, socket_fds  # noqa: E402


@pytest.fixture(autouse=True)
def _interop_leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked `interop` must stop every Proton thread, listener and socket they start."""
    if request.node.get_closest_marker("interop") is None:
        yield
        return
    listening, sockets = listening_tcp_ports(), socket_fds()
    yield
    threads = proton_threads()
    for thread in threads:
        thread.join(timeout=2.0)
    assert not [t.name for t in threads if t.is_alive()], "Proton threads left running"
    assert listening_tcp_ports() - listening == set(), "listening sockets left open"
    assert socket_fds() - sockets == set(), "sockets left open"


# --- the pipeline's tests: one local SparkSession for the whole run (tests/support/sparkfixtures.py)

from .support.sparkfixtures import flow_job, spark  # noqa: E402, F401
# --- whole routers on memory streams and trio's autojump clock (router/testing/memrouter.py) ------

from .support.memrouter import mem_network  # noqa: E402,F401
