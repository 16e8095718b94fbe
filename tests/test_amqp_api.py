"""router.amqp's public face: the names it exports are the ones the router's outer layers and
other projects use, and they drive a connection end to end."""

from __future__ import annotations

import router.amqp as amqp
from router.amqp import (ACCEPTED, Connection, ConnectionConfig, Message, Source, Target, decode_message, encode_message,
                         events)  # fmt: skip


def test_every_exported_name_exists_and_is_the_modules_own() -> None:
    assert sorted(amqp.__all__) == sorted(set(amqp.__all__))
    for name in amqp.__all__:
        assert getattr(amqp, name) is not None, name
    from router.amqp.connection import Connection as FromModule
    from router.amqp.messaging import DeliveryState

    assert amqp.Connection is FromModule
    assert amqp.DeliveryState is DeliveryState


def test_two_engines_through_the_public_names_only() -> None:
    client = Connection(ConnectionConfig(container_id="client"))
    server = Connection(ConnectionConfig(container_id="server", server=True))
    client.open()
    received: list[events.Event] = []

    def pump() -> None:
        for _ in range(20):
            out, back = client.data_to_send(), b""
            if out:
                server.receive_data(out, 0.0)
            for event in server.events():
                if isinstance(event, events.RemoteOpen):
                    server.open()
                elif isinstance(event, events.RemoteBegin):
                    event.session.begin()
                elif isinstance(event, events.RemoteAttach):
                    event.link.attach()
                    event.link.flow(10)
                elif isinstance(event, events.TransferReceived):
                    received.append(event)
                    event.link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
            back = server.data_to_send()
            if back:
                client.receive_data(back, 0.0)
            client.events()
            if not out and not back:
                return

    pump()
    session = client.begin_session()
    pump()
    link = session.attach_sender("s", source=Source(address=None), target=Target(address="q"))
    pump()
    link.send_transfer(b"1", encode_message(Message.value("public")), settled=False)
    pump()
    (transfer,) = [e for e in received if isinstance(e, events.TransferReceived)]
    assert decode_message(bytes(transfer.payload)).body_value == "public"
