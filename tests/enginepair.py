"""EnginePair: two sans-IO connection engines wired back to back, no I/O at all."""

from __future__ import annotations

from typing import Any

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import Event


class EnginePair:
    """`client` and `server` engines; `pump()` moves bytes both ways until both are quiet and
    returns the events each side produced (also accumulated in `client_events`/`server_events`)."""

    def __init__(self, client: ConnectionConfig | None = None, server: ConnectionConfig | None = None,
                 now: float = 0.0) -> None:
        self.client = Connection(client or ConnectionConfig(container_id="client"))
        self.server = Connection(server or ConnectionConfig(container_id="server", server=True))
        self.now = now
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []
        self.wire_to_server: list[bytes] = []
        self.wire_to_client: list[bytes] = []

    def pump(self, max_rounds: int = 1000) -> tuple[list[Event], list[Event]]:
        new_client: list[Event] = []
        new_server: list[Event] = []
        for _ in range(max_rounds):
            to_server = self.client.data_to_send()
            to_client = self.server.data_to_send()
            if to_server:
                self.wire_to_server.append(to_server)
                self.server.receive_data(to_server, self.now)
            if to_client:
                self.wire_to_client.append(to_client)
                self.client.receive_data(to_client, self.now)
            new_client += self.client.events()
            new_server += self.server.events()
            if not to_server and not to_client:
                break
        else:
            raise AssertionError("engines never went quiet")
        self.client_events += new_client
        self.server_events += new_server
        return new_client, new_server

    def open(self, **open_args: Any) -> None:
        """Open both sides (the server answers the client's open)."""
        self.client.open(**open_args)
        self.pump()
        self.server.open()
        self.pump()


def of_type(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]
