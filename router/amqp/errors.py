"""AMQP error conditions and the exceptions that carry them.

Owns: the condition symbols of transport §2.8.15-§2.8.18 and messaging, and the split between
*local* errors (our application misused the engine: it raises at once) and *remote* errors (the
peer broke the protocol: the engine answers on the wire with the condition and reports an event).
Must not touch: I/O, clocks, the codec.
"""

from __future__ import annotations

from typing import Final

# amqp-error, transport §2.8.15
INTERNAL_ERROR: Final = "amqp:internal-error"
NOT_FOUND: Final = "amqp:not-found"
UNAUTHORIZED_ACCESS: Final = "amqp:unauthorized-access"
DECODE_ERROR: Final = "amqp:decode-error"
RESOURCE_LIMIT_EXCEEDED: Final = "amqp:resource-limit-exceeded"
NOT_ALLOWED: Final = "amqp:not-allowed"
INVALID_FIELD: Final = "amqp:invalid-field"
NOT_IMPLEMENTED: Final = "amqp:not-implemented"
RESOURCE_LOCKED: Final = "amqp:resource-locked"
PRECONDITION_FAILED: Final = "amqp:precondition-failed"
RESOURCE_DELETED: Final = "amqp:resource-deleted"
ILLEGAL_STATE: Final = "amqp:illegal-state"
FRAME_SIZE_TOO_SMALL: Final = "amqp:frame-size-too-small"
# connection-error, transport §2.8.16
CONNECTION_FORCED: Final = "amqp:connection:forced"
FRAMING_ERROR: Final = "amqp:connection:framing-error"
CONNECTION_REDIRECT: Final = "amqp:connection:redirect"
# session-error, transport §2.8.17
WINDOW_VIOLATION: Final = "amqp:session:window-violation"
ERRANT_LINK: Final = "amqp:session:errant-link"
HANDLE_IN_USE: Final = "amqp:session:handle-in-use"
UNATTACHED_HANDLE: Final = "amqp:session:unattached-handle"
# link-error, transport §2.8.18
DETACH_FORCED: Final = "amqp:link:detach-forced"
TRANSFER_LIMIT_EXCEEDED: Final = "amqp:link:transfer-limit-exceeded"
MESSAGE_SIZE_EXCEEDED: Final = "amqp:link:message-size-exceeded"
LINK_REDIRECT: Final = "amqp:link:redirect"
STOLEN: Final = "amqp:link:stolen"


class AmqpError(Exception):
    """Base of every error this package raises; carries an AMQP condition symbol."""

    condition: str = INTERNAL_ERROR

    def __init__(self, description: str, condition: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        if condition is not None:
            self.condition = condition

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.condition}: {self.description})"


class DecodeError(AmqpError):
    """Bytes that are not valid AMQP: truncated, inconsistent lengths, bad constructors."""

    condition = DECODE_ERROR


class EncodeError(AmqpError, ValueError):
    """A value that cannot be encoded as the AMQP type asked for (local misuse)."""

    condition = INVALID_FIELD


class ProtocolError(AmqpError):
    """The peer violated the protocol. `scope` says what must end: connection, session or link."""

    def __init__(
        self, description: str, condition: str, scope: str = "connection"
    ) -> None:
        super().__init__(description, condition)
        self.scope = scope


class LocalUsageError(AmqpError, RuntimeError):
    """The application asked the engine for something the protocol state does not allow."""

    condition = ILLEGAL_STATE


class FrameTooLarge(LocalUsageError):
    """A frame we were asked to write would exceed the peer's max-frame-size (transport §2.7.1):
    nothing was written. An answer that echoes the peer's data (an attach's termini, say) is
    refused instead of sent (Link.answer)."""

    condition = FRAME_SIZE_TOO_SMALL
