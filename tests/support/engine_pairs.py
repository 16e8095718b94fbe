"""What the tests/test_engine_pair_*.py files share: the client and server configurations of
the engine pairs (router.testing.enginepair) and small readers of what crossed the wire."""

from __future__ import annotations

from typing import Any

from router.amqp.connection import Connection, ConnectionConfig

from router.testing.enginepair import EnginePair, bodies

CLIENT = ConnectionConfig(container_id="client")
SERVER = ConnectionConfig(container_id="server", server=True)


def server_config(**kw: object) -> ConnectionConfig:
    return ConnectionConfig(container_id="server", server=True, **kw)  # type: ignore[arg-type]


def client_config(**kw: object) -> ConnectionConfig:
    return ConnectionConfig(container_id="client", **kw)  # type: ignore[arg-type]


def sent(pair: EnginePair, kind: type, *, to_server: bool = True) -> list[Any]:
    """Every performative of `kind` that crossed the wire in one direction so far."""
    wire = pair.wire_to_server if to_server else pair.wire_to_client
    return bodies(b"".join(wire), kind)


def server_answering(data: bytes, config: ConnectionConfig) -> Connection:
    engine = Connection(config)
    engine.receive_data(data, 0.0)
    return engine


