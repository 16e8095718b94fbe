"""The broker fixtures (tests/support/external_brokers.py): each broker starts as a private
node, speaks AMQP 1.0 to python-qpid-proton, and serves again on its port after a restart."""

from __future__ import annotations

import pytest
from proton import Message
from proton.utils import BlockingConnection

from .support.external_brokers import ActiveMQ, RabbitMQ, activemq, rabbitmq, rabbitmq_private  # noqa: F401

pytestmark = [pytest.mark.broker]


def _round_trip(port: int, address: str, body: str, durable: bool = False) -> None:
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=20)
    try:
        conn.create_sender(address).send(Message(body=body, durable=durable))
        receiver = conn.create_receiver(address)
        got = receiver.receive(timeout=20)
        receiver.accept()
        assert got.body == body
    finally:
        conn.close()


def test_rabbitmq_round_trip(rabbitmq: RabbitMQ) -> None:
    _round_trip(rabbitmq.port, "/queue/fixture-round-trip", "hello rabbit")
    print("rabbitmq start seconds", rabbitmq.start_seconds)


def test_rabbitmq_restart_serves_again_on_the_same_port(rabbitmq_private: RabbitMQ) -> None:
    port = rabbitmq_private.port
    _round_trip(port, "/queue/fixture-restart", "before")
    rabbitmq_private.restart()
    assert rabbitmq_private.port == port
    _round_trip(port, "/queue/fixture-restart", "after")
    print("rabbitmq start seconds", rabbitmq_private.start_seconds)


def test_activemq_round_trip(activemq: ActiveMQ) -> None:
    _round_trip(activemq.port, "fixture-round-trip", "hello activemq")
    print("activemq start seconds", activemq.start_seconds)
