"""AMQP over WebSocket through the whole server, over sockets: messages and outcomes through a
WebSocket listener (plain and wss) with AMQP frames cut and joined arbitrarily across messages,
upgrade refusals that say why, and hostile peers (a stalled or oversized upgrade, oversized,
text or unmasked frames) closed with the right code while another client is served; ping/pong
and the close handshake."""

from __future__ import annotations

import ssl
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from wsproto.events import BytesMessage, CloseConnection, Ping

from router.amqp.framing import AMQP_HEADER
from router.amqp.message import Message
from router.net.client import connect
from router.net.management_client import management_session

from .rawamqp import HEADER, OPEN, frame, read_until_closed
from .tlssupport import Pki, make_pki, serving
from .wsclient import TIMEOUT_S, WsClient, WsRejected, ws_bridge

HANDSHAKE_TIMEOUT_S = 0.5
MAX_FRAME = 4096


def ws_config(pki: Pki | None = None, **listener: Any) -> dict[str, Any]:
    ws: dict[str, Any] = {"name": "ws", "port": 0, "websocket": True, "handshake_timeout_s": HANDSHAKE_TIMEOUT_S,
                          "max_frame_size": MAX_FRAME, **listener}  # fmt: skip
    config: dict[str, Any] = {"router": {"id": "ws"}, "listeners": [{"name": "plain", "port": 0}, ws]}
    if pki is not None:
        config["ssl_profiles"] = [{"name": "server", "cert_file": pki.cert_file, "key_file": pki.key_file}]
        ws["ssl_profile"] = "server"
    return config


def client_context(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=pki.ca_file)


async def round_trip(port: int, body: str = "over websocket") -> None:
    with trio.fail_after(TIMEOUT_S):
        async with connect("127.0.0.1", port) as client:
            receiver = await client.open_receiver("ws-q", credit=1)
            sender = await client.open_sender("ws-q")
            tracker = await sender.start_send(Message.value(body))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            assert type(await tracker.wait()).__name__ == "Accepted"
            assert delivery.message.body.value == body


def listener_entity(server: Any, name: str = "ws") -> dict[str, Any]:
    (entity,) = [e for e in server.agent.entities("listener") if e["name"] == name]
    return entity


def cut_bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize("cut", [None, cut_bytewise, lambda d: [d[: len(d) // 3], d[len(d) // 3 :]]],
                         ids=["one message per write", "a message per byte", "split in two"])  # fmt: skip
async def test_messages_and_outcomes_through_a_websocket_listener(cut: Any) -> None:
    async with serving(ws_config()) as server:
        async with ws_bridge(server.listener_ports()["ws"], cut=cut) as local:
            await round_trip(local, body="x" * 10000)  # a message over several AMQP frames
        assert listener_entity(server)["websocket"] is True
        await round_trip(server.listener_ports()["plain"])  # plain AMQP beside it


async def test_wss_carries_messages(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(ws_config(pki)) as server:
        async with ws_bridge(server.listener_ports()["ws"], ssl_context=client_context(pki)) as local:
            await round_trip(local)
            with trio.fail_after(TIMEOUT_S):
                async with connect("127.0.0.1", local):
                    (conn,) = [c for c in server.agent.entities("connection") if c.get("listener") == "ws"]
                    assert conn["isEncrypted"] is True


async def test_ws_and_wss_on_one_port_when_tls_is_not_required(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(ws_config(pki, require_ssl=False)) as server:
        port = server.listener_ports()["ws"]
        async with ws_bridge(port) as local:
            await round_trip(local)
        async with ws_bridge(port, ssl_context=client_context(pki)) as local:
            await round_trip(local)


async def test_a_wss_peer_stalled_after_tls_mid_upgrade_is_dropped_at_the_handshake_time_out(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(ws_config(pki)) as server:
        port = server.listener_ports()["ws"]
        started = trio.current_time()
        tls = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), client_context(pki), server_hostname="127.0.0.1")
        await tls.do_handshake()
        await tls.send_all(b"GET /amqp HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        async with ws_bridge(port, ssl_context=client_context(pki)) as local:
            await round_trip(local)  # served all the while
        with trio.fail_after(TIMEOUT_S), pytest.raises(trio.BrokenResourceError):
            while await tls.receive_some(100):
                pass
            raise trio.BrokenResourceError  # a clean end counts as dropped too
        assert trio.current_time() - started >= HANDSHAKE_TIMEOUT_S * 0.9
        assert listener_entity(server)["handshakeTimeouts"] == 1
        await trio.aclose_forcefully(tls)


async def test_amqp_right_behind_the_upgrade_request_is_served() -> None:
    """A client that does not wait for the 101 before its first frames (in the same write)."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.connection import Connection
    from wsproto.events import Request

    async with serving(ws_config()) as server:
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["ws"])
        ws = WSConnection(ConnectionType.CLIENT)
        upgrade = ws.send(Request(host="127.0.0.1", target="/", subprotocols=["amqp"]))
        await tcp.send_all(upgrade + Connection(ConnectionType.CLIENT).send(BytesMessage(data=HEADER + frame(OPEN))))
        received = b""
        with trio.fail_after(TIMEOUT_S):
            while len(received) < 8:
                data = await tcp.receive_some(65536)
                assert data, "closed by the router"
                ws.receive_data(data)
                received += b"".join(bytes(e.data) for e in ws.events() if isinstance(e, BytesMessage))
        assert received[:8] == AMQP_HEADER
        await tcp.aclose()


async def test_frames_joined_and_split_in_fragmented_messages() -> None:
    """The AMQP header and open in one message of several fragments; the close's bytes joined to them."""
    async with serving(ws_config()) as server:
        ws = await WsClient.open(server.listener_ports()["ws"])
        await ws.send_binary(HEADER + frame(OPEN)[:5], fragments=3)
        await ws.send_binary(frame(OPEN)[5:])
        assert await ws.receive_binary(8) == AMQP_HEADER
        size = struct.unpack(">I", await ws.receive_binary(4))[0]
        body = await ws.receive_binary(size - 4)
        assert body[4:7] == b"\x00\x53\x10"  # the router's open
        await ws.aclose()


@pytest.mark.parametrize(
    ("subprotocols", "path", "status"),
    [((), "/", 400), (("mqtt",), "/", 400), (("amqp",), "/other", 404)],
    ids=["no subprotocol", "another subprotocol", "wrong path"],
)
async def test_upgrade_refusals_say_why(subprotocols: tuple[str, ...], path: str, status: int) -> None:
    async with serving(ws_config(websocket_path="/amqp")) as server:
        port = server.listener_ports()["ws"]
        with pytest.raises(WsRejected) as refused:
            await WsClient.open(port, path=path, subprotocols=subprotocols)
        assert refused.value.status == status
        assert (b"amqp" if status == 400 else b"/amqp") in refused.value.body
        ws = await WsClient.open(port, path="/amqp")  # the configured path is served
        await ws.aclose()
        assert listener_entity(server)["websocketUpgradesRefused"] == 1


async def test_a_browser_from_another_origin_is_refused_when_origins_are_listed() -> None:
    async with serving(ws_config(websocket_origins=["https://console.example.com"])) as server:
        port = server.listener_ports()["ws"]
        with pytest.raises(WsRejected) as refused:
            await WsClient.open(port, headers=((b"Origin", b"https://evil.example"),))
        assert refused.value.status == 403
        ws = await WsClient.open(port, headers=((b"Origin", b"https://console.example.com"),))
        await ws.aclose()


async def test_plain_amqp_on_a_websocket_port_is_refused_with_an_http_answer() -> None:
    async with serving(ws_config()) as server:
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["ws"])
        await tcp.send_all(AMQP_HEADER)
        answer = await read_until_closed(tcp, timeout_s=TIMEOUT_S)
        assert answer.startswith(b"HTTP/1.1 400 ")
        await tcp.aclose()
        tcp = await trio.open_tcp_stream("127.0.0.1", server.listener_ports()["ws"])
        await tcp.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # HTTP, but no upgrade
        answer = await read_until_closed(tcp, timeout_s=TIMEOUT_S)
        assert answer.startswith(b"HTTP/1.1 426 ") and b"upgrade" in answer.lower()
        await tcp.aclose()


@pytest.mark.parametrize("opening", ["stalled request", "oversized request head"])
async def test_hostile_upgrades_cost_only_their_own_connection(opening: str) -> None:
    async with serving(ws_config(websocket_max_request_bytes=1024)) as server:
        port = server.listener_ports()["ws"]
        hostile = await trio.open_tcp_stream("127.0.0.1", port)
        if opening == "stalled request":
            await hostile.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        else:
            # Far more than the router reads before it refuses: the rest must not reset the answer.
            await hostile.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 60_000)
        started = trio.current_time()
        async with ws_bridge(port) as local:
            await round_trip(local)  # served all the while
        answer = await read_until_closed(hostile, timeout_s=TIMEOUT_S)
        if opening == "stalled request":
            assert trio.current_time() - started >= HANDSHAKE_TIMEOUT_S * 0.9
            assert listener_entity(server)["handshakeTimeouts"] == 1
        else:
            assert answer.startswith(b"HTTP/1.1 431 ")
        await hostile.aclose()


HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"
HEADER_AND_OPEN = bytes([0x82, 0x80 | (len(HEADER) + len(frame(OPEN)))]) + b"\x00" * 4 + HEADER + frame(OPEN)


def _masked_frame(opcode: int, payload_len_field: bytes, payload: bytes = b"", masked: bool = True) -> bytes:
    mask_bit = 0x80 if masked else 0
    head = bytes([0x80 | opcode]) + bytes([mask_bit | payload_len_field[0]]) + payload_len_field[1:]
    return head + (b"\x00\x00\x00\x00" if masked else b"") + payload  # a zero mask leaves the payload as is


@pytest.mark.parametrize(
    ("kind", "code"),
    [("oversized frame", 1009), ("text frame", 1003), ("unmasked frame", 1002), ("bad opcode", 1002)],
)
async def test_hostile_frames_are_closed_with_the_right_code(kind: str, code: int) -> None:
    async with serving(ws_config()) as server:
        port = server.listener_ports()["ws"]
        ws = await WsClient.open(port)
        wire = {
            # Announces 2^40 bytes of AMQP heartbeats (empty frames, transport 2.4.5, valid each);
            # the router stops at its bound (max-frame-size + margin) with 1009.
            "oversized frame": HEADER_AND_OPEN + _masked_frame(0x2, bytes([127]) + struct.pack(">Q", 1 << 40), HEARTBEAT * 25_000),
            "text frame": _masked_frame(0x1, bytes([5]), b"hello"),
            "unmasked frame": _masked_frame(0x2, bytes([8]), HEADER, masked=False),
            "bad opcode": _masked_frame(0x3, bytes([0])),
        }[kind]
        try:
            await ws.send_raw(wire)
        except trio.BrokenResourceError:
            pass  # the router closed first
        await ws.until_closed()
        assert ws.close_code == code, (ws.close_code, ws.close_reason)
        await ws.aclose()
        async with ws_bridge(port) as local:
            await round_trip(local)  # others are served


async def test_ping_is_answered_and_the_close_handshake_done() -> None:
    async with serving(ws_config()) as server:
        ws = await WsClient.open(server.listener_ports()["ws"])
        await ws.send_raw(ws.ws.send(Ping(payload=b"are you there")))
        with trio.fail_after(TIMEOUT_S):
            while not ws.pongs:
                assert await ws.pump()
        assert ws.pongs == [b"are you there"]
        await ws.send_raw(ws.ws.send(CloseConnection(code=1000, reason="bye")))
        await ws.until_closed()
        assert ws.close_code == 1000  # the router answered our close, then closed the socket
        await ws.aclose()
        with trio.fail_after(TIMEOUT_S):
            while [c for c in server.agent.entities("connection") if c.get("listener") == "ws"]:
                await trio.sleep(0.01)


async def test_the_router_ends_with_a_close_frame_after_amqp_close() -> None:
    """When the AMQP connection is over the router says goodbye at the WebSocket level too (1000)."""
    async with serving(ws_config()) as server:
        ws = await WsClient.open(server.listener_ports()["ws"])
        await ws.send_binary(HEADER + frame(OPEN) + frame(b"\x00\x53\x18\x45"))  # header, open, close
        await ws.until_closed()
        assert ws.close_code == 1000
        assert ws.received.startswith(AMQP_HEADER)
        await ws.aclose()


async def test_a_websocket_listener_created_and_updated_through_management() -> None:
    async with serving({"router": {"id": "mgmt-ws"}, "listeners": [{"name": "plain", "port": 0}]}) as server:
        with trio.fail_after(TIMEOUT_S):
            async with connect("127.0.0.1", server.listener_ports()["plain"]) as client, management_session(client) as mgmt:
                created = await mgmt.create("listener", {"name": "ws", "port": 0, "websocket": True, "websocketPath": "/amqp"})
                assert created["websocket"] is True and created["websocketPath"] == "/amqp"
                assert created["websocketMaxRequestBytes"] == 8192
                with pytest.raises(Exception, match="websocketPath|websocket_path|pattern"):
                    await mgmt.create("listener", {"name": "bad", "port": 0, "websocket": True, "websocketPath": "amqp"})
        port = server.listener_ports()["ws"]
        async with ws_bridge(port, path="/amqp") as local:
            await round_trip(local)
        with pytest.raises(WsRejected):
            await WsClient.open(port, path="/")
        async with connect("127.0.0.1", server.listener_ports()["plain"]) as client, management_session(client) as mgmt:
            with pytest.raises(Exception, match="need websocket: true"):  # a path that would not be honoured
                await mgmt.update("listener", {"websocket": False}, name="ws")
            await mgmt.update("listener", {"websocket": False, "websocketPath": None}, name="ws")  # back to AMQP over TCP
        await round_trip(server.listener_ports()["ws"])


@pytest.mark.parametrize("seed", range(6))
async def test_random_frames_after_the_upgrade_cost_only_their_connection(seed: int) -> None:
    """Garbage after a good upgrade: raw bytes, masked binary frames of random AMQP bytes, random
    opcodes and lengths. The router closes or keeps the connection; another client is served."""
    import random

    rng = random.Random(seed)
    async with serving(ws_config()) as server:
        port = server.listener_ports()["ws"]
        ws = await WsClient.open(port)
        for _ in range(20):
            kind = rng.choice(["raw", "binary", "header"])
            if kind == "raw":
                wire = rng.randbytes(rng.randrange(1, 300))
            elif kind == "binary":
                wire = ws.ws.send(BytesMessage(data=rng.randbytes(rng.randrange(0, 300))))
            else:
                wire = bytes([rng.randrange(256), 0x80 | rng.randrange(126)]) + rng.randbytes(4 + rng.randrange(0, 130))
            try:
                await ws.send_raw(wire)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
        await ws.aclose()
        async with ws_bridge(port) as local:
            await round_trip(local)
        with trio.fail_after(TIMEOUT_S):  # the hostile connection is gone, released
            while [c for c in server.agent.entities("connection") if c.get("listener") == "ws"]:
                await trio.sleep(0.01)


def test_configuration_errors_name_the_field() -> None:
    from pydantic import ValidationError

    from router.config.models import RouterConfig

    for listener, text in (
        ({"websocket": True, "role": "inter-router"}, "role normal"),
        ({"websocket_path": "/amqp"}, "need websocket: true"),
        ({"websocket": True, "websocket_path": "amqp"}, "websocket_path"),
        ({"websocket": True, "websocket_max_request_bytes": 10}, "websocket_max_request_bytes"),
    ):
        with pytest.raises(ValidationError, match=text):
            RouterConfig.model_validate({"router": {"mode": "interior"}, "listeners": [{"name": "a", **listener}]})


async def test_refused_upgrades_show_in_metrics() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from router.config.models import Listener

    from .support.management import managed_router, management_config

    config = management_config()
    config = config.model_copy(update={"listeners": (*config.listeners, Listener(name="ws", port=0, websocket=True))})
    async with managed_router(config) as router:
        with pytest.raises(WsRejected):
            await WsClient.open(router.server.listener_ports()["ws"], subprotocols=("mqtt",))
        metrics = (await router.http("GET", "/metrics")).body.decode()
        samples = {(s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
        assert samples[("amqp_router_listener_websocket_upgrades_refused_total", (("listener", "ws"),))] == 1
        assert samples[("amqp_router_listener_websocket_upgrades_refused_total", (("listener", "amqp"),))] == 0
