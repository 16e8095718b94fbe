"""A well-behaved python-qpid-proton client for fuzzing runs (tests/test_fuzz_router.py): it
keeps sending on its own thread while hostile inputs hit the router, answers each message with
the outcome its number names (accepted, rejected, released, modified in turn) and records the
outcome its sender learns, so a test can check that nobody's traffic was disturbed.
"""

from __future__ import annotations

import threading
from typing import Any

from .fuzzing import OUTCOMES
from .interop import run_container


class GoodClient:
    """Sends `fuzz-good` messages on one connection while the fuzzing runs, keeping a few in
    flight; its receiver answers message n with OUTCOMES[n % 4]; `learned` maps n to the
    outcome the sender saw. stop() lets it finish what is in flight and close."""

    def __init__(self, port: int, in_flight: int = 4) -> None:
        self.port = port
        self.in_flight = in_flight
        self.sent = 0
        self.learned: dict[int, str] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="interop-proton-goodclient", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 20.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the well-behaved client did not finish"

    def _run(self) -> None:
        from proton import Delivery, Message
        from proton.handlers import MessagingHandler
        from proton.reactor import Container

        client = self

        class Handler(MessagingHandler):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__(auto_accept=False, auto_settle=True)
                self.conn: Any = None
                self.sender: Any = None
                self.closing = False

            def on_start(self, event: Any) -> None:
                self.conn = event.container.connect(f"amqp://127.0.0.1:{client.port}", reconnect=False)
                event.container.create_receiver(self.conn, "fuzz-good")
                self.sender = event.container.create_sender(self.conn, "fuzz-good")
                event.container.schedule(0.05, self)

            def on_timer_task(self, event: Any) -> None:
                self._send()
                self._maybe_close()
                if not self.closing:
                    event.container.schedule(0.05, self)

            def on_sendable(self, event: Any) -> None:
                self._send()

            def _send(self) -> None:
                sender = self.sender
                while (
                    sender is not None and sender.credit and not client._stop.is_set()
                    and client.sent - len(client.learned) < client.in_flight
                ):  # fmt: skip
                    delivery = sender.send(Message(body=client.sent))
                    delivery.number = client.sent
                    client.sent += 1

            def _maybe_close(self) -> None:
                if client._stop.is_set() and len(client.learned) == client.sent and not self.closing:
                    self.closing = True
                    self.conn.close()

            def on_message(self, event: Any) -> None:
                n = event.message.body
                outcome = OUTCOMES[n % 4]
                if outcome == "accept":
                    self.accept(event.delivery)
                elif outcome == "reject":
                    self.reject(event.delivery)
                else:
                    self.release(event.delivery, delivered=outcome == "modify")

            def _learn(self, event: Any, name: str) -> None:
                number = getattr(event.delivery, "number", None)
                if number is not None:
                    client.learned[number] = name
                self._send()
                self._maybe_close()

            def on_accepted(self, event: Any) -> None:
                self._learn(event, "accept")

            def on_rejected(self, event: Any) -> None:
                self._learn(event, "reject")

            def on_released(self, event: Any) -> None:  # released and modified both come here
                modified = event.delivery.remote_state == Delivery.MODIFIED
                self._learn(event, "modify" if modified else "release")

            def on_transport_error(self, event: Any) -> None:
                client.errors.append(f"transport {event.transport.condition}")

            def on_connection_error(self, event: Any) -> None:
                client.errors.append(f"connection {event.connection.remote_condition}")

            def on_link_error(self, event: Any) -> None:
                client.errors.append(f"link {event.link.remote_condition}")

        deadline_s = 600.0
        try:
            run_container(Container(Handler()), timeout_s=deadline_s, stop=None)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(repr(exc))
