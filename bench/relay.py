"""The router's per-message cost without sockets: producer and consumer engines around one
RouterCore, and only the router side timed (its engines' receive_data and data_to_send, and the
core's handle). CPU time of one process, so other load on the machine hardly moves it.

The consumer accepts in ranges (one disposition per batch), as Proton does, and grants credit in
batches; the producer sends in batches of its credit. Reported: µs per message for unsettled
and presettled 100-byte messages, and a cProfile of the router side on request.

`--flow` (or `run_relay(..., flow=True)`) runs with flow records on (docs/flow-records.md):
the core counts for them on the hot path, 1 in 1000 deliveries gets a hop record, and the
recorder is polled and its records encoded as messages every 10,000 deliveries, inside the
timed part (the router does it once a second, about every 300,000 deliveries at its rate in
scenario 1: this charges the flush 30 times over). `flush_cost()` is one flush on its own.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

# The checkout (or build directory) first, and not this directory: run as a script, bench/ would
# be first on the path and bench/topology.py would hide the topology package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from router.amqp.connection import Connection, ConnectionConfig  # noqa: E402
from router.amqp.events import TransferReceived  # noqa: E402
from router.amqp.message import Message, encode_message  # noqa: E402
from router.amqp.messaging import ACCEPTED, Properties, Source, Target  # noqa: E402
from router.config.models import AddressConfig, Flow, RouterConfig, RouterSection  # noqa: E402
from router.core.connections import new_engine  # noqa: E402
from router.core.router import RouterCore  # noqa: E402


class Relay:
    def __init__(self, flow: bool = False, multicast: bool = False) -> None:
        addresses = (AddressConfig(prefix="q", distribution="multicast"),) if multicast else ()
        self.config = RouterConfig(router=RouterSection(id="bench"), flow=Flow(enabled=flow, file_dir=None),
                                   addresses=addresses)
        self.core = RouterCore(self.config)
        self.recorder = None
        if flow:
            from router.flow.recorder import FlowRecorder  # noqa: PLC0415

            self.recorder = FlowRecorder(self.core, self.config.flow, version="bench", compiled=False)
        self.router_s = 0.0
        self.pairs: list[tuple[Connection, Connection]] = []

    def connect(self, name: str) -> Connection:
        listener = self.config.listeners[0]
        router_side = new_engine(self.config, listener)
        self.core.accept(router_side, listener)
        client = Connection(ConnectionConfig(container_id=name))
        self.pairs.append((client, router_side))
        client.open()
        return client

    def pump(self, on_client: Any) -> None:
        clock = time.process_time
        for _ in range(1000):
            moved = False
            for client, router_side in self.pairs:
                data = client.data_to_send()
                if data:
                    moved = True
                    started = clock()
                    router_side.receive_data(data, 0.0)
                    self.core.handle(router_side, router_side.events(), 0.0)
                    self.router_s += clock() - started
            for client, router_side in self.pairs:
                started = clock()
                back = router_side.data_to_send()
                self.router_s += clock() - started
                if back:
                    moved = True
                    client.receive_data(back, 0.0)
                    on_client(client, client.events())
            self.core.take_touched()
            if not moved:
                return


def consume(events: list[Any], receiver: Any, presettled: bool, received: list[int]) -> None:
    """The consumer of a relay bench, as Proton behaves: accept in one range per batch, grant
    credit in batches of 1000."""
    ids = [e.delivery_id for e in events if type(e) is TransferReceived]
    if ids:
        received.extend(ids)
        if not presettled:
            receiver.dispose(ids[0], ids[-1], state=ACCEPTED, settled=True)
        if receiver.credit < 500:
            receiver.flow(1000)


def _flush_records(relay: Relay) -> None:
    """What the router's flush task does once a second: poll, interval, encode the batches (no
    one subscribes here, so they are encoded as they would be sent, then dropped)."""
    from router.flow.publish import batch_message  # noqa: PLC0415

    recorder = relay.recorder
    assert recorder is not None
    recorder.poll(1.0)
    recorder.interval(1.0)
    while records := recorder.take(1000):
        batch_message(records, "_flow/records")


def run_relay(
    count: int, presettled: bool, profile: bool = False, size: int = 60, flow: bool = False, flush_every: int = 10_000,
    receivers: int = 0,
) -> float:  # fmt: skip
    """µs of router CPU per message. With `flow`, the records are flushed every `flush_every`
    deliveries (0: once, at the end: bench/instructions.py counts the hot path alone).
    `receivers` > 0: the address is multicast, with that many consumers (each on its own
    connection); every consumer must get every message."""
    relay = Relay(flow, multicast=receivers > 0)
    producer = relay.connect("producer")
    consumers = [relay.connect(f"consumer{i}") for i in range(max(1, receivers))]
    relay.pump(lambda c, e: None)
    ps = producer.begin_session()
    sessions = [consumer.begin_session() for consumer in consumers]
    relay.pump(lambda c, e: None)
    links = {c: s.attach_receiver("rx", source=Source(address="q"), target=Target()) for c, s in zip(consumers, sessions)}
    sender = ps.attach_sender("tx", source=Source(), target=Target(address="q"))
    relay.pump(lambda c, e: None)
    for receiver in links.values():
        receiver.flow(1000)
    relay.pump(lambda c, e: None)
    payload = encode_message(Message.value("x" * size, properties=Properties(to="q")))
    received: list[int] = []

    def on_client(client: Connection, events: list[Any]) -> None:
        receiver = links.get(client)
        if receiver is not None:
            consume(events, receiver, presettled, received)

    relay.router_s = 0.0
    profiler = cProfile.Profile() if profile else None
    sent = 0
    if profiler:
        profiler.enable()
    while sent < count:
        batch = min(sender.credit, count - sent, 250)
        for i in range(batch):
            sender.send_transfer(i.to_bytes(4, "big"), payload, settled=presettled)
        sent += batch
        relay.pump(on_client)
        if flow and flush_every and sent % flush_every < batch:
            started = time.process_time()
            _flush_records(relay)
            relay.router_s += time.process_time() - started
    if flow and not flush_every:
        _flush_records(relay)
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    assert len(received) == count * len(links), (len(received), count)
    return relay.router_s / count * 1e6


def flush_cost(rounds: int = 200) -> float:
    """µs of CPU for one flush of a relay's records (poll, interval, encoding), the flush the
    router's task makes once a second: the relay's two links and one address, with 10 hops."""
    relay = Relay(flow=True)
    recorder = relay.recorder
    assert recorder is not None
    started = time.process_time()
    for _ in range(rounds):
        for _ in range(10):
            recorder.emitter.emit("hop", 1.0, {"trace_id": "t", "ingress": "bench", "address": "q", "prev": None,
                                               "next": None, "residence_us": 3, "settle_us": 40, "outcome": "accepted"})  # fmt: skip
        _flush_records(relay)
    return (time.process_time() - started) / rounds * 1e6


def run() -> dict[str, float]:
    return {
        "relay_unsettled_us_per_msg": min(run_relay(20000, False) for _ in range(3)),
        "relay_presettled_us_per_msg": min(run_relay(20000, True) for _ in range(3)),
        "relay_10kib_unsettled_us_per_msg": min(run_relay(5000, False, size=10240) for _ in range(3)),
    }


if __name__ == "__main__":
    if "--profile" in sys.argv:
        size = 10240 if "--10k" in sys.argv else 60
        receivers = int(sys.argv[sys.argv.index("--multicast") + 1]) if "--multicast" in sys.argv else 0
        run_relay(20000 if size == 60 else 5000, "--presettled" in sys.argv, profile=True, size=size, flow="--flow" in sys.argv,
                  receivers=receivers)
    elif "--flow" in sys.argv:  # flow records off and on, alternating, the best of 5 each
        off = min(run_relay(20000, False) for _ in range(5))
        on = min(run_relay(20000, False, flow=True) for _ in range(5))
        print({"relay_unsettled_us_per_msg": off, "relay_unsettled_flow_us_per_msg": on, "ratio": on / off,
               "flush_us": flush_cost()})
    else:
        print(run())
