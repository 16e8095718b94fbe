"""`router run`: start a router on a configuration file or the embedded default.

Owns: loading the configuration (problems go to stderr one per line, exit 2), raising the soft
limit on open descriptors to the hard one (logged), printing one
`listening <listener> amqp://<host>:<port>` line per listener (then `listening <name>
http://<host>:<port>` per HTTP listener) once the sockets are bound (flushed: scripts and
tests wait for these lines), graceful shutdown on SIGINT/SIGTERM
(the server stops accepting, takes producers' credit back and lets the deliveries in flight get
their outcomes, then releases what is left to its senders and closes every connection with
amqp:connection:forced "router shutting down"; exit 0 within `--grace-period-s`), and applying
a changed configuration file at run time, on SIGHUP or when the file's content changes (polled:
a Kubernetes ConfigMap mount swaps a symlink, so the resolved file is read, not its directory
watched); router.net.reload has the rules. A second SIGINT/SIGTERM during the shutdown stops at once.
Must not touch: routing (the only CLI module that reaches router.core, through RouterServer).
"""

from __future__ import annotations

import gc
import hashlib
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


DEFAULT_GRACE_PERIOD_S = 20.0  # below Kubernetes' default terminationGracePeriodSeconds (30)
DEFAULT_WATCH_INTERVAL_S = 2.0
GRACE_MARGIN_S = 1.0  # of the grace period kept for leaving the process after the drain


async def serve(
    config: RouterConfig,
    config_file: Path | None = None,
    grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
    watch_interval_s: float = DEFAULT_WATCH_INTERVAL_S,
) -> int:
    # Imported here: the rest of the CLI never loads the routing core.
    from ..net.server import RouterServer

    raise_fd_limit()
    log_build()
    server = RouterServer(config, drain_s=max(0.1, grace_period_s - GRACE_MARGIN_S))
    reloader = Reloader(server, config_file)
    if config.log_levels and server.agent is not None:
        from ..net.reload import apply_log_levels

        apply_log_levels(server.agent, config)
    # The signal receiver is open before anything binds: a SIGTERM that arrives while we
    # start still means "stop gracefully" rather than trio's default KeyboardInterrupt.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            addresses = await nursery.start(server.run)
            for name, host, port in addresses:
                print(f"listening {name} {url(host, port)}", flush=True)
            for name, host, port in server.http_addresses:
                print(f"listening {name} {url(host, port, 'http')}", flush=True)
            log.info("router %s running", config.router.id)
            tune_gc()
            nursery.start_soon(_watch_signals, signals, server, nursery.cancel_scope, reloader, grace_period_s)
            if config_file is not None and watch_interval_s > 0:
                nursery.start_soon(reloader.watch, watch_interval_s)
            await server.wait_stopped()
            nursery.cancel_scope.cancel()
    log.info("router %s stopped", config.router.id)
    return 0


class Reloader:
    """Applies the configuration file again when it changes (`watch`) or on SIGHUP (`reload`)."""

    def __init__(self, server: RouterServer, path: Path | None) -> None:
        self.server = server
        self.path = path
        self.digest = self._digest()

    def _digest(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            # open() follows symlinks: a ConfigMap's swapped `..data` link is seen as new content.
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None  # mid-swap, or gone: the next look decides

    async def watch(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            digest = self._digest()
            if digest is not None and digest != self.digest:
                self.reload("the file changed")

    def reload(self, reason: str) -> bool:
        """Load and apply the file; True if it was applied (in whole or in part)."""
        from ..config.users import UsersFileError, check_users_file
        from ..net.reload import ReloadRefused, describe

        if self.path is None:
            log.warning("%s: no configuration file to reload (running on the embedded default)", reason)
            return False
        if self.server.stopping:
            return False
        self.digest = self._digest()
        try:
            new = load_config(self.path)
            check_users_file(new)
            report = self.server.reload(new)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("configuration reload refused, the running configuration stays: %s", problem)
            return False
        except UsersFileError as exc:
            log.error("configuration reload refused, the running configuration stays: users_file: %s", exc)
            return False
        except ReloadRefused as exc:
            log.error("configuration reload refused, the running configuration stays: %s", exc)
            return False
        except Exception:  # a bug in reloading must not stop a running router
            log.exception("configuration reload failed (%s)", reason)
            return False
        log.info("configuration reloaded (%s): %s applied%s", reason, describe(report.applied),
                 f"; refused: {describe(report.failed)}" if report.failed else "")  # fmt: skip
        return True


async def _watch_signals(
    signals: AsyncIterator[int], server: RouterServer, scope: trio.CancelScope, reloader: Reloader,
    grace_period_s: float,
) -> None:  # fmt: skip
    async for signum in signals:
        if signum == signal.SIGHUP:
            reloader.reload("SIGHUP")
        elif not server.stopping:
            log.info("%s: shutting down (grace period %g s)", signal.Signals(signum).name, grace_period_s)
            server.shutdown()
            # The drain is bounded by the server's drain_s; this is the backstop.
            scope.deadline = min(scope.deadline, trio.current_time() + grace_period_s)
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
    grace_period_s: Annotated[
        float, typer.Option("--grace-period-s", min=0.5, help="on SIGTERM/SIGINT: exit within this many seconds")
    ] = DEFAULT_GRACE_PERIOD_S,
    watch_interval_s: Annotated[
        float, typer.Option("--watch-interval-s", min=0.0, help="look for a changed configuration file this often; 0: only on SIGHUP")
    ] = DEFAULT_WATCH_INTERVAL_S,
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
        code = trio.run(serve, config, config_file, grace_period_s, watch_interval_s)
    except (OSError, ExceptionGroup) as exc:  # typically: a port is in use
        errors = [leaf for leaf in leaves(exc) if isinstance(leaf, OSError)]
        if not errors:
            raise
        stderr.print(f"error: cannot listen: {errors[0].strerror or errors[0]}", markup=False)
        raise typer.Exit(1) from None
    sys.stdout.flush()
    raise typer.Exit(code)
