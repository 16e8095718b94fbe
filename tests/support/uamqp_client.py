"""uamqp (Azure's Python binding over uAMQP-C, a C implementation of AMQP 1.0 that shares no
code with Proton) as a third-party client of the router, used at the AMQP level: SendClient and
ReceiveClient with SASL ANONYMOUS or PLAIN, no CBS token auth (the router has no `$cbs` node).

uamqp only speaks TLS (or websockets over TLS): its auth objects always build an OpenSSL tlsio,
and the binding exposes no plain socket io. So the router under test listens with TLS (a trustme
CA, tests/tlssupport.py) and every client is given the CA file (`verify=`).

The binding is synchronous: nothing happens on a connection until the code using it calls
`do_work()` (each call is one non-blocking turn of uAMQP-C's connection, a receiver's sleeps
50 ms when nothing came). So a test here drives all of its clients from one thread, in a scripted
order, with `Pump.until` turning every client until a condition holds, and runs that thread with
tests.support.interop.run_in_thread (joined, with a deadline).

What the client does that a generic peer sees (checked against the router; see
tests/test_interop_uamqp.py and the README's interop list) is described there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uamqp
from uamqp import authentication, constants, errors

from .interop import Cranks

TURN_S = 0.002  # the pause between two rounds of turns (uAMQP-C's work() does not block)


def anonymous(port: int, ca_file: str) -> Any:
    return authentication.SASLAnonymous("localhost", port=port, verify=ca_file)


def plain(port: int, ca_file: str, username: str, password: str) -> Any:
    return authentication.SASLPlain("localhost", username, password, port=port, verify=ca_file)


@dataclass
class Sent:
    """What the client's sender reported for one message: uAMQP-C's send result (Ok, Error,
    Timeout, Cancelled) and the delivery state it was given (None for accepted, else the raw
    state, e.g. the rejected error), None until the send completed."""

    result: constants.MessageSendResult | None = None
    state: Any = None

    @property
    def done(self) -> bool:
        return self.result is not None


class Sender(uamqp.SendClient):  # type: ignore[misc]
    """A SendClient that records each message's completion as the C layer reported it (the stock
    client turns a non-accepted outcome into an exception and may send the message again)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("error_policy", errors.ErrorPolicy(max_retries=0))  # what came back, as it came
        super().__init__(*args, **kwargs)
        self.sent: dict[int, Sent] = {}

    def _on_message_sent(self, message: Any, result: Any, delivery_state: Any = None) -> None:
        record = self.sent.get(id(message))
        if record is not None:
            record.result, record.state = constants.MessageSendResult(result), delivery_state
        try:
            super()._on_message_sent(message, result, delivery_state)
        except AttributeError:
            # The stock handler reads a modified outcome's fields as a rejected error and fails
            # on its missing condition (None.decode); the C callback would print and drop it.
            if record is None:
                raise

    def send_async(self, messages: Iterable[Any]) -> list[Sent]:
        """Queue `messages`; their completions fill in as the client turns."""
        records = []
        for message in messages:
            record = self.sent[id(message)] = Sent()
            records.append(record)
            self.queue_message(message)
        return records


class Receiver(uamqp.ReceiveClient):  # type: ignore[misc]
    """A ReceiveClient that settles nothing by itself (auto_complete off) and keeps every
    message it received, in order, in `messages` (settle each with its accept(), reject(),
    release() or modify())."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_complete", False)
        super().__init__(*args, **kwargs)
        self.messages: list[Any] = []

    def _message_received(self, message: Any) -> None:
        self._was_message_received = True
        self.messages.append(message)


class Pump(Cranks):
    """Turns the clients of a test, on the one thread that drives them all."""

    def until(self, condition: Callable[[], bool], *clients: Any, what: str = "") -> None:
        def turn() -> None:
            for client in clients:
                client.do_work()
            time.sleep(TURN_S)  # (uAMQP-C's work() does not block: no busy loop)

        self.turn_until(condition, turn, what or condition)

    def attached(self, client: Any, *others: Any) -> None:
        """Open `client` and turn it (and `others`) until its link is attached."""
        client.open()
        ready = [False]

        def turn() -> bool:
            ready[0] = ready[0] or bool(client.client_ready())
            return ready[0]

        self.until(turn, *others, what="the attach")

    @contextmanager
    def pair(self, rx: Any, tx: Any) -> Iterator[tuple[Any, Any]]:
        """Receiver `rx` attached, then sender `tx` (so that it has credit), both closed after
        the block whatever happens in it."""
        try:
            self.attached(rx)
            self.attached(tx, rx)
            yield rx, tx
        finally:
            close_all(tx, rx)

    def turns(self, seconds: float, *clients: Any) -> None:
        """Turn `clients` for `seconds`."""
        end = time.monotonic() + seconds
        self.until(lambda: time.monotonic() > end, *clients, what=f"{seconds} s of turns")


def close_all(*clients: Any) -> None:
    """Close every client (detach, end, close; no wait for the router's answers)."""
    for client in clients:
        client.close()
