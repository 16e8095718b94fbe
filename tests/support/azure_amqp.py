"""Azure's pure-Python AMQP 1.0 stack (`azure.servicebus._pyamqp`, shipped in azure-servicebus
7.x: the transport under the Service Bus client, an implementation of its own, neither Proton
nor uAMQP) as a third-party client of the router, used at the AMQP level: SendClient and
ReceiveClient over plain TCP with SASL ANONYMOUS or PLAIN, no Service Bus API (that needs CBS
token auth on `$cbs`, which the router does not implement).

The stack is synchronous and single-threaded per client: nothing happens on a connection until
the code using it calls into it (`do_work`, `listen`, `send_message`). So a test here drives
all of its clients from one thread, in a scripted order, with `Pump.until` turning every
client's crank until a condition holds (each turn blocks at most `TURN_S` on its socket), and
runs that thread with tests.support.interop.run_in_thread (joined, with a deadline).

What the stack does that a generic peer sees (checked against the router; see
tests/test_interop_azure_amqp.py and the README's interop list):
- open, begin and attach go out pipelined, before the peer's open has arrived;
- link names are UUIDs; a sender's source is `sender-link-<name>`, a receiver's target
  `receiver-link-<name>`; both ask for rcv-settle-mode second unless told otherwise;
- its sender sends a flow with link-credit 10000 (its own default) right after the attach, and
  sends transfers without waiting for the receiver's credit (transport §2.6.7 says it must not):
  before the first flow it assumes its own default, and in one turn it sends everything pending
  whatever the credit;
- its sender acts only on settled dispositions: an outcome the receiver sends unsettled (the
  rcv-settle-mode second it asked for by default) is never seen, so with the default its sends
  wait for ever: ReceiverSettleMode.First is what works, here and against brokers;
- a `released` (or `modified`) outcome makes SendClient's completion callback fail (it reads
  the state as `rejected`, KeyError, logged and swallowed) and send_message then waits for its
  time-out: the tests read the raw outcome through `send_transfer`'s callback;
- no auth object for SASL ANONYMOUS (`Anonymous` below), though the docstrings name one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from azure.servicebus._pyamqp import ReceiveClient, SendClient
from azure.servicebus._pyamqp.authentication import SASLPlainAuth
from azure.servicebus._pyamqp.constants import LinkState, ReceiverSettleMode
from azure.servicebus._pyamqp.error import RetryPolicy
from azure.servicebus._pyamqp.message import Header, Message, Properties
from azure.servicebus._pyamqp.sasl import SASLAnonymousCredential

from .interop import Cranks

__all__ = ["Header", "Message", "Properties", "ReceiverSettleMode", "SASLPlainAuth"]

TURN_S = 0.02  # the longest one turn of a client's crank blocks on its socket


class Anonymous:
    """SASL ANONYMOUS: the stack has the mechanism (SASLAnonymousCredential) but no auth object
    that carries it, and without one it fails on `None.sasl`. Any auth_type but CBS: no
    `$cbs` token exchange."""

    auth_type = "sasl-anonymous"

    def __init__(self) -> None:
        self.sasl = SASLAnonymousCredential()


def client_options(**overrides: Any) -> dict[str, Any]:
    """What every client here is made with: plain TCP (no TLS), no retries (a failure is the
    test's to see), short socket waits."""
    return {
        "auth": Anonymous(),
        "use_tls": False,
        "retry_policy": RetryPolicy(retry_total=0),
        "socket_timeout": TURN_S,
        **overrides,
    }


@dataclass
class Received:
    delivery_id: int
    tag: bytes
    settled: bool  # the router sent it settled
    message: Message


class Receiver(ReceiveClient):  # type: ignore[misc]
    """A ReceiveClient that keeps each delivery with its id and tag (the stock one drops the
    transfer frame, and with it what a disposition needs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deliveries: list[Received] = []

    def _message_received(self, frame: Any, message: Message) -> None:
        self.deliveries.append(Received(frame[1], bytes(frame[2]), bool(frame[4]), message))

    def settle(self, delivery: Received, outcome: str, **kwargs: Any) -> None:
        """Settle with `outcome` (accepted, rejected, released, modified), first: the disposition
        goes out settled."""
        self.settle_messages(delivery.delivery_id, delivery.tag, outcome, **kwargs)


@dataclass
class Outcome:
    """What the router told the sender about one message: the stack's settle reason and the
    raw delivery state (`{'accepted': []}`, `{'released': []}`, `{'rejected': [[condition,
    description, info]]}`), None until the delivery is settled."""

    reason: Any = None
    state: Any = None
    done: bool = False

    @property
    def name(self) -> str | None:
        return next(iter(self.state), None) if isinstance(self.state, dict) else None


class Pump(Cranks):
    """Turns the cranks of a test's clients, on the one thread that drives them all."""

    def until(self, condition: Callable[[], bool], *clients: Any, passive: Iterable[Any] = (), what: str = "") -> None:
        """Turn every client (`do_work`: a receiver tops up its credit there) and every passive
        one (its connection only: a receiver that must not grant credit) until `condition()`."""
        quiet = tuple(passive)

        def turn() -> None:
            for client in clients:
                client.do_work()
            for client in quiet:
                client._connection.listen(wait=TURN_S)

        self.turn_until(condition, turn, what or condition)

    def attached(self, client: Any, *others: Any) -> None:
        """Open `client` and turn until its link is attached (the router's attach is here):
        client_ready() makes and attaches the link and reads, but grants no credit (a receiver
        does that in do_work); `others` get passive turns meanwhile."""
        client.open()
        ready = [False]

        def turn() -> bool:
            ready[0] = ready[0] or bool(client.client_ready())
            return ready[0]

        self.until(turn, passive=others, what="the attach")

    def round_trip(self, client: Any) -> None:
        """Attach one more (receiving) link on `client`'s session and wait for the router's
        answer: the router handles a connection's frames in order, so everything `client` sent
        before has been handled by then. The probe link is detached again."""
        session = client._session
        probe = session.create_receiver_link("azure.round-trip", on_transfer=lambda *a: None, link_credit=0)
        probe.attach()
        self.until(lambda: probe.state == LinkState.ATTACHED, passive=(client,), what="the round trip")
        probe.detach(close=True)


def send_async(client: SendClient, messages: Iterable[Message]) -> list[Outcome]:
    """Queue `messages` on `client`'s attached link; their outcomes fill in as the client turns.
    (SendClient.send_message sends one at a time and cannot report released or modified.)"""
    outcomes = []
    for message in messages:
        outcome = Outcome()

        def settled(reason: Any, state: Any, outcome: Outcome = outcome) -> None:
            outcome.reason, outcome.state, outcome.done = reason, state, True

        client._link.send_transfer(message, on_send_complete=settled, send_async=True)
        outcomes.append(outcome)
    return outcomes


def flows(client: Any) -> list[tuple[int, int]]:
    """Record the (delivery-count, link-credit) of every flow the router sends for `client`'s
    link from now on (the stack keeps only its own reckoning of the credit)."""
    seen: list[tuple[int, int]] = []
    link = client._link
    incoming = link._incoming_flow

    def record(frame: Any) -> None:
        if frame[4] is not None:  # handle: a link's flow
            seen.append((frame[5], frame[6]))
        incoming(frame)

    link._incoming_flow = record
    return seen


def close_all(*clients: Any) -> None:
    """Close every client: each sends its detach, end and close (waiting for no answer) and
    drops its socket, also when the router has closed the connection first."""
    for client in clients:
        connection = client._connection
        try:
            client.close()
        finally:
            if connection is not None:
                connection._transport.close()
