"""The `mem_network` fixture: a router.testing.memrouter.MemNetwork on trio's autojump clock.

    async def test_something(autojump_clock: MockClock, mem_network: MemNetwork) -> None:
        router = await mem_network.start(config)
        async with router.connect() as client:
            ...

pytest-trio takes the clock from the test's own arguments only, so the test names
`autojump_clock` itself; the fixture refuses to run on a real clock (its routers would then
wait real seconds). See router/testing/memrouter.py for what may not run on it (threads,
sockets, loops that never block).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from router.testing.memrouter import MemNetwork, mem_network_running


@pytest.fixture
async def mem_network() -> AsyncIterator[MemNetwork]:
    if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        pytest.fail("mem_network runs on trio's mock clock: add the autojump_clock fixture to the test's arguments")
    async with mem_network_running() as network:
        yield network
