"""Azure's pure-Python AMQP 1.0 stack (`azure.servicebus._pyamqp`, azure-servicebus 7.x: an
implementation of its own, neither Proton nor rhea) as a third-party client of a real
`router run` process over loopback, at the AMQP level (tests/support/azure_amqp.py says how it
is driven and what it does unusually).

Messages through the router with the accepted outcome seen by the sender, with the receiver
attached before and after the sender; properties, application-properties, annotations and the
body unchanged end to end; rejected, released and modified outcomes back to the sender; what
waits for a consumer released when it goes; a 1 MiB message in many frames both ways; a
receiver granting one message of credit at a time gets everything; SASL PLAIN; the client's
short idle time-out kept alive by the router's empty frames. And where the client breaks the
rules, the router keeps them: it sends without credit (transport §2.6.7), and the router
detaches its link with amqp:link:transfer-limit-exceeded and goes on; it asks for rcv-settle-mode
second and then waits for the router to settle first, which the router must not (§2.7.5).
A consumer that accepts without settling, with a first-mode sender: the sender gets the outcome
settled and the consumer's delivery is settled by the router (§2.7.5: a first-mode receiver
does not wait for the sender to settle; this stack's sender acts only on settled outcomes).

Skips when azure-servicebus is not installed (it is in the project's `test` extra).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("azure.servicebus._pyamqp", reason="azure-servicebus (its _pyamqp AMQP stack) is not installed")

from router.config.users import hash_password  # noqa: E402

from .support.azure_amqp import (  # noqa: E402
    Header,
    Message,
    Outcome,
    Properties,
    Pump,
    Receiver,
    ReceiverSettleMode,
    SASLPlainAuth,
    client_options,
    close_all,
    flows,
    send_async,
)
from .support.interop import run_in_thread  # noqa: E402
from .support.router_process import RouterProcess, watched  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.process]

MiB = 1024 * 1024
THREAD_TIMEOUT_S = 15.0
PASSWORD = "azure-s3cret"
_names = itertools.count()


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    config = {
        "router": {"id": "azure-interop"},
        "users": [{"username": "alice", "hashes": list(hash_password(PASSWORD))}],
        "listeners": [
            {"name": "amqp", "port": 0},  # link_capacity 1000, max_frame_size 65536 (the defaults)
            {"name": "small", "port": 0, "link_capacity": 10},
            {"name": "plain", "port": 0, "sasl_mechanisms": ["PLAIN"], "allow_insecure_plain": True},
        ],
    }
    with RouterProcess.running(tmp_path_factory.mktemp("router"), config) as router:
        yield router


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    yield from watched(shared_router)


def host(router: RouterProcess, listener: str = "amqp") -> str:
    return f"127.0.0.1:{router.ports[listener]}"


def address() -> str:
    return f"azure.{next(_names)}.{uuid.uuid4().hex[:6]}"


def sender(router: RouterProcess, target: str, listener: str = "amqp", **options: Any) -> Any:
    """A SendClient in rcv-settle-mode first: its default, second, never completes a send (the
    stack's sender ignores unsettled dispositions: tests/support/azure_amqp.py)."""
    from azure.servicebus._pyamqp import SendClient

    return SendClient(host(router, listener), target,
                      **client_options(receive_settle_mode=ReceiverSettleMode.First, **options))  # fmt: skip


def receiver(router: RouterProcess, source: str, listener: str = "amqp", **options: Any) -> Receiver:
    return Receiver(host(router, listener), source, **client_options(**options))


async def in_thread(fn: Any) -> Any:
    """Run the scripted scenario `fn(pump)` on its own thread (the clients are blocking)."""
    pump = Pump()
    return await run_in_thread(fn, pump, timeout_s=THREAD_TIMEOUT_S, stop=pump.stop)


def settle_all(rx: Receiver, outcome: str = "accepted") -> Any:
    """A condition for Pump.until that settles (first) what `rx` has received since."""
    done = 0

    def step(count: int) -> bool:
        nonlocal done
        while done < len(rx.deliveries):
            rx.settle(rx.deliveries[done], outcome)
            done += 1
        return done >= count

    return step


def rich_message(i: int) -> Message:
    return Message(
        header=Header(durable=True, priority=7, ttl=60_000),
        message_annotations={b"x-opt-azure-seq": i, b"x-opt-note": "annotated"},
        properties=Properties(
            message_id=f"m{i}", to="somewhere", subject="subject", reply_to="replies",
            correlation_id=b"corr-%d" % i, content_type=b"application/octet-stream",
            content_encoding=b"identity", creation_time=1_700_000_000_000 + i, group_id="g", group_sequence=i,
        ),
        application_properties={"i": i, "flag": True, "name": "nom", "ratio": 0.5, "blob": b"\x00\x01"},
        data=[b"body-%d" % i, b"second section"],
    )  # fmt: skip


# --- round trips -----------------------------------------------------------------------------------


async def test_receiver_first_round_trip_keeps_every_section(router: RouterProcess) -> None:
    """A receiver attached first, a sender whose every message comes back accepted (as
    SendClient.send_message reports it: it returns only on an `accepted` outcome), and every
    message arriving with its header, annotations, properties, application properties and data
    sections as sent. The clients put properties on their open and attach and ask for a
    capability; the router takes them."""
    target, count = address(), 10

    def scenario(pump: Pump) -> list[Any]:
        rx = receiver(router, target, link_credit=5, properties={"client": "azure-pyamqp"},
                      link_properties={"com.example:priority": 3}, desired_capabilities=[b"com.example:whatever"])  # fmt: skip
        tx = sender(router, target, properties={"client": "azure-pyamqp"}, link_properties={"com.example:x": "y"})
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            outcomes = send_async(tx, (rich_message(i) for i in range(count)))
            settle = settle_all(rx)
            pump.until(lambda: settle(count) and all(o.done for o in outcomes), tx, rx, what="outcomes")
            # And one through the public API, which blocks turning only its own client: the
            # receiver turns on a thread of its own meanwhile. send_message returns once the
            # message is accepted.
            consumer = threading.Thread(target=pump.until, args=(lambda: settle(count + 1), rx),
                                        kwargs={"what": "the last message"}, name="interop-proton-azure-rx")  # fmt: skip
            consumer.start()
            try:
                tx.send_message(Message(value="by send_message"), timeout=5)
            finally:
                consumer.join(THREAD_TIMEOUT_S)
            assert len(rx.deliveries) == count + 1
            return [outcomes, [d.message for d in rx.deliveries], [d.settled for d in rx.deliveries]]
        finally:
            close_all(tx, rx)

    outcomes, messages, settled = await in_thread(scenario)
    assert [o.name for o in outcomes] == ["accepted"] * count
    assert settled == [False] * (count + 1)  # sent unsettled by the router
    assert messages[-1].value == b"by send_message"  # (the stack decodes strings as bytes)
    for i, m in enumerate(messages[:count]):
        assert m.data == [b"body-%d" % i, b"second section"]
        # A message that waited in the router for the receiver's credit goes on with the ttl it has
        # left (messaging §3.2.1): a few milliseconds less at most here.
        assert m.header.durable is True and m.header.priority == 7 and 55_000 < m.header.ttl <= 60_000
        assert m.message_annotations[b"x-opt-azure-seq"] == i and m.message_annotations[b"x-opt-note"] == b"annotated"
        p = m.properties
        assert (p.message_id, p.to, p.subject, p.reply_to) == (b"m%d" % i, b"somewhere", b"subject", b"replies")
        assert p.correlation_id == b"corr-%d" % i
        assert (p.content_type, p.content_encoding) == (b"application/octet-stream", b"identity")
        assert (p.creation_time, p.group_id, p.group_sequence) == (1_700_000_000_000 + i, b"g", i)
        assert m.application_properties == {
            b"i": i, b"flag": True, b"name": b"nom", b"ratio": 0.5, b"blob": b"\x00\x01"}  # fmt: skip


async def test_receiver_attached_after_the_sender(router: RouterProcess) -> None:
    """The sender attaches to an address with no consumer: the router gives it no credit. A
    receiver attaches: credit comes, and the messages sent then are accepted."""
    target, count = address(), 5

    def scenario(pump: Pump) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[Outcome], list[Any]]:
        tx = sender(router, target)
        rx = receiver(router, target, link_credit=10)
        try:
            pump.attached(tx)
            seen = flows(tx)
            pump.round_trip(tx)
            before = list(seen)  # what the router granted with no consumer
            pump.attached(rx, tx)
            pump.until(lambda: any(credit > 0 for _, credit in seen), passive=(tx, rx), what="credit")
            outcomes = send_async(tx, (Message(value=f"late {i}") for i in range(count)))
            settle = settle_all(rx)
            pump.until(lambda: settle(count) and all(o.done for o in outcomes), tx, rx, what="outcomes")
            return before, seen, outcomes, [d.message.value for d in rx.deliveries]
        finally:
            close_all(tx, rx)

    before, seen, outcomes, bodies = await in_thread(scenario)
    assert all(credit == 0 for _, credit in before), before
    assert any(credit > 0 for _, credit in seen)
    assert [o.name for o in outcomes] == ["accepted"] * count
    assert bodies == [f"late {i}".encode() for i in range(count)]


async def test_sasl_plain_login(router: RouterProcess) -> None:
    """SASL PLAIN (the listener offers only PLAIN): the right password gets a message through;
    a wrong one is refused at the SASL outcome."""
    target = address()

    def scenario(pump: Pump) -> str:
        rx = receiver(router, target, "plain", auth=SASLPlainAuth("alice", PASSWORD), link_credit=1)
        tx = sender(router, target, "plain", auth=SASLPlainAuth("alice", PASSWORD))
        bad = sender(router, target, "plain", auth=SASLPlainAuth("alice", "wrong"))
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            outcomes = send_async(tx, [Message(value="plain")])
            settle = settle_all(rx)
            pump.until(lambda: settle(1) and outcomes[0].done, tx, rx, what="the outcome")
            assert outcomes[0].name == "accepted"
            try:
                pump.attached(bad)
            except Exception as exc:  # the stack raises its AuthenticationException
                return type(exc).__name__ + ": " + str(exc)
            return "attached"
        finally:
            close_all(tx, rx, bad)

    refused = await in_thread(scenario)
    assert "SASL negotiation failed" in refused and "Outcome: 1" in refused, refused  # 1: auth


# --- outcomes ----------------------------------------------------------------------------------------


async def test_rejected_released_and_modified_reach_the_sender(router: RouterProcess) -> None:
    """The receiver settles each message with another outcome; the sender gets each one as
    given, a rejected one with its error."""
    from azure.servicebus._pyamqp.error import AMQPError, ErrorCondition

    target = address()

    def scenario(pump: Pump) -> list[Outcome]:
        rx = receiver(router, target, link_credit=10)
        tx = sender(router, target)
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            outcomes = send_async(tx, (Message(value=f"m{i}") for i in range(4)))
            pump.until(lambda: len(rx.deliveries) == 4, tx, rx, what="the messages")
            d = rx.deliveries
            rx.settle(d[0], "accepted")
            rx.settle(d[1], "rejected", error=AMQPError(condition=ErrorCondition.InvalidField, description="no good"))
            rx.settle(d[2], "released")
            rx.settle(d[3], "modified", delivery_failed=True, undeliverable_here=True)
            pump.until(lambda: all(o.done for o in outcomes), tx, rx, what="the outcomes")
            return outcomes
        finally:
            close_all(tx, rx)

    outcomes = await in_thread(scenario)
    assert [o.name for o in outcomes] == ["accepted", "rejected", "released", "modified"]
    (error,) = outcomes[1].state["rejected"]
    assert error[0] == b"amqp:invalid-field" and error[1] == b"no good"
    assert outcomes[3].state["modified"][:2] == [True, True]


async def test_what_waits_for_a_consumer_is_released_when_it_goes(router: RouterProcess) -> None:
    """A consumer that grants no credit: the router takes the sender's messages (its window)
    and holds them; the consumer detaches, and each comes back to the sender released."""
    target, count = address(), 3

    def scenario(pump: Pump) -> list[Outcome]:
        rx = receiver(router, target, link_credit=10)
        tx = sender(router, target)
        try:
            pump.attached(rx)  # passive turns only: it grants no credit
            pump.attached(tx, rx)
            outcomes = send_async(tx, (Message(value=f"held {i}") for i in range(count)))
            pump.until(lambda: all(d.sent for d in tx._link._pending_deliveries), tx, what="the transfers going out")
            pump.round_trip(tx)  # the router has them all
            assert not any(o.done for o in outcomes)
            close_all(rx)
            pump.until(lambda: all(o.done for o in outcomes), tx, what="the outcomes")
            assert not rx.deliveries
            return outcomes
        finally:
            close_all(tx)

    outcomes = await in_thread(scenario)
    assert [o.name for o in outcomes] == ["released"] * count


async def test_a_second_mode_sender_is_told_unsettled_and_never_settles(router: RouterProcess) -> None:
    """The stack's sender asks for rcv-settle-mode second by default. The router takes it at its
    word: the outcome goes to the sender unsettled, and the router settles only after the
    sender has (transport §2.7.5, rcv-settle-mode second: the receiver MUST NOT settle first),
    even though the consumer settled at once. The stack acts only on settled dispositions, so
    the send never completes in that mode (hence ReceiverSettleMode.First in every other test)."""
    from azure.servicebus._pyamqp import SendClient

    target = address()

    def scenario(pump: Pump) -> tuple[list[tuple[bool, Any]], bool]:
        rx = receiver(router, target, link_credit=1)
        tx = SendClient(host(router), target, **client_options())  # the default settle modes
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            seen: list[tuple[bool, Any]] = []
            incoming = tx._link._incoming_disposition
            tx._link._incoming_disposition = lambda frame: (seen.append((bool(frame[3]), frame[4])), incoming(frame))
            (outcome,) = send_async(tx, [Message(value="second")])
            settle = settle_all(rx)
            pump.until(lambda: settle(1) and bool(seen), tx, rx, what="the router's disposition")
            pump.round_trip(tx)  # and nothing more from the router meanwhile
            return seen, outcome.done  # (closing the client completes it: not delivered)
        finally:
            close_all(tx, rx)

    seen, done = await in_thread(scenario)
    assert seen == [(False, {"accepted": []})]
    assert not done


async def test_an_outcome_the_consumer_does_not_settle_reaches_a_first_mode_sender_settled(router: RouterProcess) -> None:
    """The receiver accepts without settling (its rcv-settle-mode second: it waits for the
    sender to settle, `await_outcome`); the router's sender is in rcv-settle-mode first, and the
    router's disposition to it is then settled: a first-mode receiver settles without waiting
    for the sender (transport §2.7.5, rcv-settle-mode). This stack's sender acts only on a
    settled disposition (an unsettled one would leave both clients waiting for ever): its send
    completes, accepted, and the receiver sees its delivery settled by the router, the sender
    doing nothing more."""
    from azure.servicebus._pyamqp.outcomes import Accepted

    target = address()

    def scenario(pump: Pump) -> tuple[list[tuple[bool, Any]], list[tuple[bool, Any]], list[Outcome]]:
        rx = receiver(router, target, link_credit=1)
        tx = sender(router, target)
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            seen: list[tuple[bool, Any]] = []  # the router's dispositions to the sender
            incoming = tx._link._incoming_disposition
            tx._link._incoming_disposition = lambda frame: (seen.append((bool(frame[3]), frame[4])), incoming(frame))
            settled: list[tuple[bool, Any]] = []  # ... and to the receiver
            rx_incoming = rx._link._incoming_disposition
            rx._link._incoming_disposition = lambda frame: (settled.append((bool(frame[3]), frame[4])), rx_incoming(frame))
            outcomes = send_async(tx, [Message(value="unsettled accepted")])
            pump.until(lambda: bool(rx.deliveries), tx, rx, what="the message")
            d = rx.deliveries[0]
            rx._link.send_disposition(first_delivery_id=d.delivery_id, delivery_tag=d.tag, settled=False,
                                      delivery_state=Accepted())  # fmt: skip
            pump.until(lambda: bool(seen) and bool(settled) and outcomes[0].done, tx, passive=(rx,),
                       what="the router's dispositions")  # fmt: skip
            return seen, settled, outcomes
        finally:
            close_all(tx, rx)

    seen, settled, outcomes = await in_thread(scenario)
    assert seen == [(True, {"accepted": []})], seen
    assert settled == [(True, {"accepted": []})], settled
    assert [o.name for o in outcomes] == ["accepted"]


# --- size and credit -------------------------------------------------------------------------------


async def test_one_mebibyte_message_in_many_frames(router: RouterProcess) -> None:
    """1 MiB of data: the client cuts it into transfers of the router's max-frame-size (64 KiB)
    and the router cuts what it sends the receiver the same way; it arrives whole, accepted."""
    target = address()
    body = bytes(range(256)) * (MiB // 256)

    def scenario(pump: Pump) -> tuple[list[Outcome], list[Any]]:
        rx = receiver(router, target, link_credit=2, max_message_size=2 * MiB)
        tx = sender(router, target)
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            outcomes = send_async(tx, [Message(data=[body], properties=Properties(message_id="big")), Message(value="after")])
            settle = settle_all(rx)
            pump.until(lambda: settle(2) and all(o.done for o in outcomes), tx, rx, what="the outcomes")
            return outcomes, [d.message for d in rx.deliveries]
        finally:
            close_all(tx, rx)

    outcomes, messages = await in_thread(scenario)
    assert [o.name for o in outcomes] == ["accepted", "accepted"]
    assert messages[0].properties.message_id == b"big" and messages[0].data == [body]
    assert messages[1].value == b"after"


async def test_one_message_of_credit_at_a_time_gets_everything(router: RouterProcess) -> None:
    """A receiver that grants one message of credit at a time (a new flow after each):
    everything the sender sent arrives, in order, each accepted."""
    target, count = address(), 30

    def scenario(pump: Pump) -> tuple[list[Outcome], list[Any], list[tuple[int, int]]]:
        rx = receiver(router, target, link_credit=1)
        tx = sender(router, target)
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            # (not 0: the stack sends a falsy amqp-value as no body section at all)
            outcomes = send_async(tx, (Message(value=i) for i in range(1, count + 1)))
            settle = settle_all(rx)
            pump.until(lambda: settle(count) and all(o.done for o in outcomes), tx, rx, what="the outcomes")
            return outcomes, [d.message.value for d in rx.deliveries], []
        finally:
            close_all(tx, rx)

    outcomes, values, _ = await in_thread(scenario)
    assert values == list(range(1, count + 1))
    assert [o.name for o in outcomes] == ["accepted"] * count


# --- where the client breaks the rules --------------------------------------------------------------


async def test_a_send_without_credit_detaches_the_link(router: RouterProcess) -> None:
    """To an address with no consumer the router grants no credit, and this client sends anyway
    (transport §2.6.7: a sender MUST NOT). The router detaches the link with
    amqp:link:transfer-limit-exceeded; the message is not delivered, the connection and the
    router go on (a later sender and receiver on it are served)."""
    target = address()

    def scenario(pump: Pump) -> tuple[Outcome, Any, str]:
        tx = sender(router, target)
        rx = receiver(router, target, link_credit=1)
        try:
            pump.attached(tx)
            (outcome,) = send_async(tx, [Message(value="nobody listens")])
            pump.until(lambda: outcome.done, tx, what="the outcome")
            error = tx._link._error
            pump.attached(rx)
            again = sender(router, target)
            try:
                pump.attached(again, rx)
                later = send_async(again, [Message(value="now someone does")])
                settle = settle_all(rx)
                pump.until(lambda: settle(1) and later[0].done, again, rx, what="the later outcome")
                return outcome, error, later[0].name or ""
            finally:
                close_all(again)
        finally:
            close_all(tx, rx)

    outcome, error, later = await in_thread(scenario)
    assert outcome.state is None  # never delivered: the stack's NOT_DELIVERED
    assert error is not None and error.condition == b"amqp:link:transfer-limit-exceeded", error
    assert later == "accepted"


async def test_more_transfers_than_credit_detach_the_link(router: RouterProcess) -> None:
    """Credit 10 (a listener with link capacity 10) and fifteen messages queued: the client sends
    all fifteen in one turn, past the credit; the router detaches the link at the eleventh
    (transfer-limit-exceeded). What it had taken comes to the consumer."""
    target = address()

    def scenario(pump: Pump) -> tuple[Any, int]:
        rx = receiver(router, target, "small", link_credit=20)
        tx = sender(router, target, "small")
        try:
            pump.attached(rx)  # no credit from it yet: the messages wait in the router
            pump.attached(tx, rx)
            seen = flows(tx)
            pump.until(lambda: any(credit > 0 for _, credit in seen), passive=(tx, rx), what="credit")
            assert seen[-1] == (0, 10), seen
            outcomes = send_async(tx, (Message(value=i) for i in range(1, 16)))
            pump.until(lambda: all(o.done for o in outcomes), tx, passive=(rx,), what="the detach")
            error = tx._link._error
            settle = settle_all(rx)
            pump.until(lambda: settle(10), rx, what="the ten")
            return error, len(rx.deliveries)
        finally:
            close_all(tx, rx)

    error, received = await in_thread(scenario)
    assert error is not None and error.condition == b"amqp:link:transfer-limit-exceeded", error
    assert received == 10


# --- the connection ------------------------------------------------------------------------------------


async def test_short_idle_timeout_is_kept_alive(router: RouterProcess) -> None:
    """The client asks for an idle time-out of 1 s (its open says 1000 ms): the router sends an
    empty frame often enough that the client, waiting on its socket for 2.5 s with nothing else
    to read, never closes the connection for silence."""
    import time

    target = address()

    def scenario(pump: Pump) -> bool:
        rx = receiver(router, target, idle_timeout=1, link_credit=1)
        try:
            pump.attached(rx)
            quiet_until = time.monotonic() + 2.5
            pump.until(lambda: time.monotonic() > quiet_until, passive=(rx,), what="2.5 s of silence")
            from azure.servicebus._pyamqp.constants import ConnectionState

            return bool(rx._connection.state == ConnectionState.OPENED)
        finally:
            close_all(rx)

    assert await in_thread(scenario)
