"""Inputs for fuzzing a router, shared by tests/test_fuzz_router.py and bench/fuzz.py.

- `capture_proton_session(port)`: the bytes a python-qpid-proton client sends to a router in one
  ordinary session (SASL, open, begin, a sender and a receiver, messages, every outcome, detach,
  end, close), recorded by a small socket proxy in front of the router.
- (`split_stream` and `raw_frame`, shared with bench/fuzz.py, are in router.testing.wire.)
- `hostile_inputs(captured)`: a hypothesis strategy of byte strings: the capture mutated (bytes
  flipped, inserted, cut; frames dropped, repeated, swapped, their sizes lied about, a field of
  one replaced with a value of any type) and sequences of generated frames, valid or not.
- `throw(port, data, ...)`: one input on a connection of its own; `rss_bytes(pid)`.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Any

from hypothesis import strategies as st

from router.amqp.decode import decode_at
from router.amqp.encode import encode
from router.amqp.framing import AMQP_HEADER, SASL_HEADER
from router.amqp.performatives import AMQP_PERFORMATIVES, SASL_PERFORMATIVES, Begin, Open
from router.amqp.types import Described, ULong
from router.testing.wire import raw_frame, split_stream

from .interop import run_container

OUTCOMES = ("accept", "reject", "release", "modify")


# --- capturing a real client ------------------------------------------------------------------------


def _pump_proxy(listener: socket.socket, router_port: int, sent: bytearray, done: threading.Event) -> None:
    client, _ = listener.accept()
    upstream = socket.create_connection(("127.0.0.1", router_port))
    try:
        ends = {client: upstream, upstream: client}
        while ends and not done.is_set():
            readable, _, _ = select.select(list(ends), [], [], 0.05)
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is client:
                    sent += data
                ends[sock].sendall(data)
    finally:
        client.close()
        upstream.close()


def capture_proton_session(router_port: int, messages: int = 8, timeout_s: float = 20.0) -> bytes:
    """What a Proton client sends to the router at `router_port` in one ordinary session."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    proxy_port = listener.getsockname()[1]
    sent = bytearray()
    done = threading.Event()
    proxy = threading.Thread(target=_pump_proxy, args=(listener, router_port, sent, done), daemon=True)
    proxy.start()

    class Session(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(auto_accept=False)
            self.sent = self.settled = self.received = 0

        def on_start(self, event: Any) -> None:
            conn = event.container.connect(f"amqp://127.0.0.1:{proxy_port}", reconnect=False)
            event.container.create_receiver(conn, "fuzz-capture")
            event.container.create_sender(conn, "fuzz-capture")

        def on_sendable(self, event: Any) -> None:
            from proton import Message

            while event.sender.credit and self.sent < messages:
                event.sender.send(Message(body=f"m{self.sent}", properties={"n": self.sent}))
                self.sent += 1

        def on_message(self, event: Any) -> None:
            outcome = OUTCOMES[self.received % 4]
            self.received += 1
            delivery = event.delivery
            if outcome == "accept":
                self.accept(delivery)
            elif outcome == "reject":
                self.reject(delivery)
            else:
                self.release(delivery, delivered=outcome == "modify")

        def on_settled(self, event: Any) -> None:
            self.settled += 1
            if self.settled == messages:
                event.connection.close()

    try:
        run_container(Container(Session()), timeout_s=timeout_s)
    finally:
        done.set()
        proxy.join(timeout=2.0)
        listener.close()
    return bytes(sent)


# --- structure of a captured stream -----------------------------------------------------------------


def _replace_field(piece: bytes, index: int, value: Any) -> bytes:
    """The frame `piece` with field `index` of its performative replaced by `value`."""
    if len(piece) < 8 or piece[:4] == b"AMQP":
        return piece
    doff, frame_type = piece[4], piece[5]
    body = doff * 4
    if body >= len(piece):
        return piece
    try:
        performative, stop = decode_at(piece, body, len(piece))
    except Exception:  # noqa: BLE001 - not a frame we can rebuild: leave it as it is
        return piece
    code = getattr(performative, "DESCRIPTOR_CODE", None)
    if code is None:
        return piece
    fields = [getattr(performative, f) for f in performative.__dataclass_fields__]
    if not fields:
        return piece
    fields[index % len(fields)] = value
    try:
        encoded = encode(Described(ULong(code), fields))
    except Exception:  # noqa: BLE001 - a value our encoder refuses here: use it raw elsewhere
        return piece
    rest = piece[stop:]
    return raw_frame(struct.unpack_from(">H", piece, 6)[0], encoded + rest, frame_type)


# --- strategies --------------------------------------------------------------------------------------


def _any_values() -> st.SearchStrategy[Any]:
    from tests.strategies import values

    return values | st.none()


def _mutate(pieces: list[bytes], data: st.DataObject) -> bytes:
    pieces = list(pieces)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if not pieces:
            break
        i = data.draw(st.integers(0, len(pieces) - 1), label="piece")
        op = data.draw(
            st.sampled_from(["flip", "insert", "cut", "drop", "repeat", "swap", "size", "field", "split"]),
            label="op",
        )
        piece = pieces[i]
        if op == "flip" and piece:
            at = data.draw(st.integers(0, len(piece) - 1), label="at")
            pieces[i] = piece[:at] + bytes([piece[at] ^ data.draw(st.integers(1, 255), label="xor")]) + piece[at + 1 :]
        elif op == "insert":
            at = data.draw(st.integers(0, len(piece)), label="at")
            pieces[i] = piece[:at] + data.draw(st.binary(min_size=1, max_size=16), label="bytes") + piece[at:]
        elif op == "cut":
            pieces[i] = piece[: data.draw(st.integers(0, len(piece)), label="at")]
            del pieces[i + 1 :]
        elif op == "drop":
            del pieces[i]
        elif op == "repeat":
            pieces[i:i] = [piece] * data.draw(st.integers(1, 3), label="times")
        elif op == "swap":
            j = data.draw(st.integers(0, len(pieces) - 1), label="other")
            pieces[i], pieces[j] = pieces[j], pieces[i]
        elif op == "size" and len(piece) >= 8 and piece[:4] != b"AMQP":
            size = data.draw(st.sampled_from([0, 7, 8, len(piece) - 1, len(piece) + 1, 511, 0xFFFFFFFF]) | st.integers(0, 0xFFFFFFFF), label="size")
            pieces[i] = struct.pack(">I", size) + piece[4:]
        elif op == "field":
            index = data.draw(st.integers(0, 13), label="field")
            pieces[i] = _replace_field(piece, index, data.draw(_any_values(), label="value"))
        elif op == "split" and len(piece) > 1:  # the same bytes, in a different chunking later
            at = data.draw(st.integers(1, len(piece) - 1), label="at")
            pieces[i : i + 1] = [piece[:at], piece[at:]]
    return b"".join(pieces)


def _generated(data: st.DataObject) -> bytes:
    """Header, an open (usually valid), maybe a begin, then frames of any performative with
    fields of any type (or well-typed ones), on a few channels."""
    from tests.test_performatives import composites

    out = bytearray(AMQP_HEADER)
    if data.draw(st.booleans(), label="valid open"):
        max_frame = data.draw(st.sampled_from([512, 4096, 65536]), label="max-frame")
        out += raw_frame(0, encode(Open(container_id="fuzz", max_frame_size=max_frame)))
    if data.draw(st.booleans(), label="begin"):
        out += raw_frame(0, encode(Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=1000)))
    for _ in range(data.draw(st.integers(1, 5), label="frames")):
        cls = data.draw(st.sampled_from(AMQP_PERFORMATIVES + SASL_PERFORMATIVES), label="performative")
        if data.draw(st.booleans(), label="typed"):
            body = encode(data.draw(composites(cls), label="value"))
        else:
            count = data.draw(st.integers(0, 14), label="count")
            fields = [data.draw(_any_values(), label="field") for _ in range(count)]
            body = encode(Described(ULong(cls.DESCRIPTOR_CODE), fields))  # type: ignore[attr-defined]
        channel = data.draw(st.integers(0, 2), label="channel")
        payload = data.draw(st.binary(max_size=32), label="payload")
        out += raw_frame(channel, body + payload, data.draw(st.sampled_from([0, 0, 0, 1]), label="type"))
    return bytes(out)


def hostile_inputs(captured: bytes) -> st.SearchStrategy[bytes]:
    pieces = split_stream(captured)

    @st.composite
    def inputs(draw: Any) -> bytes:
        data = draw(st.data())
        kind = draw(st.sampled_from(["mutated", "mutated", "generated", "random"]))
        if kind == "mutated":
            return _mutate(pieces, data)
        if kind == "generated":
            return _generated(data)
        header = draw(st.sampled_from([AMQP_HEADER, SASL_HEADER, b"AMQP\x01\x01\x00\x00", b""]))
        return header + draw(st.binary(max_size=256))

    return inputs()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def throw(port: int, data: bytes, *, half_close: bool, chunks: int = 1, read_s: float = 0.2) -> bytes:
    """Send `data` on a new connection (in `chunks` writes), optionally half-close, read what the
    router answers until it closes or `read_s` passes, then close; the router's bytes."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        step = max(1, len(data) // max(1, chunks))
        try:
            for start in range(0, len(data), step):
                sock.sendall(data[start : start + step])
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            return bytes(received)  # the router closed first (a refused header): fine
        deadline = time.monotonic() + read_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                break
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    return bytes(received)
