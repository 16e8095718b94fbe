"""router.net.websocket without sockets: the upgrade's checks and answers, AMQP bytes through
WebSocket framing however they are cut into frames and messages and however the wire bytes are
cut into reads (hypothesis), control frames, and hostile input that only ever ends in a close
frame or a refusal, never an exception."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, Request, TextMessage

from router.net.websocket import (
    FRAME_MARGIN_BYTES,
    Accepted,
    Refused,
    WebSocketFraming,
    WebSocketUpgrade,
    accept_token,
    max_frame_bytes,
)

KEY = base64.b64encode(b"0123456789abcdef")


def request(*, path: str = "/", protocols: str | None = "amqp", extra: bytes = b"", method: bytes = b"GET") -> bytes:
    lines = [method + b" " + path.encode() + b" HTTP/1.1", b"Host: router", b"Upgrade: websocket",
             b"Connection: keep-alive, Upgrade", b"Sec-WebSocket-Key: " + KEY, b"Sec-WebSocket-Version: 13"]  # fmt: skip
    if protocols is not None:
        lines.append(b"Sec-WebSocket-Protocol: " + protocols.encode())
    return b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n"


def decide(data: bytes, **options: object) -> Accepted | Refused | None:
    upgrade = WebSocketUpgrade(path=options.get("path"), max_request_bytes=int(options.get("limit", 8192)))  # type: ignore[arg-type]
    return upgrade.receive(data)


def test_the_rfc_6455_example_accept_token() -> None:
    assert accept_token(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 1.3


def test_an_upgrade_offering_amqp_is_accepted_and_a_real_client_takes_the_answer() -> None:
    client = WSConnection(ConnectionType.CLIENT)
    wire = client.send(Request(host="router", target="/amqp", subprotocols=["binary", "amqp"]))
    decision = decide(wire)
    assert isinstance(decision, Accepted) and decision.path == "/amqp" and decision.trailing == b""
    client.receive_data(decision.response)
    (event,) = list(client.events())
    assert isinstance(event, AcceptConnection) and event.subprotocol == "amqp"
    assert b"Sec-WebSocket-Extensions" not in decision.response  # no extension claimed


def test_the_request_may_come_a_byte_at_a_time_with_frames_behind_it() -> None:
    upgrade = WebSocketUpgrade(path=None, max_request_bytes=8192)
    head = request()
    decisions = [upgrade.receive(head[i : i + 1]) for i in range(len(head))]
    assert decisions[:-1] == [None] * (len(head) - 1) and isinstance(decisions[-1], Accepted)
    # Frames that came in the same read as the request's end are the WebSocket's first bytes.
    frame = Connection(ConnectionType.CLIENT).send(BytesMessage(data=b"AMQP\x00\x01\x00\x00"))
    upgrade = WebSocketUpgrade(path=None, max_request_bytes=8192)
    assert upgrade.receive(head[:-3]) is None
    decision = upgrade.receive(head[-3:] + frame)
    assert isinstance(decision, Accepted) and decision.trailing == frame
    framing = WebSocketFraming(1000, decision.trailing)
    assert framing.receive(b"") == (b"AMQP\x00\x01\x00\x00", b"", False)


@pytest.mark.parametrize(
    ("wire", "status", "words"),
    [
        (request(protocols=None), 400, b"amqp"),
        (request(protocols="mqtt, binary"), 400, b"amqp"),
        (request(protocols="AMQP"), 400, b"amqp"),  # subprotocol names are case-sensitive (RFC 6455 4.1)
        (request(method=b"POST"), 405, b"GET"),
        (request().replace(b"HTTP/1.1", b"HTTP/1.0"), 400, b"HTTP/1.1"),
        (request().replace(b"Upgrade: websocket\r\n", b""), 426, b"WebSocket upgrade"),
        (request().replace(b"Version: 13", b"Version: 8"), 426, b"13"),
        (request().replace(KEY, b"short"), 400, b"Sec-WebSocket-Key"),
        (request(extra=b"Content-Length: 3\r\n"), 400, b"body"),
        (b"AMQP\x00\x01\x00\x00", 400, b"not an HTTP request"),
        (b"\x16\x03\x01\x02\x00\x01", 400, b"not an HTTP request"),  # a TLS ClientHello on a plain port
        (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400, b"not an HTTP request"),
    ],
)
def test_refusals_name_the_reason(wire: bytes, status: int, words: bytes) -> None:
    decision = decide(wire)
    assert isinstance(decision, Refused)
    assert decision.response.startswith(b"HTTP/1.1 %d " % status)
    assert words in decision.response and b"Connection: close" in decision.response
    assert str(status) in decision.reason


def test_a_configured_path_is_the_only_one_served() -> None:
    assert isinstance(decide(request(path="/amqp?x=1"), path="/amqp"), Accepted)
    refused = decide(request(path="/other"), path="/amqp")
    assert isinstance(refused, Refused) and refused.response.startswith(b"HTTP/1.1 404 ")


@pytest.mark.parametrize("whole", [True, False], ids=["in one read", "in pieces"])
def test_an_oversized_request_head_is_refused_with_431(whole: bool) -> None:
    wire = request(extra=b"X-Filler: " + b"a" * 2000 + b"\r\n")
    upgrade = WebSocketUpgrade(path=None, max_request_bytes=1024)
    decision = None
    for start in range(0, len(wire), len(wire) if whole else 100):
        decision = upgrade.receive(wire[start : start + (len(wire) if whole else 100)])
        if decision is not None:
            break
    assert isinstance(decision, Refused) and decision.response.startswith(b"HTTP/1.1 431 ")


def test_a_peer_that_leaves_mid_request_is_refused_without_an_answer() -> None:
    upgrade = WebSocketUpgrade(path=None, max_request_bytes=8192)
    assert upgrade.receive(request()[:30]) is None
    decision = upgrade.receive(b"")
    assert isinstance(decision, Refused) and decision.response == b""


def client_wire(pieces: list[tuple[bytes, int]]) -> bytes:
    """The masked frames a client sends for each (message payload, fragments)."""
    client = Connection(ConnectionType.CLIENT)
    out = b""
    for payload, fragments in pieces:
        step = max(1, -(-len(payload) // fragments))
        parts = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
        for i, part in enumerate(parts):
            out += client.send(BytesMessage(data=part, message_finished=i == len(parts) - 1))
    return out


@settings(max_examples=200, deadline=None)
@given(
    stream=st.binary(min_size=0, max_size=3000),
    message_cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
    fragments=st.lists(st.integers(min_value=1, max_value=5), min_size=9, max_size=9),
    read_cuts=st.lists(st.integers(min_value=0, max_value=20000), max_size=12),
)
def test_amqp_bytes_come_through_however_they_are_cut(
    stream: bytes, message_cuts: list[int], fragments: list[int], read_cuts: list[int]
) -> None:
    """AMQP frames split over or joined in messages arbitrarily (the binding allows both), the
    messages fragmented, the wire cut into reads anywhere: the same bytes come out, in order."""
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in message_cuts)})
    messages = [stream[a:b] for a, b in zip(bounds, bounds[1:])]
    wire = client_wire(list(zip(messages, fragments)))
    framing = WebSocketFraming(max_frame_bytes(512))
    out = b""
    cuts = sorted({0, len(wire), *(c % (len(wire) + 1) for c in read_cuts)})
    for a, b in zip(cuts, cuts[1:]):
        amqp, reply, ended = framing.receive(wire[a:b])
        assert reply == b"" and not ended
        out += amqp
    assert out == stream


def server_events(reply: bytes) -> list[object]:
    client = WSConnection(ConnectionType.CLIENT)
    client.connection = Connection(ConnectionType.CLIENT)  # past the handshake
    client.receive_data(reply)
    return list(client.events())


def test_ping_is_answered_with_its_payload_and_pong_ignored() -> None:
    client = Connection(ConnectionType.CLIENT)
    framing = WebSocketFraming(1000)
    amqp, reply, ended = framing.receive(client.send(Ping(payload=b"p1")) + client.send(Pong(payload=b"x")))
    assert (amqp, ended) == (b"", False)
    assert [type(e) for e in server_events(reply)] == [Pong]


def test_the_peers_close_is_answered_with_its_code() -> None:
    client = Connection(ConnectionType.CLIENT)
    framing = WebSocketFraming(1000)
    amqp, reply, ended = framing.receive(client.send(BytesMessage(data=b"tail")) + client.send(CloseConnection(code=1001)))
    assert amqp == b"tail" and ended and framing.peer_closed
    (event,) = server_events(reply)
    assert isinstance(event, CloseConnection) and event.code == 1001
    assert framing.wrap(b"more") == b"" and framing.close() == b""  # nothing after the close


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (Connection(ConnectionType.CLIENT).send(TextMessage(data="hello")), 1003),
        (Connection(ConnectionType.SERVER).send(BytesMessage(data=b"unmasked")), 1002),  # RFC 6455 5.1
        (b"\x83\x80\x00\x00\x00\x00", 1002),  # a reserved opcode
        (b"\x89\xfe\x00\x80" + b"\x00" * 132, 1002),  # a control frame longer than 125 bytes
        (b"\xc2\x80\x00\x00\x00\x00", 1002),  # RSV1 without an extension
        (b"\x80\x80\x00\x00\x00\x00", 1002),  # a continuation with no message started
    ],
    ids=["text", "unmasked", "reserved opcode", "long control frame", "rsv1", "stray continuation"],
)
def test_hostile_frames_end_in_a_close_frame_with_the_right_code(wire: bytes, code: int) -> None:
    framing = WebSocketFraming(1000)
    amqp, reply, ended = framing.receive(wire)
    assert ended and amqp == b"" and framing.close_code == code
    (event,) = server_events(reply)
    assert isinstance(event, CloseConnection) and event.code == code
    assert framing.receive(b"more") == (b"", b"", True)  # nothing is taken after that


def test_a_frame_over_the_bound_is_closed_with_1009_before_its_end() -> None:
    bound = max_frame_bytes(512)
    assert bound == 512 + FRAME_MARGIN_BYTES
    framing = WebSocketFraming(bound)
    # A frame that announces 2^40 bytes: the router takes up to the bound, then closes.
    head = b"\x82\xff" + (1 << 40).to_bytes(8, "big") + b"\x00\x00\x00\x00"
    amqp, reply, ended = framing.receive(head + b"\x00" * bound)
    assert len(amqp) == bound and not ended
    amqp, reply, ended = framing.receive(b"\x00")
    assert ended and framing.close_code == 1009
    (event,) = server_events(reply)
    assert isinstance(event, CloseConnection) and event.code == 1009
    # The bound is per frame: many frames of a long message are fine.
    framing = WebSocketFraming(100)
    out = b""
    for _ in range(3):
        out += framing.receive(client_wire([(b"x" * 300, 3)]))[0]
    assert out == b"x" * 900 and not framing.ended


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=600), st.binary(max_size=600))
def test_any_bytes_end_in_a_decision_or_a_close_never_an_exception(head: bytes, frames: bytes) -> None:
    decision = decide(head, limit=512)
    assert decision is None or isinstance(decision, (Accepted, Refused))
    if isinstance(decision, Refused):
        assert decision.response.startswith(b"HTTP/1.1 4")
    framing = WebSocketFraming(200)
    amqp, reply, ended = framing.receive(frames)
    assert len(amqp) <= len(frames)
    if ended:
        assert framing.close_code is not None


def test_what_the_router_sends_comes_in_binary_messages_of_bounded_size() -> None:
    from router.net.websocket import OUT_MESSAGE_BYTES

    framing = WebSocketFraming(1000)
    payload = bytes(range(256)) * 1000  # 256 000 bytes
    events = server_events(framing.wrap(b"small") + framing.wrap(payload))
    assert all(isinstance(e, BytesMessage) and e.message_finished for e in events)
    sizes = [len(e.data) for e in events]  # type: ignore[attr-defined]
    assert sizes[0] == 5 and max(sizes) <= OUT_MESSAGE_BYTES and len(sizes) == 1 + -(-len(payload) // OUT_MESSAGE_BYTES)
    assert b"".join(e.data for e in events[1:]) == payload  # type: ignore[attr-defined]


def test_a_browsers_origin_must_be_allowed_when_origins_are_configured() -> None:
    def with_origin(origin: str | None, origins: tuple[str, ...]) -> Accepted | Refused | None:
        extra = b"" if origin is None else b"Origin: " + origin.encode() + b"\r\n"
        return WebSocketUpgrade(path=None, max_request_bytes=8192, origins=origins).receive(request(extra=extra))

    allowed = ("https://console.example.com",)
    assert isinstance(with_origin("https://Console.example.com", allowed), Accepted)  # origins compare case-insensitively
    assert isinstance(with_origin(None, allowed), Accepted)  # not a browser
    assert isinstance(with_origin("https://evil.example", ()), Accepted)  # no list: any
    refused = with_origin("https://evil.example", allowed)
    assert isinstance(refused, Refused) and refused.response.startswith(b"HTTP/1.1 403 ") and b"evil.example" in refused.response


HEADER_NAMES = ["Host", "Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol",
                "Origin", "Content-Length", "Transfer-Encoding", "Sec-WebSocket-Extensions"]  # fmt: skip
HEADER_VALUES = ["websocket", "Upgrade", "keep-alive, upgrade", "13", "8", "amqp", "AMQP", "binary, amqp", "", "0", "5",
                 "chunked", KEY.decode(), "c2hvcnQ=", "permessage-deflate", "https://a.example", "x" * 300]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from([b"GET", b"POST", b"OPTIONS"]),
    target=st.sampled_from([b"/", b"/amqp", b"/amqp?x", b"*", b"http://h/amqp"]),
    version=st.sampled_from([b"1.1", b"1.0"]),
    headers=st.lists(st.tuples(st.sampled_from(HEADER_NAMES), st.sampled_from(HEADER_VALUES)), max_size=12),
    path=st.sampled_from([None, "/amqp"]),
    origins=st.sampled_from([(), ("https://a.example",)]),
)
def test_near_valid_requests_are_decided_never_raised(
    method: bytes, target: bytes, version: bytes, headers: list[tuple[str, str]], path: str | None, origins: tuple[str, ...]
) -> None:
    head = method + b" " + target + b" HTTP/" + version + b"\r\n"
    head += b"".join(f"{name}: {value}\r\n".encode() for name, value in headers) + b"\r\n"
    decision = WebSocketUpgrade(path=path, max_request_bytes=8192, origins=origins).receive(head)
    assert isinstance(decision, (Accepted, Refused)) or decision is None  # None: a body announced, not come
    if isinstance(decision, Accepted):
        named = {name.lower() for name, _ in headers}
        assert {"upgrade", "connection", "sec-websocket-key", "sec-websocket-protocol"} <= named
        assert method == b"GET" and version == b"1.1"
        assert b"Sec-WebSocket-Protocol: amqp" in decision.response
    elif isinstance(decision, Refused):
        assert decision.response.startswith(b"HTTP/1.1 4") and b"Connection: close" in decision.response
