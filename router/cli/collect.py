"""`router collect`: subscribe through any router to the flow records and write them to files.

    router collect --connect HOST:PORT --dir DIR [--address _flow/records] [login options]

Owns: the collector's connection (login options as the other commands; a first connection that
fails is a one-line error, a connection lost later is made again, 0.5 s doubling to 5 s),
reading each message's records (JSON lines, checked: a message that is not records is rejected
and counted, never written), and settling each message only after its records are on disk
(collect_files.PartitionWriter: written, synced, deduplicated on (router, boot, seq)); part
files old enough are completed (renamed for readers) every few seconds when no message comes.
Must not touch: the router's internals; the files' layout is collect_files.py's.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from ..amqp.errors import LocalUsageError
from ..amqp.message import decode_message
from ..flow.records import decode_lines
from ..net.client import connect
from ..net.errors import ClientError
from .collect_files import PartitionWriter
from .common import describe, parse_bus, run_async, stderr, stop_on_signal
from .login import Login, current, with_login

log = logging.getLogger("router.collect")
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
FINISH_POLL_S = 5.0  # how often part files old enough are completed between messages
MAX_RECORDS_PER_MESSAGE = 1_000_000


def _records(payload: bytes) -> list[dict[str, Any]]:
    try:
        message = decode_message(payload)
        body = message.body_bytes
    except Exception as exc:  # any malformed message: ValueError for the caller
        raise ValueError(f"not a message of flow records ({type(exc).__name__})") from None
    return decode_lines(body, MAX_RECORDS_PER_MESSAGE)


async def _collect(host: str, port: int, address: str, writer: PartitionWriter, credit: int, login: Login) -> int:
    target = f"{host}:{port}"
    connected = False
    delay = RETRY_FIRST_S
    refused = 0
    started = time.perf_counter()
    async with stop_on_signal() as stop:
        while not stop.cancel_called:
            try:
                async with connect(host, port, **login.connect_options()) as client:
                    receiver = await client.open_receiver(address, credit=credit)
                    if not connected:
                        stderr.print(f"collecting flow records from {address} at {target} into {writer.root}", markup=False)
                    else:
                        stderr.print(f"connected to {target} again", markup=False)
                    connected, delay = True, RETRY_FIRST_S
                    while True:
                        delivery = None
                        with trio.move_on_after(FINISH_POLL_S):  # (a channel's receive loses nothing when cancelled)
                            delivery = await receiver.receive()
                        if delivery is None:  # a quiet mesh: old part files are completed all the same
                            await trio.to_thread.run_sync(writer.finish_old)
                            continue
                        try:
                            records = _records(delivery.payload)
                        except ValueError as exc:
                            refused += 1
                            receiver.reject(delivery, "amqp:decode-error", str(exc)[:200])
                            continue
                        # Written and synced before the message is settled (in a thread: an
                        # fsync must not hold the connection's heartbeats).
                        await trio.to_thread.run_sync(writer.write, records)
                        receiver.accept(delivery)
            # LocalUsageError: the connection closed while a batch was being written, so it cannot
            # be accepted; the router sends it again (the dedupe drops what was written twice)
            except (OSError, ClientError, LocalUsageError, trio.TooSlowError) as exc:
                line, _ = describe(exc, target)
                if not connected:
                    raise  # never connected: the one-line error of the other commands
                stderr.print(f"lost the connection ({line}); connecting again in {delay:g} s", markup=False)
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
    elapsed = time.perf_counter() - started
    writer.close()
    rate = writer.written / elapsed if elapsed > 0 else math.inf
    stderr.print(
        f"collected {writer.written} record(s) in {elapsed:.1f} s ({rate:,.0f}/s), {writer.duplicates} duplicate(s) "
        f"dropped, {refused} message(s) refused" + (" (interrupted)" if stop.cancelled_caught else ""),
        markup=False,
    )  # fmt: skip
    return 0


@with_login
def collect(
    bus: Annotated[str, typer.Option("--connect", "-b", "--bus", help="router address, HOST:PORT")] = "127.0.0.1:5672",
    directory: Annotated[Path | None, typer.Option("--dir", help="root of the partitioned files (created if missing)")] = None,
    address: Annotated[str, typer.Option("--address", help="the routers' flow.mesh_address")] = "_flow/records",
    credit: Annotated[int, typer.Option("--credit", min=1, max=10_000, help="messages in flight to the collector")] = 50,
) -> None:
    """Write the mesh's flow records to DIR as gzip JSON lines, partitioned date=/hour=/router=,
    until Ctrl-C or SIGTERM; each message is settled once its records are on disk."""
    if directory is None:
        raise typer.BadParameter("give the directory to write to", param_hint="--dir")
    host, port = parse_bus(bus)
    try:
        writer = PartitionWriter(directory)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--dir") from None
    try:
        code = run_async(f"{host}:{port}", _collect, host, port, address, writer, credit, current())
    finally:
        writer.close()
    raise typer.Exit(code)
