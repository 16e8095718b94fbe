"""Exceptions of the client API: each carries the peer's AMQP error, if it sent one."""

from __future__ import annotations

from ..amqp.performatives import Error


class ClientError(Exception):
    def __init__(self, error: Error | None, description: str) -> None:
        self.error = error
        self.condition: str | None = error.condition if error is not None else None
        detail = f" ({error.condition}: {error.description or ''})" if error is not None else ""
        super().__init__(description + detail)


class ConnectionClosed(ClientError):
    """The connection (or our session) ended: closed by the peer, lost, or failed."""


class LinkDetached(ClientError):
    """The peer refused or detached a link."""


class AuthenticationError(ClientError):
    """SASL authentication failed."""
