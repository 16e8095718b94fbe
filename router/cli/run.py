"""`router run`: start a router on a configuration file or the embedded default.

Owns: loading the configuration (problems go to stderr one per line, exit 2), raising the soft
limit on open descriptors to the hard one (logged), printing one
`listening <listener> amqp://<host>:<port>` line per listener (then `listening <name>
http://<host>:<port>` per HTTP listener) once the sockets are bound (flushed: scripts and
tests wait for these lines), and graceful shutdown on SIGINT/SIGTERM
(the server stops accepting, closes every connection with amqp:connection:forced and releases
what is in flight; exit 0). A second signal during the shutdown stops at once.
Must not touch: routing (the only CLI module that reaches router.core, through RouterServer).
"""

from __future__ import annotations

import gc
import logging
import resource
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import trio
import typer

from ..config.loader import ConfigError, load_config
from ..config.models import RouterConfig
from .common import LOG_LEVELS, leaves, setup_logging, stderr

if TYPE_CHECKING:
    from ..net.server import RouterServer

log = logging.getLogger("router.run")


def default_config() -> RouterConfig:
    """The embedded default: router id from the host name, one listener on 127.0.0.1:5672,
    SASL ANONYMOUS (all of it the models' defaults)."""
    return RouterConfig()


def url(host: str, port: int, scheme: str = "amqp") -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


# When the hard limit is "unlimited", the soft one cannot be raised past the kernel's per-process
# maximum (fs.nr_open, 1,048,576 by default on Linux): ask for that.
NOFILE_UNLIMITED_TARGET = 1_048_576


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open descriptors (RLIMIT_NOFILE) to the hard one: every
    connection costs one, and the common soft default (1024) lets a few hundred idle peers
    exhaust it. Returns the (old, new) soft limit; logs what it did."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open file limit stays %d (cannot raise it to %d: %s)", soft, target, exc)
            return soft, soft
        log.info("open file limit raised from %d to %d", soft, target)
        return soft, target
    log.info("open file limit: %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
    return soft, soft


GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


def tune_gc() -> None:
    """Set the cyclic garbage collector for a running router. The hot path frees its objects by
    reference counting; the collector only ever finds the deliveries in flight alive, and walks
    them again on every young collection. Everything loaded at start-up is frozen out of its
    scans, and young collections run every 10,000 allocations instead of 700: in a chain of 3
    routers that took 7 % of the instructions per message (bench/instructions.py --routers 3)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)


def log_build() -> None:
    """One line saying whether the hot path runs compiled: an interpreted router uses about
    2.5x the CPU per message, which an operator should not have to discover from a graph."""
    from ..build_info import build_info

    info = build_info()
    (log.info if info.compiled else log.warning)("hot path %s", info.describe())


async def serve(config: RouterConfig) -> int:
    # Imported here: the rest of the CLI never loads the routing core.
    from ..net.server import RouterServer

    raise_fd_limit()
    log_build()
    server = RouterServer(config)
    # The signal receiver is open before anything binds: a SIGTERM that arrives while we
    # start still means "stop gracefully" rather than trio's default KeyboardInterrupt.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            addresses = await nursery.start(server.run)
            for name, host, port in addresses:
                print(f"listening {name} {url(host, port)}", flush=True)
            for name, host, port in server.http_addresses:
                print(f"listening {name} {url(host, port, 'http')}", flush=True)
            log.info("router %s running", config.router.id)
            tune_gc()
            nursery.start_soon(_watch_signals, signals, server, nursery.cancel_scope)
            await server.wait_stopped()
            nursery.cancel_scope.cancel()
    log.info("router %s stopped", config.router.id)
    return 0


async def _watch_signals(signals: AsyncIterator[int], server: RouterServer, scope: trio.CancelScope) -> None:
    async for signum in signals:
        if not server.stopping:
            log.info("%s: shutting down", signal.Signals(signum).name)
            server.shutdown()
        else:
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            scope.cancel()
            return


def _check_tls_files(config: RouterConfig) -> None:
    """Load every ssl profile's files once before starting: a missing or broken certificate,
    key or CA file is one line on stderr (exit 2), not a traceback."""
    if not config.ssl_profiles:
        return
    from ..net.tls import TlsError, TlsProfiles

    try:
        TlsProfiles(config.ssl_profiles)
    except TlsError as exc:
        stderr.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None


def _check_users(config: RouterConfig) -> None:
    """The users file must load before starting (one line, exit 2); building the credential
    store now also logs, at start, any user still given a plain-text password."""
    from ..config.users import UsersFileError, check_users_file, credential_store

    try:
        check_users_file(config)
    except UsersFileError as exc:
        stderr.print(f"error: users_file: {exc}", markup=False)
        raise typer.Exit(2) from None
    if config.users or config.users_file:
        credential_store(config)


def run(
    config_file: Annotated[
        Path | None, typer.Option("-c", "--config", help="YAML configuration (default: the embedded one)")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help=f"one of {', '.join(LOG_LEVELS)}")] = "info",
) -> None:
    """Run a router: on FILE, or on the embedded default (127.0.0.1:5672, SASL ANONYMOUS)."""
    setup_logging(log_level)
    try:
        config = load_config(config_file) if config_file is not None else default_config()
    except ConfigError as exc:
        for problem in exc.problems:
            stderr.print(problem, markup=False)
        raise typer.Exit(2) from None
    _check_tls_files(config)
    _check_users(config)
    try:
        code = trio.run(serve, config)
    except (OSError, ExceptionGroup) as exc:  # typically: a port is in use
        errors = [leaf for leaf in leaves(exc) if isinstance(leaf, OSError)]
        if not errors:
            raise
        stderr.print(f"error: cannot listen: {errors[0].strerror or errors[0]}", markup=False)
        raise typer.Exit(1) from None
    sys.stdout.flush()
    raise typer.Exit(code)
