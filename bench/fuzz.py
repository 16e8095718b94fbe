"""A long fuzz run of the router's engine and core, in process (no sockets, for speed).

    python bench/fuzz.py [--inputs 1000000] [--seed N] [--crashes DIR] [--peer client|router|edge|uplink]

Each input is a connection of its own to one RouterCore, as a listener would accept it: the
bytes are fed in one to three reads, the core handles every event, the output is taken, then
the stream ends (as the server does when a connection goes). Inputs are mutations of recorded
sessions (a python-qpid-proton client's, tests/support/proton_session.bin, and one of our own
client engine's) and generated frames with fields of any type. Meanwhile a well-behaved client
on the same core sends a message every 1,000 inputs and must get it back with its outcome.

Reported: inputs per second, crashes (any exception out of the engine or the core: must be 0;
each distinct one is saved with its input under --crashes), connections the core still holds
after their stream ended, and the good client's messages and outcomes.

With --peer router|edge|uplink each input is what another router sends instead (bench/fuzzpeer.py,
seeds recorded in bench/fuzzseeds.py): on a connection accepted on the inter-router or the edge
listener, or on the uplink of the fuzzed router made an edge router; besides the connection, what
the core holds for it once it is gone is checked (peers, topology, routes, table, link routes).
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from router.amqp import events as ev  # noqa: E402
from router.amqp.connection import Connection, ConnectionConfig  # noqa: E402
from router.amqp.encode import encode  # noqa: E402
from router.amqp.framing import AMQP_HEADER, SASL_HEADER  # noqa: E402
from router.amqp.message import Message, encode_message  # noqa: E402
from router.amqp.messaging import ACCEPTED, Source, Target  # noqa: E402
from router.amqp.performatives import AMQP_PERFORMATIVES, SASL_PERFORMATIVES, Begin, Open  # noqa: E402
from router.amqp.types import Described, Symbol, UByte, UInt, ULong  # noqa: E402
from router.config.models import Listener, RouterConfig, RouterSection  # noqa: E402
from router.core.connections import new_engine  # noqa: E402
from router.core.router import RouterCore  # noqa: E402
from router.testing.wire import raw_frame, split_stream  # noqa: E402

from bench.fuzzpeerinputs import mutate_bytes  # noqa: E402

PROTON_SESSION = ROOT / "tests" / "support" / "proton_session.bin"
GOOD_EVERY = 1000

# Field values of every AMQP type the codec knows, for type confusion.
VALUES: list[Any] = [
    None, True, False, UByte(7), UInt(0), UInt(1), UInt(0xFFFFFFFF), ULong(2**64 - 1), -1, 2**63 - 1,
    1.5, "", "text", "x" * 300, Symbol("amqp:decode-error"), b"", b"\x00" * 40, [], [None, 1],
    {}, {Symbol("k"): "v"}, {"k": 1}, {b"t": None}, Described(ULong(0x24), []),
    Described(ULong(0x28), ["a"]), Described(ULong(0x29), [b"bin"]), Described(ULong(0x1D), ["c"]),
    Described(Symbol("amqp:accepted:list"), []), Described(ULong(0x99), [1]),
]  # fmt: skip


def own_client_session() -> bytes:
    """What our client engine sends in one ordinary session with a router core."""
    config = RouterConfig(router=RouterSection(id="seed"), listeners=(Listener(name="amqp", port=0),))
    core = RouterCore(config)
    server = new_engine(config, config.listeners[0])
    core.accept(server, config.listeners[0])
    client = Connection(ConnectionConfig(container_id="seed-client"))
    sent = bytearray()

    def pump() -> list[ev.Event]:
        events: list[ev.Event] = []
        for _ in range(50):
            out = client.data_to_send()
            sent.extend(out)
            if out:
                server.receive_data(out, 1.0)
            core.handle(server, server.events(), 1.0)
            core.take_touched()
            back = server.data_to_send()
            if back:
                client.receive_data(back, 1.0)
            new = client.events()
            events += new
            if not out and not back and not new:
                break
        return events

    client.open()
    session = client.begin_session()
    receiver = session.attach_receiver("seed-r", source=Source(address="seed"))
    sender = session.attach_sender("seed-s", source=Source(), target=Target(address="seed"))
    pump()
    receiver.flow(10)
    pump()
    for i in range(4):
        sender.send_transfer(b"%d" % i, encode_message(Message.value(f"m{i}")))
        for event in pump():
            if isinstance(event, ev.TransferReceived):
                event.link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
        pump()
    sender.detach()
    receiver.detach()
    session.end()
    client.close()
    pump()
    return bytes(sent)


class Inputs:
    def __init__(self, rng: random.Random, seeds: list[bytes]) -> None:
        self.rng = rng
        self.seeds = [split_stream(seed) for seed in seeds]

    def next(self) -> bytes:
        roll = self.rng.random()
        if roll < 0.6:
            return self.mutated()
        if roll < 0.9:
            return self.generated()
        header = self.rng.choice([AMQP_HEADER, SASL_HEADER, b"AMQP\x01\x01\x00\x00", b""])
        return header + self.rng.randbytes(self.rng.randint(0, 128))

    def value(self) -> Any:
        return self.rng.choice(VALUES)

    def mutated(self) -> bytes:
        rng = self.rng
        pieces = list(rng.choice(self.seeds))
        for _ in range(rng.randint(1, 3)):
            if not pieces:
                break
            i = rng.randrange(len(pieces))
            piece = pieces[i]
            op = rng.randrange(8)
            changed = mutate_bytes(rng, piece, op)
            if changed is not None:
                pieces[i] = changed
            elif op == 2:  # cut the stream
                pieces[i] = piece[: rng.randint(0, len(piece))]
                del pieces[i + 1 :]
            elif op == 3:
                del pieces[i]
            elif op == 4:
                pieces[i:i] = [piece] * rng.randint(1, 3)
            elif op == 5:
                j = rng.randrange(len(pieces))
                pieces[i], pieces[j] = pieces[j], pieces[i]
            elif op == 7:  # a field of the performative: any value (re-encoded)
                pieces[i] = self.refield(piece)
        return b"".join(pieces)

    def refield(self, piece: bytes) -> bytes:
        from router.amqp.decode import decode_at

        if len(piece) < 8 or piece[:4] == b"AMQP" or piece[4] * 4 >= len(piece):
            return piece
        try:
            performative, stop = decode_at(piece, piece[4] * 4, len(piece))
            fields = [getattr(performative, name) for name in performative.__dataclass_fields__]
            fields[self.rng.randrange(len(fields))] = self.value()
            body = encode(Described(ULong(performative.DESCRIPTOR_CODE), fields))
        except Exception:  # noqa: BLE001 - not rebuildable: leave the frame as it is
            return piece
        return raw_frame(struct.unpack_from(">H", piece, 6)[0], body + piece[stop:], piece[5])

    def generated(self) -> bytes:
        rng = self.rng
        out = bytearray(AMQP_HEADER)
        if rng.random() < 0.8:
            out += raw_frame(0, encode(Open(container_id="fuzz", max_frame_size=rng.choice([512, 4096, 65536]))))
        if rng.random() < 0.7:
            out += raw_frame(0, encode(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
        for _ in range(rng.randint(1, 5)):
            cls = rng.choice(AMQP_PERFORMATIVES + SASL_PERFORMATIVES)
            fields = [self.value() for _ in range(rng.randint(0, 14))]
            try:
                body = encode(Described(ULong(cls.DESCRIPTOR_CODE), fields))  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - e.g. a value our encoder refuses in a list
                continue
            out += raw_frame(rng.randint(0, 2), body + rng.randbytes(rng.randint(0, 16)), rng.choice([0, 0, 0, 1]))
        return bytes(out)


class GoodClient:
    """A well-behaved client of the fuzzed core: one message per call, which must come back."""

    def __init__(self, core: RouterCore, config: RouterConfig) -> None:
        self.core = core
        self.server = new_engine(config, config.listeners[0])
        core.accept(self.server, config.listeners[0])
        self.client = Connection(ConnectionConfig(container_id="good"))
        self.client.open()
        session = self.client.begin_session()
        self.receiver = session.attach_receiver("good-r", source=Source(address="good"))
        self.sender = session.attach_sender("good-s", source=Source(), target=Target(address="good"))
        self.sent = self.received = self.accepted = 0
        self.pump(0.0)
        self.receiver.flow(1000)
        self.pump(0.0)

    def pump(self, now: float) -> None:
        for _ in range(50):
            out = self.client.data_to_send()
            if out:
                self.server.receive_data(out, now)
            self.core.handle(self.server, self.server.events(), now)
            back = self.server.data_to_send()
            if back:
                self.client.receive_data(back, now)
            events = self.client.events()
            for event in events:
                if isinstance(event, ev.TransferReceived):
                    self.received += 1
                    event.link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
                    if self.receiver.credit < 100:
                        self.receiver.flow(1000)
                elif isinstance(event, ev.DispositionReceived) and event.role:
                    self.accepted += event.last - event.first + 1
            if not out and not back and not events:
                return

    def send(self, now: float) -> None:
        if self.sender.credit:
            self.sender.send_transfer(b"%d" % self.sent, encode_message(Message.value(self.sent)))
            self.sent += 1
        self.pump(now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--crashes", type=Path, default=Path("fuzz-crashes"))
    parser.add_argument("--report-every", type=int, default=100_000)
    parser.add_argument("--peer", choices=("client", "router", "edge", "uplink"), default="client",
                        help="whose bytes each input is: a client's; a peer router's on the inter-router listener; an "
                        "edge router's on the edge listener; an interior's on the uplink of the fuzzed edge router "
                        "(bench/fuzzpeer.py)")  # fmt: skip
    args = parser.parse_args()
    if args.peer != "client":
        from bench.fuzzpeer import run_peer

        return run_peer(args, Inputs(random.Random(args.seed), []).refield, GoodClient)

    config = RouterConfig(router=RouterSection(id="fuzzed"), listeners=(Listener(name="amqp", port=0),))
    listener = config.listeners[0]
    core = RouterCore(config)
    good = GoodClient(core, config)
    seeds = [own_client_session()]
    if PROTON_SESSION.exists():
        seeds.append(PROTON_SESSION.read_bytes())
    inputs = Inputs(random.Random(args.seed), seeds)
    crashes: dict[str, int] = {}
    now = 1_000_000.0
    start = time.perf_counter()
    for n in range(1, args.inputs + 1):
        data = inputs.next()
        engine = new_engine(config, listener)
        try:
            core.accept(engine, listener)
            reads = inputs.rng.randint(1, 3)
            step = max(1, len(data) // reads)
            for at in range(0, len(data), step):
                engine.receive_data(data[at : at + step], now)
                core.handle(engine, engine.events(), now)
                engine.data_to_send()
            engine.receive_data(b"", now)  # the stream ends, as the server feeds it
            core.handle(engine, engine.events(), now)
            engine.data_to_send()
            core.take_touched()
        except Exception as exc:  # noqa: BLE001 - what we are looking for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} at {Path(where.filename).name}:{where.lineno}"
            if key not in crashes:
                args.crashes.mkdir(parents=True, exist_ok=True)
                (args.crashes / f"crash-{len(crashes)}.bin").write_bytes(data)
                (args.crashes / f"crash-{len(crashes)}.txt").write_text("".join(traceback.format_exception(exc)))
                print(f"crash {len(crashes)}: {key}", flush=True)
            crashes[key] = crashes.get(key, 0) + 1
            core.forget(engine, now)  # as the server does: the core releases it (router.core.release)
        if n % GOOD_EVERY == 0:
            now += 1.0
            core.tick(now)
            good.send(now)
        if n % args.report_every == 0 or n == args.inputs:
            elapsed = time.perf_counter() - start
            print(
                f"{n:>9,} inputs  {n / elapsed:8,.0f}/s  crashes {sum(crashes.values())}  "
                f"connections held {len(core.connections) - 1}  good {good.sent} sent, "
                f"{good.received} received, {good.accepted} accepted",
                flush=True,
            )
    good.pump(now)
    ok = not crashes and good.received == good.sent == good.accepted and len(core.connections) == 1
    print(("OK" if ok else "FAILED") + f": {args.inputs:,} inputs, {sum(crashes.values())} crashes")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
