"""Helpers shared by the `router` commands: logging, the --bus option, progress bars, and
turning failures into one line on stderr with an exit code (never a traceback).

Owns: how errors read to a user and which exit code they get (1: the operation failed,
2: bad usage or configuration, 130: interrupted).
Must not touch: the router's internals (router.core).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import trio
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..net.errors import AuthenticationError, ClientError, ConnectionClosed, LinkDetached

LOG_LEVELS = ("debug", "info", "warning", "error")
PROGRESS_THRESHOLD = 1000  # above this many messages a progress bar is shown even in scripts

# soft_wrap: a line is never broken at the console width (error lines stay one line each,
# and scripts see what we printed even when stderr is a pipe, where rich assumes 80 columns).
stderr = Console(stderr=True, soft_wrap=True, highlight=False)


def setup_logging(level: str) -> None:
    """Log records go to stderr (stdout is kept for machine-readable lines): through rich on a
    terminal; as plain one-line records otherwise, because rich lays records out for a screen
    (padded to the console width, wrapped at 80 columns in a pipe), which suits no log file."""
    if level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"must be one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    handler: logging.Handler
    if stderr.is_terminal:
        handler = RichHandler(console=stderr, show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def parse_bus(bus: str) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` (port 5672) or `[IPv6]:PORT`."""
    host, port = bus, "5672"
    if bus.startswith("["):
        host, _, rest = bus[1:].partition("]")
        port = rest.removeprefix(":") or port
    elif bus.count(":") == 1:
        host, port = bus.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise typer.BadParameter(f"expected HOST:PORT, got {bus!r}", param_hint="--bus")
    return host, int(port)


def leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def _os_reason(exc: OSError) -> str:
    # trio reports "all attempts to connect ... failed" and keeps each attempt's error in the
    # cause: the first attempt's errno says why ("Connection refused").
    for leaf in leaves(exc.__cause__) if exc.__cause__ is not None else ():
        if isinstance(leaf, OSError) and leaf.errno:
            return os.strerror(leaf.errno)
    if exc.errno and exc.errno > 0:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)


def _amqp_error(exc: ClientError) -> str:
    error = exc.error
    if error is None:
        return str(exc)
    return f"{error.condition}: {error.description}" if error.description else str(error.condition)


def describe(exc: BaseException, target: str) -> tuple[str, int]:
    """One line for the user and an exit code; `target` is the HOST:PORT we talked to."""
    if isinstance(exc, AuthenticationError):
        return f"authentication failed at {target}: {exc}", 1
    if isinstance(exc, LinkDetached):
        return f"link refused by {target}: {_amqp_error(exc)}", 1
    if isinstance(exc, ConnectionClosed):
        return f"connection to {target} closed: {_amqp_error(exc)}", 1
    if isinstance(exc, ClientError):
        return f"{target}: {exc}", 1
    if isinstance(exc, trio.TooSlowError):
        return f"cannot connect to {target}: no AMQP connection opened in time", 1
    if isinstance(exc, OSError):
        return f"cannot connect to {target}: {_os_reason(exc)}", 1
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    return f"{type(exc).__name__}: {exc}", 1


def run_async(target: str, fn: Callable[..., Any], *args: Any) -> int:
    """trio.run(fn, *args); failures become one line on stderr and typer.Exit(code)."""
    try:
        result = trio.run(fn, *args)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:  # groups: from nurseries
        found = [leaf for leaf in leaves(exc) if not isinstance(leaf, trio.Cancelled)] or [exc]
        line, code = describe(found[0], target)
        stderr.print(f"error: {line}", markup=False)
        raise typer.Exit(code) from None
    return int(result)


def wants_progress(count: int, console: Console) -> bool:
    """A bar for long runs, or whenever `console` (stdout) is a terminal; it is drawn on
    stderr, so only when that is a terminal too (a pipe gets no partial lines)."""
    return stderr.is_terminal and (count > PROGRESS_THRESHOLD or (count > 1 and console.is_terminal))


@contextmanager
def progress_bar(enabled: bool, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; a rich progress bar on stderr when enabled, nothing otherwise."""
    if not enabled:
        yield lambda _n: None
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=stderr, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


@asynccontextmanager
async def stop_on_signal() -> AsyncIterator[trio.CancelScope]:
    """A cancel scope around the block that SIGINT and SIGTERM cancel, so that a long-running
    command can stop cleanly (and report) instead of dying with KeyboardInterrupt."""
    with trio.CancelScope() as scope, trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def watch() -> None:
            async for _ in signals:
                scope.cancel()
                return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            yield scope
            nursery.cancel_scope.cancel()
