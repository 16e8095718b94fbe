"""What the flow recorder costs the router's loop at scale: N addresses, each with one consumer
link (N / 500 consumer connections) and one delivery from an anonymous producer, then the
recorder's poll and interval timed (wall time, in process, no sockets): the first poll (every
link new) and the first interval (all of them moved), each as the router runs it, a slice at a
time (`*_step_ms`: the longest hold of the loop; `*_ms`: the total), then quiet intervals, then
polls alone. The recorder runs in the router's event loop, so each hold is a stall of every
connection (docs/flow-records.md, "Cost").

    python -m bench.flowscale [--addresses 10000]
"""

from __future__ import annotations

import argparse
import json
import time

from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Properties, Source, Target

from .relay import Relay

PER_CONNECTION = 500


def run(addresses: int) -> dict[str, float]:
    relay = Relay(flow=True)
    recorder = relay.recorder
    assert recorder is not None
    producer = relay.connect("producer")
    consumers = [relay.connect(f"c{i}") for i in range(max(1, addresses // PER_CONNECTION))]
    relay.pump(lambda c, e: None)
    sessions = [c.begin_session() for c in consumers]
    producing = producer.begin_session()
    relay.pump(lambda c, e: None)
    receivers = [sessions[i // PER_CONNECTION].attach_receiver(f"rx{i}", source=Source(address=f"a{i}"), target=Target())
                 for i in range(addresses)]  # fmt: skip
    relay.pump(lambda c, e: None)
    for receiver in receivers:
        receiver.flow(10)
    sender = producing.attach_sender("tx", source=Source(), target=Target(address=None))
    relay.pump(lambda c, e: None)
    received = 0

    def on_client(client: object, events: list[object]) -> None:
        nonlocal received
        received += sum(1 for e in events if type(e) is TransferReceived)

    sent = 0
    while sent < addresses:
        batch = min(sender.credit, addresses - sent, 250)
        for i in range(sent, sent + batch):
            message = encode_message(Message.value("x", properties=Properties(to=f"a{i}")))
            sender.send_transfer(i.to_bytes(4, "big"), message, settled=False)
        sent += batch
        relay.pump(on_client)
    assert received == addresses, (received, addresses)

    made = [0]

    def timed(action: object, now: float) -> float:
        started = time.perf_counter()
        action(now)  # type: ignore[operator]
        made[0] += len(recorder.take(10**7))
        return (time.perf_counter() - started) * 1e3

    def longest_step(begin: object, now: float) -> tuple[float, float]:
        """The recorder as the router runs it (begin_poll, then one slice per turn of the loop):
        its longest hold of the loop and its total, in ms."""
        steps = [timed(begin, now)]
        while recorder.pending:
            steps.append(timed(lambda _now: recorder.step(), now))
        return max(steps), sum(steps)

    result = {"addresses": float(addresses)}
    result["first_poll_step_ms"], result["first_poll_ms"] = longest_step(recorder.begin_poll, 1.0)  # every link new
    # (the interval is due 10 s after the first poll; quiet ones are forced, polls are not due)
    made[0] = 0
    result["busy_interval_step_ms"], result["busy_interval_ms"] = longest_step(recorder.begin_poll, 11.0)
    result["busy_interval_records"] = made[0]
    result["quiet_interval_ms"] = min(timed(recorder.interval, t) for t in (12.0, 13.0, 14.0))
    result["poll_ms"] = min(timed(recorder.poll, t) for t in (15.0, 16.0, 17.0))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addresses", type=int, default=10_000)
    args = parser.parse_args()
    print(json.dumps(run(args.addresses)))


if __name__ == "__main__":
    main()
