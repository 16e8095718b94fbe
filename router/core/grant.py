"""What policy granted one client connection, and the rules that follow it past the open
(docs/security.md, "Policy").

    grant.check(payload, anonymous)      # a message's refusal, or None (forwarding.py)
    message_size_limit(grant, router_limit)   # a producer link's max-message-size (attach.py)
    session_window(grant, max_frame_size, default)   # a client session's incoming window (admission.py)

Owns: Grant (the vhost, group and user a connection was granted: on ConnState.policy, and on a
producer link whose messages need a look), the per-message rules through `Grant.check` (the
user-id must be the authenticated user's unless proxying is allowed; on an anonymous link the
message's `to` must be one of the group's targets), reading a message's properties section for
them, the message-size limit a group (or its vhost) sets, the session window a group caps, and the
counters per vhost (VhostStats: management's vhostStats) that the decisions count into. The
address rules themselves are policyaddr.py's.
Collaborators: none; policy.py grants, and the core asks a grant and acts on the answer.
Must not touch: the decisions at open, begin and attach (policy.py), engines, message routing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..amqp import errors as E
from ..amqp.decode import decode_at
from ..amqp.errors import DecodeError
from ..amqp.messaging import Properties
from ..amqp.performatives import Error
from ..amqp.sections import section_spans
from ..config.models import PolicyGroup, Vhost
from .policyaddr import targets_allow, targets_checked

_PROPERTIES = 0x73


def refusal(condition: str, description: str) -> Error:
    """A policy decision's refusal (the core sends it in a close, end, detach or rejection)."""
    return Error(condition=condition, description=description)


class VhostStats:
    """Counters of one vhost (management's vhostStats, /metrics)."""

    __slots__ = (
        "hostname", "approved", "denied", "current", "per_user", "per_host", "sessions_denied",
        "senders_denied", "receivers_denied", "message_size_denied", "messages_denied",
    )  # fmt: skip

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.approved = self.denied = self.current = 0
        self.per_user: Counter[str] = Counter()  # anonymous connections count under ""
        self.per_host: Counter[str] = Counter()
        self.sessions_denied = self.senders_denied = self.receivers_denied = 0
        self.message_size_denied = 0  # links detached for a message over the group's max_message_size
        self.messages_denied = 0  # messages rejected: user-id not the user's, target not allowed


def message_properties(payload: bytes) -> Properties | None:
    """The properties section of an encoded message (at least its first frame), None if it has
    none; DecodeError when malformed or cut before the end of the properties."""
    spans, _ = section_spans(payload, _PROPERTIES)
    for code, start, stop in spans:
        if code == _PROPERTIES:
            properties = decode_at(payload, start, stop)[0]
            return properties if isinstance(properties, Properties) else None
    return None


class Grant:
    """What policy granted one client connection: its vhost, group and user (on ConnState.policy)."""

    __slots__ = ("vhost", "group_name", "group", "user", "user_key", "host", "stats", "released", "targets_checked")

    def __init__(self, vhost: Vhost, group_name: str, group: PolicyGroup, user: str | None, host: str,
                 stats: VhostStats) -> None:  # fmt: skip
        self.vhost = vhost
        self.group_name = group_name
        self.group = group
        self.user = user
        self.user_key = user or ""
        self.host = host
        self.stats = stats
        self.released = False
        self.targets_checked = targets_checked(group)  # an anonymous sender's messages: their `to`

    def check(self, payload: bytes, anonymous: bool) -> Error | None:
        """The refusal of one message from this connection, or None: its user-id must be the
        authenticated user's (unless proxying is allowed), and on an anonymous link its `to`
        one of the group's targets."""
        group = self.group
        if group.allow_user_id_proxy and not (anonymous and self.targets_checked):
            return None
        try:
            properties = message_properties(payload)
        except DecodeError as exc:
            return refusal(E.DECODE_ERROR, f"malformed message: {exc.description}")
        except (ValueError, TypeError, OverflowError) as exc:  # a field of the wrong type
            return refusal(E.DECODE_ERROR, f"malformed message properties: {type(exc).__name__}")
        if properties is None:
            return None
        if not group.allow_user_id_proxy and properties.user_id is not None:
            user_id: Any = properties.user_id
            if not isinstance(user_id, (bytes, bytearray, memoryview)):  # (the decoder checks it too)
                self.stats.messages_denied += 1
                return refusal(E.DECODE_ERROR, "the message's user-id must be binary (messaging 3.2.4)")
            given = bytes(user_id)
            if self.user is None or given != self.user.encode("utf-8"):
                self.stats.messages_denied += 1
                who = f"user {self.user!r}" if self.user is not None else "an anonymous connection"
                return refusal(E.UNAUTHORIZED_ACCESS, f"the message's user-id {given[:64]!r} is not {who} "
                                                      f"(vhost {self.vhost.hostname!r} allows no user-id proxying)")  # fmt: skip
        if anonymous and self.targets_checked:
            to = properties.to
            if to is not None and not targets_allow(group, str(to), self.user):
                self.stats.messages_denied += 1
                return refusal(E.UNAUTHORIZED_ACCESS, f"sending to {str(to)[:200]!r} is not allowed "
                                                      f"for group {self.group_name!r} of vhost {self.vhost.hostname!r}")  # fmt: skip
        return None


def message_size_limit(grant: Grant | None, router_limit: int | None) -> tuple[int | None, bool]:
    """The max-message-size a client's producer link is answered with, and whether a larger
    message detaches the link (the group's limit, else its vhost's) rather than being rejected
    (the router's)."""
    group_limit = None
    if grant is not None:
        group_limit = grant.group.max_message_size
        if group_limit is None:
            group_limit = grant.vhost.max_message_size
    if group_limit is None or (router_limit is not None and router_limit <= group_limit):
        return router_limit, False
    return group_limit, True


def session_window(grant: Grant, max_frame_size: int, default: int) -> int:
    """The incoming window (in frames) of a client's session: `default`, or at most the group's
    max_session_window in frames of `max_frame_size` (at least 1; transport 2.5.6)."""
    window = grant.group.max_session_window
    if window is None:
        return default
    return max(1, min(default, window // max_frame_size))
