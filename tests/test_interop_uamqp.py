"""uamqp (Azure's Python binding over uAMQP-C: a C implementation of AMQP 1.0 of its own, neither
Proton nor rhea nor Azure's pure-Python stack) as a third-party client of a real `router run`
process over loopback, at the AMQP level (tests/support/uamqp_client.py says how it is driven).

uamqp speaks only TLS, so the router listens with TLS here. Messages through the router with the
accepted outcome seen by the sender; header, properties, application properties, annotations and body unchanged;
rejected, released and modified outcomes back to the sender; a 1 MiB message in many frames both
ways, and the receiver's default max-message-size (1 MiB, in every attach it sends) honoured by
the router; a receiver with one message of credit gets everything; SASL PLAIN; an idle time-out
kept alive. And where the client breaks the rules, the router keeps them:
- its sender sends without credit to an address with no consumer (transport §2.6.7): the router
  detaches the link with amqp:link:transfer-limit-exceeded; attach a receiver first;
- it hands an aborted delivery to the application as an empty message (§2.6.14: discard it);
- its SendClient asks for rcv-settle-mode second by default and acts only on settled outcomes,
  so with the default its sends never complete (transport §2.7.5: in mode second the router
  must not settle first); `receive_settle_mode=ReceiveAndDelete` (mode first) is what works;
- its PeekLock receiver asks for rcv-settle-mode second too, yet settles with its outcome
  (§2.7.5 says a mode-second receiver settles only after the sender has): the router takes the
  settled outcome as final;
- its ReceiveAndDelete receiver asks for rcv-settle-mode first but snd-settle-mode unsettled,
  and then treats what arrives as settled and never sends a disposition: the router's delivery
  stays unsettled until the receiver leaves, and the sender then hears modified
  (delivery-failed). With `send_settle_mode=Settled` the router sends presettled and the
  sender's message is accepted.

Skips when uamqp is not installed (it is in the project's `test` extra: a manylinux wheel).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio

pytest.importorskip("uamqp", reason="uamqp (Azure's binding over uAMQP-C) is not installed: pip install uamqp")

import uamqp  # noqa: E402
from uamqp import constants, types  # noqa: E402

from router.config.users import hash_password  # noqa: E402

from router.net.client import connect  # noqa: E402

from .support.interop import run_in_thread  # noqa: E402
from .support.router_process import RouterProcess, watched  # noqa: E402
from .support.uamqp_client import Pump, Receiver, Sender, Sent, anonymous, close_all, plain  # noqa: E402
from .tlssupport import Pki, make_pki  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.process]

MiB = 1024 * 1024
THREAD_TIMEOUT_S = 15.0
PASSWORD = "uamqp-s3cret"
FIRST = constants.ReceiverSettleMode.ReceiveAndDelete  # rcv-settle-mode first in the attach
SECOND = constants.ReceiverSettleMode.PeekLock  # rcv-settle-mode second (uamqp's default)
OK, ERROR = constants.MessageSendResult.Ok, constants.MessageSendResult.Error
_names = itertools.count()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def shared_router(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RouterProcess]:
    config = {
        "router": {"id": "uamqp-interop"},
        "users": [{"username": "alice", "hashes": list(hash_password(PASSWORD))}],
        "ssl_profiles": [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file, "ca_file": pki.ca_file}],
        "listeners": [
            {"name": "amqp", "port": 0, "ssl_profile": "server"},
            {"name": "plain", "port": 0, "ssl_profile": "server", "sasl_mechanisms": ["PLAIN"]},
            {"name": "tcp", "port": 0},  # (for clients of other stacks, without TLS)
        ],
    }
    with RouterProcess.running(tmp_path_factory.mktemp("router"), config) as router:
        yield router


@pytest.fixture
def router(shared_router: RouterProcess) -> Iterator[RouterProcess]:
    """The module's router; the test fails if the router logged an error while it ran."""
    yield from watched(shared_router)


class Env:
    def __init__(self, router: RouterProcess, pki: Pki) -> None:
        self.router, self.pki = router, pki

    def url(self, address: str, listener: str = "amqp") -> str:
        return f"amqps://localhost:{self.router.ports[listener]}/{address}"

    def auth(self, listener: str = "amqp", password: str | None = None) -> Any:
        port = self.router.ports[listener]
        if password is None:
            return anonymous(port, self.pki.ca_file)
        return plain(port, self.pki.ca_file, "alice", password)

    def sender(self, address: str, listener: str = "amqp", password: str | None = None, **options: Any) -> Sender:
        """A SendClient in rcv-settle-mode first unless told otherwise (its default, second, never
        completes a send: test_a_second_mode_sender_never_completes)."""
        options.setdefault("receive_settle_mode", FIRST)
        return Sender(self.url(address, listener), auth=self.auth(listener, password), **options)

    def receiver(self, address: str, listener: str = "amqp", password: str | None = None, **options: Any) -> Receiver:
        options.setdefault("prefetch", 10)
        return Receiver(self.url(address, listener), auth=self.auth(listener, password), **options)


@pytest.fixture
def env(router: RouterProcess, pki: Pki) -> Env:
    return Env(router, pki)


def address() -> str:
    return f"uamqp.{next(_names)}.{uuid.uuid4().hex[:6]}"


async def in_thread(fn: Any) -> Any:
    """Run the scripted scenario `fn(pump)` on its own thread (the clients are blocking)."""
    pump = Pump()
    return await run_in_thread(fn, pump, timeout_s=THREAD_TIMEOUT_S, stop=pump.stop)


def body(message: Any) -> bytes:
    return b"".join(message.get_data())


def rich_message(i: int) -> uamqp.Message:
    return uamqp.Message(
        [b"body-%d" % i],
        properties=uamqp.message.MessageProperties(
            message_id=f"m{i}", to="somewhere", subject="subject", reply_to="replies",
            correlation_id=b"corr-%d" % i, content_type="application/octet-stream",
            content_encoding="identity", creation_time=1_700_000_000_000 + i, group_id="g", group_sequence=i + 1,  # (0 is dropped: uamqp omits falsy fields)
        ),
        application_properties={"i": i, "flag": True, "name": "nom", "ratio": 0.5},
        annotations={"x-opt-uamqp-seq": i},
        header=header(),
    )  # fmt: skip


def header() -> Any:
    h = uamqp.message.MessageHeader()
    h.durable, h.priority, h.time_to_live = True, 7, 60_000
    return h


# --- round trips -----------------------------------------------------------------------------------


async def test_receiver_first_round_trip_keeps_every_section(env: Env) -> None:
    """A receiver attached first (PeekLock: rcv-settle-mode second), a sender whose every message
    comes back accepted, each arriving with its header, properties, application properties,
    annotations and data as sent. The clients put properties on their open and attach and ask for
    a capability; the router takes them. The receiver accepts and settles at once although it
    asked for mode second (a quirk of the client the router lets pass: its outcome is final)."""
    target, count = address(), 10

    def scenario(pump: Pump) -> tuple[list[Sent], list[Any], list[bool]]:
        rx = env.receiver(target, properties={"client": "uamqp"}, link_properties={"com.example:priority": 3},
                          desired_capabilities=types.AMQPSymbol("com.example:whatever").c_data)  # fmt: skip
        tx = env.sender(target, properties={"client": "uamqp"}, link_properties={"com.example:x": "y"})
        with pump.pair(rx, tx):
            sent = tx.send_async(rich_message(i) for i in range(count))
            pump.until(lambda: len(rx.messages) == count, tx, rx, what="the messages")
            settled = [m.settled for m in rx.messages]
            for m in rx.messages:
                assert m.accept()
            pump.until(lambda: all(s.done for s in sent), tx, rx, what="the outcomes")
            return sent, rx.messages, settled

    sent, messages, settled = await in_thread(scenario)
    assert [(s.result, s.state) for s in sent] == [(OK, [])] * count  # accepted
    assert settled == [False] * count  # sent unsettled by the router
    for i, m in enumerate(messages):
        assert body(m) == b"body-%d" % i
        assert (m.header.durable, m.header.priority, m.header.time_to_live) == (True, 7, 60_000)
        p = m.properties
        assert (p.message_id, p.to, p.subject, p.reply_to) == (b"m%d" % i, b"somewhere", b"subject", b"replies")
        assert p.correlation_id == b"corr-%d" % i
        assert (p.content_type, p.content_encoding) == (b"application/octet-stream", b"identity")
        assert (p.creation_time, p.group_id, p.group_sequence) == (1_700_000_000_000 + i, b"g", i + 1)
        assert m.application_properties == {b"i": i, b"flag": True, b"name": b"nom", b"ratio": 0.5}
        assert m.annotations[b"x-opt-uamqp-seq"] == i


async def test_a_send_before_any_consumer_detaches_the_link(env: Env) -> None:
    """The sender attaches to an address with no consumer: the router gives it no credit, and
    uAMQP-C sends anyway (transport §2.6.7: a sender MUST NOT). The router detaches the link with
    amqp:link:transfer-limit-exceeded (the client raises LinkDetach); a sender attached once a
    receiver is there is served."""
    from uamqp.errors import LinkDetach

    target = address()

    def scenario(pump: Pump) -> tuple[str, list[Sent], list[bytes]]:
        tx = env.sender(target)
        rx = env.receiver(target)
        again = env.sender(target)
        try:
            pump.attached(tx)
            tx.send_async([uamqp.Message(b"nobody listens")])
            try:
                pump.turns(1.0, tx)
                detached = "not detached"
            except LinkDetach as exc:
                detached = str(exc)
            pump.attached(rx)
            pump.attached(again, rx)
            later = again.send_async([uamqp.Message(b"now someone does")])
            pump.until(lambda: bool(rx.messages), again, rx, what="the message")
            rx.messages[0].accept()
            pump.until(lambda: later[0].done, again, rx, what="the outcome")
            return detached, later, [body(m) for m in rx.messages]
        finally:
            close_all(tx, rx, again)

    detached, later, bodies = await in_thread(scenario)
    assert "LinkTransferLimitExceeded" in detached, detached
    assert [s.result for s in later] == [OK]
    assert bodies == [b"now someone does"]


async def test_sasl_plain_login(env: Env) -> None:
    """SASL PLAIN (the listener offers only PLAIN, over TLS): the right password gets a message
    through; with a wrong one the client never gets its link."""
    target = address()

    def scenario(pump: Pump) -> tuple[Sent, str]:
        rx = env.receiver(target, "plain", password=PASSWORD)
        tx = env.sender(target, "plain", password=PASSWORD)
        bad = env.sender(target, "plain", password="wrong")
        try:
            pump.attached(rx)
            pump.attached(tx, rx)
            (sent,) = tx.send_async([uamqp.Message(b"plain")])
            pump.until(lambda: bool(rx.messages), tx, rx, what="the message")
            rx.messages[0].accept()
            pump.until(lambda: sent.done, tx, rx, what="the outcome")
            try:
                pump.attached(bad)
            except Exception as exc:  # the client raises when the connection fails
                return sent, type(exc).__name__
            return sent, "attached"
        finally:
            close_all(tx, rx, bad)

    sent, refused = await in_thread(scenario)
    assert sent.result == OK
    assert refused != "attached"


# --- outcomes ----------------------------------------------------------------------------------------


async def test_rejected_released_and_modified_reach_the_sender(env: Env) -> None:
    """The receiver settles each message with another outcome; the sender gets each one as given:
    uAMQP-C reports accepted as Ok, the others as Error with the outcome's fields (the rejected
    error, the modified flags; released has none)."""
    target = address()

    def scenario(pump: Pump) -> list[Sent]:
        with pump.pair(env.receiver(target), env.sender(target)) as (rx, tx):
            sent = tx.send_async(uamqp.Message(b"m%d" % i) for i in range(4))
            pump.until(lambda: len(rx.messages) == 4, tx, rx, what="the messages")
            m = rx.messages
            m[0].accept()
            m[1].reject(condition="amqp:invalid-field", description="no good")
            m[2].release()
            m[3].modify(True, True)
            pump.until(lambda: all(s.done for s in sent), tx, rx, what="the outcomes")
            return sent

    sent = await in_thread(scenario)
    assert [(s.result, s.state) for s in sent] == [
        (OK, []),
        (ERROR, [[b"amqp:invalid-field", b"no good"]]),
        (ERROR, []),
        (ERROR, [True, True]),
    ]


async def test_a_second_mode_sender_never_completes(env: Env) -> None:
    """uamqp's SendClient asks for rcv-settle-mode second by default. The router tells it the
    outcome unsettled and settles only after the sender has (transport §2.7.5: in mode second
    the receiver MUST NOT settle first); uAMQP-C acts only on settled dispositions, so the send
    never completes in that mode (hence ReceiveAndDelete in every other test)."""
    target = address()

    def scenario(pump: Pump) -> tuple[bool, Sent]:
        with pump.pair(env.receiver(target), env.sender(target, receive_settle_mode=SECOND)) as (rx, tx):
            (sent,) = tx.send_async([uamqp.Message(b"second")])
            pump.until(lambda: bool(rx.messages), tx, rx, what="the message")
            accepted = rx.messages[0].accept()
            pump.turns(1.0, tx, rx)
            return accepted, Sent(sent.result, sent.state)  # (closing the client fails it)

    accepted, sent = await in_thread(scenario)
    assert accepted
    assert not sent.done, sent


async def test_receive_and_delete_with_unsettled_transfers_never_settles(env: Env) -> None:
    """A ReceiveAndDelete receiver (rcv-settle-mode first) with the default snd-settle-mode
    (unsettled): the router sends unsettled, and the client takes the message as settled and sends
    no disposition. The producer waits (nothing settles the delivery: docs/mesh.md, "Outcomes and
    settlement"); when the receiver leaves, the producer hears modified (delivery-failed)."""
    target = address()

    def scenario(pump: Pump) -> tuple[list[Sent], list[Sent], int]:
        with pump.pair(env.receiver(target, receive_settle_mode=FIRST), env.sender(target)) as (rx, tx):
            sent = tx.send_async(uamqp.Message(b"rd %d" % i) for i in range(2))
            pump.until(lambda: len(rx.messages) == 2, tx, rx, what="the messages")
            pump.turns(0.5, tx, rx)
            before = [Sent(s.result, s.state) for s in sent]
            received = len(rx.messages)
            rx.close()
            pump.until(lambda: all(s.done for s in sent), tx, what="the outcomes")
            return before, sent, received

    before, after, received = await in_thread(scenario)
    assert received == 2
    assert not any(s.done for s in before)
    assert [(s.result, s.state) for s in after] == [(ERROR, [True])] * 2  # modified, delivery-failed


async def test_receive_and_delete_with_settled_transfers(env: Env) -> None:
    """A ReceiveAndDelete receiver that asks for snd-settle-mode settled: the router sends the
    messages presettled, and the producer's are accepted."""
    target, count = address(), 3

    def scenario(pump: Pump) -> tuple[list[Sent], list[bool], list[bytes]]:
        with pump.pair(
            env.receiver(target, receive_settle_mode=FIRST, send_settle_mode=constants.SenderSettleMode.Settled),
            env.sender(target),
        ) as (rx, tx):
            sent = tx.send_async(uamqp.Message(b"rd %d" % i) for i in range(count))
            pump.until(lambda: len(rx.messages) == count and all(s.done for s in sent), tx, rx, what="the outcomes")
            return sent, [m.settled for m in rx.messages], [body(m) for m in rx.messages]

    sent, settled, bodies = await in_thread(scenario)
    assert [s.result for s in sent] == [OK] * count
    assert settled == [True] * count
    assert bodies == [b"rd %d" % i for i in range(count)]


# --- size and credit -------------------------------------------------------------------------------


async def test_one_mebibyte_message_in_many_frames(env: Env) -> None:
    """1 MiB of data to a receiver whose attach allows 2 MiB: the client cuts it into transfers
    of the router's max-frame-size and the router cuts what it sends the receiver the same way;
    it arrives whole, accepted."""
    target = address()
    data = bytes(range(256)) * (MiB // 256)

    def scenario(pump: Pump) -> tuple[list[Sent], list[bytes]]:
        with pump.pair(env.receiver(target, max_message_size=2 * MiB), env.sender(target)) as (rx, tx):
            sent = tx.send_async([uamqp.Message(data), uamqp.Message(b"after")])
            pump.until(lambda: len(rx.messages) == 2, tx, rx, what="the messages")
            for m in rx.messages:
                m.accept()
            pump.until(lambda: all(s.done for s in sent), tx, rx, what="the outcomes")
            return sent, [body(m) for m in rx.messages]

    sent, bodies = await in_thread(scenario)
    assert [s.result for s in sent] == [OK, OK]
    assert bodies == [data, b"after"]


async def test_the_receivers_default_max_message_size_is_honoured(env: Env) -> None:
    """uamqp's receiver puts max-message-size 1 MiB in its attach by default. A message of 1 MiB
    of data (a little more encoded) is never delivered to it: the router, which learns the size
    only as the frames come, aborts what it began to send (the client drops it) and the sender
    hears rejected with amqp:link:message-size-exceeded (docs/addressing.md). A smaller message
    after it goes through. The client hands the aborted delivery to the application as an empty
    message (a quirk pinned here)."""
    target = address()

    def scenario(pump: Pump) -> tuple[list[Sent], list[bytes]]:
        with pump.pair(env.receiver(target), env.sender(target)) as (rx, tx):
            sent = tx.send_async([uamqp.Message(b"x" * MiB), uamqp.Message(b"small")])
            pump.until(lambda: bool(rx.messages) and sent[0].done, tx, rx, what="the small message")
            for m in rx.messages:
                m.accept()
            pump.until(lambda: all(s.done for s in sent), tx, rx, what="the outcomes")
            return sent, [m._body and body(m) for m in rx.messages]

    sent, bodies = await in_thread(scenario)
    assert sent[0].result == ERROR, (sent, bodies)
    (error,) = sent[0].state
    assert error[0] == b"amqp:link:message-size-exceeded", error
    assert sent[1].result == OK
    # The aborted delivery reaches the application as a message without a body: uAMQP-C does
    # not discard it (transport §2.6.14: the receiver MUST discard an aborted message's data).
    assert bodies == [None, b"small"]


async def test_one_message_of_credit_at_a_time_gets_everything(env: Env) -> None:
    """A receiver with prefetch 1 (link-credit 1, topped up by uAMQP-C as it goes): everything the
    sender sent arrives, in order, each accepted."""
    target, count = address(), 30

    def scenario(pump: Pump) -> tuple[list[Sent], list[bytes]]:
        with pump.pair(env.receiver(target, prefetch=1), env.sender(target)) as (rx, tx):
            sent = tx.send_async(uamqp.Message(b"%d" % i) for i in range(count))
            accepted = 0

            def step() -> bool:
                nonlocal accepted
                while accepted < len(rx.messages):
                    rx.messages[accepted].accept()
                    accepted += 1
                return accepted == count and all(s.done for s in sent)

            pump.until(step, tx, rx, what="the outcomes")
            return sent, [body(m) for m in rx.messages]

    sent, bodies = await in_thread(scenario)
    assert bodies == [b"%d" % i for i in range(count)]
    assert [s.result for s in sent] == [OK] * count


async def test_its_url_addresses_meet_other_clients_bare_ones(env: Env) -> None:
    """uamqp names a node by URL (`amqps://host:port/orders`, as its target and source address);
    the router routes the node's address, `orders`, as it does for `amqp://...`: a uamqp sender
    reaches a receiver of another stack attached to the bare address."""
    target = address()
    async with connect("127.0.0.1", env.router.ports["tcp"]) as client:
        receiver = await client.open_receiver(target, credit=5)

        def scenario(pump: Pump) -> list[Sent]:
            tx = env.sender(target)
            try:
                pump.attached(tx)
                sent = tx.send_async(uamqp.Message(b"%d" % i) for i in range(3))
                pump.until(lambda: all(s.done for s in sent), tx, what="the outcomes")
                return sent
            finally:
                close_all(tx)

        async def consume() -> list[bytes]:
            got = []
            for _ in range(3):
                delivery = await receiver.receive()
                receiver.accept(delivery)
                got.append(delivery.message.body_bytes)
            return got

        async with trio.open_nursery() as nursery:
            received: list[list[bytes]] = []

            async def collect() -> None:
                received.append(await consume())

            nursery.start_soon(collect)
            sent = await in_thread(scenario)
    assert [s.result for s in sent] == [OK] * 3
    assert received == [[b"0", b"1", b"2"]]


# --- the connection ------------------------------------------------------------------------------------


async def test_short_idle_timeout_is_kept_alive(env: Env) -> None:
    """The client asks for an idle time-out of 1 s: the router sends empty frames often enough
    that the client, turning for 2.5 s with nothing else to read, keeps its connection, and a
    message then goes through."""
    target = address()

    def scenario(pump: Pump) -> tuple[Sent, list[bytes]]:
        with pump.pair(env.receiver(target, idle_timeout=1000), env.sender(target, idle_timeout=1000)) as (rx, tx):
            pump.turns(2.5, tx, rx)
            (sent,) = tx.send_async([uamqp.Message(b"still here")])
            pump.until(lambda: bool(rx.messages), tx, rx, what="the message")
            rx.messages[0].accept()
            pump.until(lambda: sent.done, tx, rx, what="the outcome")
            return sent, [body(m) for m in rx.messages]

    sent, bodies = await in_thread(scenario)
    assert sent.result == OK
    assert bodies == [b"still here"]


