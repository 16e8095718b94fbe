"""`router send` and `router receive`: small AMQP 1.0 clients on our engine, for demos and smoke
tests of any router or broker.

Owns: building the messages from the options, pipelined sending with every outcome awaited,
receiving with a credit window that never asks for more than the count still wanted (so a
receiver that stops early leaves nothing delivered-but-unsettled behind), the summaries
(a rich table on a terminal, plain `outcome count` lines otherwise) and the exit codes.
Must not touch: router internals; everything goes through router.net.client.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from typing import Annotated, Any

import trio
import typer
from rich.console import Console
from rich.table import Table

from ..amqp.message import Message, encode_message
from ..amqp.messaging import AmqpValue, Data
from ..net.client import Delivery, Sender, SendTracker, connect
from .login import Login, current, with_login
from .common import parse_bus, progress_bar, run_async, stderr, stop_on_signal, wants_progress

stdout = Console(highlight=False, soft_wrap=True)
CREDIT_NOTICE_S = 2.0  # blocked on credit this long: say so on stderr

Bus = Annotated[str, typer.Option("-b", "--bus", help="router address, HOST:PORT")]


def _connect(host: str, port: int, login: Login) -> Any:
    return connect(host, port, **login.connect_options())


def _outcome_name(state: Any) -> str:
    return "presettled" if state is None else type(state).__name__.lower()


def _outcome_detail(state: Any) -> str:
    error = getattr(state, "error", None)
    if error is not None:
        return f"{error.condition}: {error.description}" if error.description else str(error.condition)
    if getattr(state, "delivery_failed", None) is not None:
        return f"delivery-failed={state.delivery_failed}, undeliverable-here={state.undeliverable_here}"
    return ""


def _print_summary(what: str, counts: Counter[str], details: dict[str, str]) -> None:
    stdout.print(what)
    if stdout.is_terminal:
        table = Table("outcome", "messages", "detail")
        for name, n in sorted(counts.items()):
            table.add_row(name, str(n), details.get(name, ""))
        stdout.print(table)
    else:  # one `outcome count` line each: easy for scripts
        for name, n in sorted(counts.items()):
            stdout.print(f"{name} {n}")


async def _notice_when_stuck(sender: Sender, address: str) -> None:
    """Say why nothing happens: a router gives a sender credit only while something can
    receive from its address."""
    while True:
        await trio.sleep(CREDIT_NOTICE_S)
        if sender.link.credit <= 0 and not sender.unsettled:
            stderr.print(f"waiting for credit: is anything receiving from {address!r}?", markup=False)
            return


async def _send(
    host: str, port: int, address: str, count: int, payload: bytes | None,
    presettled: bool, timeout: float | None, login: Login,
) -> int:  # fmt: skip
    counts: Counter[str] = Counter()
    details: dict[str, str] = {}
    sent = 0

    def record(state: Any) -> None:
        name = _outcome_name(state)
        counts[name] += 1
        details.setdefault(name, _outcome_detail(state))  # the first one of each kind

    async with _connect(host, port, login) as client:
        sender = await client.open_sender(address, settle="settled" if presettled else "mixed")
        started = time.perf_counter()
        unsettled: deque[SendTracker] = deque()  # bounded by the credit the router gives
        bar = progress_bar(wants_progress(count, stdout), f"sending to {address}", count)
        # Ctrl-C (or SIGTERM) stops sending, not the program: the summary is still printed.
        async with stop_on_signal() as stop_scope, trio.open_nursery() as nursery:
            nursery.start_soon(_notice_when_stuck, sender, address)
            with trio.move_on_after(math.inf if timeout is None else timeout) as limit, bar as advance:
                for i in range(count):
                    body = payload if payload is not None else encode_message(Message.value(f"message {i}"))
                    unsettled.append(await sender.start_send(body, presettled=presettled))
                    sent += 1
                    while unsettled and unsettled[0].settled:
                        record(await unsettled.popleft().wait())
                        advance(1)
                while unsettled:
                    record(await unsettled.popleft().wait())
                    advance(1)
            nursery.cancel_scope.cancel()
        elapsed = time.perf_counter() - started
        stopped = "interrupted" if stop_scope.cancelled_caught else f"timed out after {timeout} s" if limit.cancelled_caught else None
        if stopped is None:
            await sender.close()
    rate = sent / elapsed if elapsed > 0 else math.inf
    _print_summary(f"sent {sent} message(s) to {address} in {elapsed:.2f} s ({rate:,.0f} msg/s)", counts, details)
    if stopped is not None:
        stderr.print(f"error: {stopped}: {sent} of {count} message(s) sent, {sum(counts.values())} settled", markup=False)
        return 130 if stop_scope.cancelled_caught else 1
    failed = {name: n for name, n in counts.items() if name not in ("accepted", "presettled")}
    if failed:
        which = ", ".join(
            f"{n} {name}" + (f" ({details[name]})" if details.get(name) else "") for name, n in sorted(failed.items())
        )
        stderr.print(f"error: {sum(failed.values())} of {count} message(s) not accepted: {which}", markup=False)
        return 1
    return 0


@with_login
def send(
    address: Annotated[str, typer.Argument(help="target address")],
    bus: Bus = "127.0.0.1:5672",
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="messages to send")] = 1,
    size: Annotated[int | None, typer.Option("--size", min=0, help="body: this many bytes of data")] = None,
    body: Annotated[str | None, typer.Option("--body", help="body: this text (default 'message <i>')")] = None,
    presettled: Annotated[bool, typer.Option("--presettled", help="send settled: no outcomes")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0, help="give up after this many seconds")] = None,
) -> None:
    """Send messages, wait for every outcome, print a summary; fail unless all were accepted."""
    if size is not None and body is not None:
        raise typer.BadParameter("give --size or --body, not both", param_hint="--size/--body")
    host, port = parse_bus(bus)
    # Encoded once: every message of a run carries the same bytes (except the default bodies).
    payload = encode_message(Message.data(b"x" * size)) if size is not None else None
    if body is not None:
        payload = encode_message(Message.value(body))
    code = run_async(f"{host}:{port}", _send, host, port, address, count, payload, presettled, timeout, current())
    raise typer.Exit(code)


def _body_text(delivery: Delivery) -> str:
    try:
        message = delivery.message
    except Exception:  # not a message we can decode: show its size rather than fail
        return f"<{len(delivery.payload)} bytes, not an AMQP message>"
    body = message.body
    if body is None:
        return "<no body>"
    if isinstance(body, AmqpValue):
        value = body.value
        return value if isinstance(value, str) else repr(value)
    if isinstance(body[0], Data):
        data = message.body_bytes
        try:
            text = data.decode("utf-8")
            if len(text) <= 200 and text.isprintable():
                return text
        except UnicodeDecodeError:
            pass
        return f"<{len(data)} bytes>"
    return repr(message.body_sequence)


async def _receive(
    host: str, port: int, address: str, count: int, timeout: float | None, window: int,
    show: bool, login: Login,
) -> int:  # fmt: skip
    received = 0
    interrupted = False
    async with _connect(host, port, login) as client:
        receiver = await client.open_receiver(address, credit=0)  # credit managed below

        def top_up() -> None:
            # Never more credit than messages still wanted: what the router sent beyond the
            # count would go back to its producer as modified when we close.
            wanted = window if count == 0 else min(window, count - received)
            outstanding = receiver.link.credit + receiver.buffered
            if outstanding < wanted and outstanding <= wanted // 2:
                receiver.flow(wanted - receiver.buffered)

        started = time.perf_counter()
        bar = progress_bar(wants_progress(count, stdout), f"receiving from {address}", count or None)
        # Ctrl-C (or SIGTERM) ends the loop, not the program: the summary is still printed.
        async with stop_on_signal() as stop_scope:
            with bar as advance:
                while count == 0 or received < count:
                    top_up()
                    delivery = None
                    with trio.move_on_after(timeout if timeout is not None else math.inf):
                        delivery = await receiver.receive()
                    if delivery is None:
                        break
                    receiver.accept(delivery)
                    received += 1
                    advance(1)
                    if show:
                        stdout.print(_body_text(delivery), markup=False)
        interrupted = stop_scope.cancelled_caught
        elapsed = time.perf_counter() - started
        await receiver.close()
    rate = received / elapsed if elapsed > 0 else math.inf
    summary = f"received {received} message(s) from {address} in {elapsed:.2f} s ({rate:,.0f} msg/s)"
    # With --print the bodies own stdout; the summary goes to stderr.
    (stderr if show else stdout).print(summary, markup=False)
    if count and received < count:
        why = "interrupted" if interrupted else f"nothing arrived for {timeout} s"
        stderr.print(f"error: only {received} of {count} message(s) received ({why})")
        return 1
    return 0


@with_login
def receive(
    address: Annotated[str, typer.Argument(help="source address")],
    bus: Bus = "127.0.0.1:5672",
    count: Annotated[int, typer.Option("-n", "--count", min=0, help="messages to receive (0: no limit)")] = 0,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0, help="stop after this many seconds without a message")] = None,
    credit: Annotated[int, typer.Option("--credit", min=1, help="credit window")] = 250,
    show: Annotated[bool, typer.Option("--print/--quiet", help="print each body, or only the count")] = True,
) -> None:
    """Receive and accept messages (COUNT of them, or until the time-out or Ctrl-C)."""
    host, port = parse_bus(bus)
    code = run_async(f"{host}:{port}", _receive, host, port, address, count, timeout, credit, show, current())
    raise typer.Exit(code)
