"""Inputs for fuzzing what a peer router sends (bench/fuzzpeer.py): mutations of the recorded
sessions of bench/fuzzseeds.py, as lists of reads.

    inputs = PeerInputs(random.Random(1), [interior_session()], refield)
    reads = inputs.next()          # [(seconds since the connection came, bytes of one read), ...]

What the client fuzzer does to frames (bench/fuzz.py: bytes flipped, inserted, cut; frames
dropped, repeated, swapped, their sizes falsified, a performative field of any type; `refield`
is its field mutation), reads moved, and inside the messages between routers: a field of a
control message's body (HELLO, RA, LSR, LSU, MAR, MAU, EDGE-ADDRESSES, MESH-ADDRESSES) replaced,
dropped or given a wrong type: unknown router ids, this router's own, ids too long, huge lists
of seen routers or addresses, link states with self-loops and costs out of range, digests of the
wrong size, other versions and opcodes; the body itself no map; and the router annotations of a
delivery (x-opt-qd.to, .ingress, .trace, .flow-trace: wrong types, traces past their limit or
through this router, unknown destinations), or a message-annotations section that is no map.
Most of the time the recorded reads are kept (a peer router answers what this router sent, so
all of it in one read fails at the first answer); sometimes all is regrouped into 1 to 3 reads.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable
from typing import Any

from router.amqp.decode import decode_at
from router.amqp.encode import encode
from router.amqp.message import Message, decode_message, encode_message
from router.amqp.performatives import Transfer
from router.amqp.types import Array, Described, Symbol, UByte, UInt, ULong
from router.testing.wire import raw_frame, split_stream

from .fuzzseeds import FUZZED, FUZZED_EDGE, PEER, Reads


# Values of the router-specific fields: wrong types, ids unknown or ours, out of range.
IDS: list[Any] = [PEER, FUZZED, FUZZED_EDGE, "edge", "ghost", "x" * 255, "x" * 256, "", "a/b", "_topo/0/x", None, 7]
NUMBERS: list[Any] = [
    0, 1, -1, 2, 255, 256, 2**31 - 1, 2**31, 2**63 - 1, 2**64 - 1, UInt(1), ULong(2**64 - 1), 1.5, True,
]  # fmt: skip
ANY: list[Any] = [
    None, True, UByte(7), "", "text", Symbol("sym"), b"", b"\x00" * 16, b"\x00" * 15, [], [None, 1], {}, {"k": 1},
    {Symbol("k"): "v"}, Described(ULong(0x77), [1]), Array("string", ["a", "b"]), Array("int", [1, 2]),
]  # fmt: skip


def _value(rng: random.Random) -> Any:
    return rng.choice((IDS, NUMBERS, ANY))[rng.randrange(8)] if rng.random() < 0.5 else rng.choice(IDS + NUMBERS + ANY)


def _id_list(rng: random.Random) -> Any:
    roll = rng.randrange(7)
    if roll == 0:
        return [f"r{i}" for i in range(rng.choice([300, 2000, 20000]))]  # huge
    if roll == 1:
        return [rng.choice(IDS) for _ in range(rng.randint(1, 4))]  # wrong types, repeats
    if roll == 2:
        return [FUZZED, PEER]  # us, the sender itself
    if roll == 3:
        return Array("string", ["far", "sink"])
    if roll == 4:
        return ["\x00lr/lr", "\x00lr/" + "x" * 300, "_topo/0/fuzzed/x", "_local/x", "$management", "mc.x", "far"]
    if roll == 5:
        return {"far": 1}
    return _value(rng)


def _peers_map(rng: random.Random) -> Any:
    roll = rng.randrange(5)
    if roll == 0:
        return {PEER: 1, FUZZED: 1}  # a self-loop: the sender is its own peer
    if roll == 1:
        return {FUZZED: rng.choice(NUMBERS)}  # costs out of range, wrong types
    if roll == 2:
        return {f"r{i}": 1 for i in range(rng.choice([50, 1000, 5000]))}  # unknown routers
    if roll == 3:
        return {rng.choice(IDS): rng.choice(NUMBERS)}
    return _value(rng)


KEYS = {  # control-message fields and what to try in them
    "op": lambda rng: rng.choice(["HELLO", "RA", "LSR", "LSU", "MAR", "MAU", "EDGE-ADDRESSES", "MESH-ADDRESSES",
                                  "MESH-ADDRESSES-REQUEST", "NOPE", 1, None]),  # fmt: skip
    "pv": lambda rng: rng.choice([0, 1, 2, -1, 2**63 - 1, "1", None]),
    "id": lambda rng: rng.choice(IDS),
    "instance": lambda rng: rng.choice(NUMBERS),
    "seen": _id_list, "add": _id_list, "del": _id_list, "exist": _id_list, "addresses": _id_list,
    "remove": _id_list, "peers": _peers_map,
    "target": lambda rng: rng.choice(IDS),
    "digest": lambda rng: rng.choice([b"\x00" * 16, b"\xff" * 16, b"", b"\x00" * 17, "digest", None]),
}  # fmt: skip
NUMBER_KEYS = ("hello_ms", "ra_seq", "ls_seq", "mobile_seq", "have_seq", "target_instance", "seq")
ANNOTATIONS = {  # x-opt-qd.* of a transfer between routers
    "x-opt-qd.ingress": lambda rng: rng.choice(IDS + [Symbol(PEER)]),
    "x-opt-qd.to": lambda rng: rng.choice(["sink", "far", "lr.q", "_topo/0/fuzzed/$management", "_topo/0/ghost/x",
                                           "_local/x", "mc.x", "", None, 5, Symbol("sink")]),  # fmt: skip
    "x-opt-qd.trace": lambda rng: rng.choice([
        [PEER, FUZZED], [FUZZED], [PEER] * 40, [f"r{i}" for i in range(rng.choice([100, 1024, 1025, 5000]))],
        [PEER, 3], "peer", Array("string", [PEER]), Array("symbol", [Symbol(PEER)]), {}, None, [],
    ]),  # fmt: skip
    "x-opt-qd.flow-trace": lambda rng: rng.choice(["t" * 64, "t" * 65, "\x00", 1, True]),
    "x-opt-qd.phase": lambda rng: rng.choice([0, 1, -1, "x"]),
    "x-opt-router-trace": lambda rng: rng.choice([True, "id", "i" * 70, 0]),
}


def _whole_transfer(piece: bytes) -> bool:
    """`piece` is an AMQP frame of a transfer that carries a whole message."""
    if len(piece) < 8 or piece[:4] == b"AMQP" or piece[5] != 0:
        return False
    try:
        performative, _ = decode_at(piece, piece[4] * 4, len(piece))
    except Exception:  # noqa: BLE001
        return False
    return isinstance(performative, Transfer) and not performative.more


def mutate_bytes(rng: random.Random, piece: bytes, op: int) -> bytes | None:
    """The byte-level mutations of one frame both fuzzers make (bench/fuzz.py's client inputs
    and a peer router's): op 0 flips a byte, 1 inserts bytes, 6 lies about the frame's size;
    None for any other op (or one that does not apply to `piece`)."""
    if op == 0 and piece:  # flip a byte
        at = rng.randrange(len(piece))
        return piece[:at] + bytes([piece[at] ^ rng.randint(1, 255)]) + piece[at + 1 :]
    if op == 1:  # insert bytes
        at = rng.randint(0, len(piece))
        return piece[:at] + rng.randbytes(rng.randint(1, 16)) + piece[at:]
    if op == 6 and len(piece) >= 8 and piece[:4] != b"AMQP":  # lie about the size
        size = rng.choice([0, 7, 8, len(piece) - 1, len(piece) + 1, 0xFFFFFFFF, rng.getrandbits(32)])
        return struct.pack(">I", size) + piece[4:]
    return None


class PeerInputs:
    """Mutations of recorded peer sessions (bench.fuzzseeds): the client fuzzer's (bytes
    flipped, inserted, cut; frames dropped, repeated, swapped, their sizes falsified, a
    performative field of any type), and inside the messages between routers: the fields of
    control messages' bodies and the router annotations of transfers."""

    def __init__(self, rng: random.Random, seeds: list[Reads], refield: Callable[[bytes], bytes] | None = None) -> None:
        self.rng = rng
        self.seeds = [[(at, split_stream(data)) for at, data in seed] for seed in seeds]
        # Where each seed's whole messages are (read, frame): control messages and deliveries.
        self.transfers = [[(r, i) for r, (_, pieces) in enumerate(seed) for i, piece in enumerate(pieces)
                           if _whole_transfer(piece)] for seed in self.seeds]  # fmt: skip
        self.refield = refield

    def next(self) -> Reads:
        rng = self.rng
        which = rng.randrange(len(self.seeds))
        reads = [(at, list(pieces)) for at, pieces in self.seeds[which]]
        frames = [(r, i) for r, (_, pieces) in enumerate(reads) for i in range(len(pieces))]
        transfers = self.transfers[which]
        for _ in range(rng.randint(1, 3)):
            inside = transfers and rng.random() < 0.4
            r, i = rng.choice(transfers if inside else frames)
            if r >= len(reads) or i >= len(reads[r][1]):
                continue
            pieces = reads[r][1]
            if inside:
                pieces[i] = self.inside(pieces[i])
            elif rng.random() < 0.9:
                self.frame_op(reads, r, i)
            else:  # a read moves earlier or later
                at, moved = reads.pop(r)
                reads.insert(rng.randrange(len(reads) + 1), (at, moved))
        out = [(at, b"".join(pieces)) for at, pieces in reads]
        if rng.random() < 0.15:  # all of it in one to three reads
            data = b"".join(d for _, d in out)
            cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 2)))
            bounds = [0, *cuts, len(data)]
            last = out[-1][0] if out else 0.0
            out = [(last * k / 3, data[a:b]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        return out

    def frame_op(self, reads: list[tuple[float, list[bytes]]], r: int, i: int) -> None:
        rng = self.rng
        pieces = reads[r][1]
        piece = pieces[i]
        op = rng.randrange(8)
        changed = mutate_bytes(rng, piece, op)
        if changed is not None:
            pieces[i] = changed
        elif op == 2:  # the stream is cut here
            pieces[i] = piece[: rng.randint(0, len(piece))]
            del pieces[i + 1 :]
            del reads[r + 1 :]
        elif op == 3:
            del pieces[i]
        elif op == 4:
            pieces[i:i] = [piece] * rng.randint(1, 3)
        elif op == 5:  # swapped with a frame of any read
            r2 = rng.randrange(len(reads))
            other = reads[r2][1]
            if other:
                j = rng.randrange(len(other))
                pieces[i], other[j] = other[j], pieces[i]
        elif op == 7 and self.refield is not None:
            pieces[i] = self.refield(piece)

    def control_body(self, body: dict[Any, Any], message: Message) -> Message:
        rng = self.rng
        changed: Any = dict(body)
        for _ in range(rng.randint(1, 2)):
            key = rng.choice([*body.keys(), *KEYS.keys(), *NUMBER_KEYS])
            if rng.random() < 0.1:
                changed.pop(key, None)
            elif key in KEYS:
                changed[key] = KEYS[key](rng)
            elif key in NUMBER_KEYS:
                changed[key] = rng.choice(NUMBERS)
            else:
                changed[key] = _value(rng)
        if rng.random() < 0.1:
            changed = rng.choice([[changed], "body", None, {1: changed}])
        return Message.value(changed, application_properties=message.application_properties)

    def inside(self, piece: bytes) -> bytes:
        """A transfer's message changed inside: a control message's body field, or a router
        annotation (others are left as they are, or get a performative field changed)."""
        if len(piece) < 8 or piece[:4] == b"AMQP" or piece[5] != 0:
            return piece
        try:
            performative, stop = decode_at(piece, piece[4] * 4, len(piece))
            if not isinstance(performative, Transfer) or performative.more:
                return self.refield(piece) if self.refield is not None else piece
            message = decode_message(bytes(piece[stop:]))
        except Exception:  # noqa: BLE001 - not a whole message: leave the frame
            return piece
        rng = self.rng
        body = message.body_value if message.body is None or type(message.body).__name__ == "AmqpValue" else None
        try:
            if isinstance(body, dict) and "op" in body:
                payload = encode_message(self.control_body(body, message))
            elif rng.random() < 0.05:  # a message-annotations section that is no map
                section = encode(Described(ULong(0x72), rng.choice([[1], "x", 7, None])))
                rest = dataclasses.replace(message, header=None, message_annotations=None)
                head = encode_message(Message(header=message.header)) if message.header is not None else b""
                payload = head + section + encode_message(rest)
            else:
                annotations = dict(message.message_annotations or {})
                for _ in range(rng.randint(1, 3)):
                    key = rng.choice(list(ANNOTATIONS))
                    annotations[Symbol(key)] = ANNOTATIONS[key](rng)
                payload = encode_message(dataclasses.replace(message, message_annotations=annotations))
        except Exception:  # noqa: BLE001 - a value the encoder refuses there
            return piece
        return raw_frame(struct.unpack_from(">H", piece, 6)[0], piece[piece[4] * 4 : stop] + payload)
