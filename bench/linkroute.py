"""A link-routed relay's per-message cost without sockets, beside the message-routed relay in the
same harness (router/testing/routerharness.py): a producer sends 100-byte unsettled messages in
batches of the credit it has (at most 250) to a receiver that accepts each batch in one
disposition range and grants the same credit again. Link-routed, the receiver is a route
container (a `route-container` listener, link route `q` in); message-routed, it is a consumer of
the address. CPU time of the whole harness (engines of both ends included), so read the two side
by side, not alone.

    python bench/linkroute.py [--messages N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from router.amqp import events as ev  # noqa: E402
from router.amqp.endpoints import UNINIT  # noqa: E402
from router.amqp.link import Link  # noqa: E402
from router.amqp.message import Message, encode_message  # noqa: E402
from router.amqp.messaging import ACCEPTED  # noqa: E402
from router.config.models import LinkRouteConfig, Listener, RouterConfig, RouterSection  # noqa: E402
from router.testing.routerharness import Client, RouterHarness  # noqa: E402

CLIENTS = Listener(name="amqp", port=5672)
BROKER = Listener(name="broker", port=5673, role="route-container")
WINDOW = 250
PAYLOAD = encode_message(Message.value("x" * 100))


def _receiving_end(h: RouterHarness, receiver_client: Client, routed: bool) -> Link:
    if not routed:
        link = receiver_client.receiver("m.bench")
        h.pump()
        return link
    for event in receiver_client.events:
        if isinstance(event, ev.RemoteBegin) and event.session.state.local is UNINIT:
            event.session.begin()
    link = [e.link for e in receiver_client.events if isinstance(e, ev.RemoteAttach)][-1]
    link.answer(source=link.remote_source, target=link.remote_target)
    receiver_client.received[link] = []
    return link


def run(messages: int, routed: bool) -> float:
    """CPU µs per message."""
    config = RouterConfig(router=RouterSection(id="bench"), listeners=(CLIENTS, BROKER), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),))  # fmt: skip
    h = RouterHarness(config)
    receiver_client = h.connect("receiver", listener=BROKER if routed else CLIENTS)
    receiver_client.auto_accept = False
    producer = h.connect("producer")
    if not routed:
        receiving = _receiving_end(h, receiver_client, routed)
    sender = producer.sender("q.bench" if routed else "m.bench")
    h.pump()
    if routed:
        receiving = _receiving_end(h, receiver_client, routed)
        h.pump()
    receiving.flow(WINDOW)
    h.pump()
    sent = 0
    start = time.process_time()
    while sent < messages:
        batch = min(sender.credit, messages - sent)
        for _ in range(batch):
            producer.tags += 1
            sender.send_transfer(producer.tags.to_bytes(4, "big"), PAYLOAD)
        sent += batch
        h.pump()
        arrived = receiver_client.received[receiving]
        if arrived:
            receiving.dispose(arrived[0].delivery_id, arrived[-1].delivery_id, state=ACCEPTED, settled=True)
            arrived.clear()
            receiving.flow(WINDOW)
        h.pump()
        producer.outcomes.clear()
        producer.settled.clear()
    return (time.process_time() - start) / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    for routed in (False, True):
        figures = sorted(run(args.messages, routed) for _ in range(3))
        print(f"{'link-routed' if routed else 'message-routed'}: {figures[1]:.1f} µs per message "
              f"(median of 3; {figures[0]:.1f}-{figures[2]:.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
