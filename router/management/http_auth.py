"""Who sends an HTTP management request: the listener it came through and HTTP basic credentials.

    auth = HttpAuthenticator(lambda: agent.config, clock, sleep)
    requester = auth.requester(listener, headers.get("authorization"))   # None: 401
    await auth.throttle(client_host, ok=requester is not None, tried=...)

A listener with `authenticate: basic` (HTTPS only: the configuration refuses it without an
ssl_profile) takes the user from the Authorization header (RFC 7617), checked against the users
(the users file and inline users, through the credential store, as SASL PLAIN checks them).
A listener without authentication has no user: its requests are anonymous, loopback when the
listener is bound to loopback. A request that names no listener is anonymous on none (fail
closed).

A verified password is remembered (bounded) against the stored hash it matched, so a client
that repeats its credentials on every request costs one PBKDF2 run, and a user changed or
removed in the users file stops matching at once. Wrong credentials from one host are answered
later and later (the configuration's failed_logins, in a throttle of the HTTP listeners' own);
a request without credentials is no failed login (a browser asks first without).

Owns: parsing the header, checking the password, the throttle. Must not touch: the decision
(authz.py), the HTTP mapping (http.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from ..amqp.login_throttle import LoginThrottle
from ..config.models import HttpListener, RouterConfig
from ..config.users import credential_store
from .authz import Requester, is_loopback

VERIFIED_MEMORY = 256  # (user, password digest) pairs remembered after a successful check
MAX_CREDENTIALS_BYTES = 4096
CHALLENGE = ("www-authenticate", 'Basic realm="router", charset="UTF-8"')
_PEPPER = os.urandom(32)  # the remembered digests are of this process only


class HttpAuthenticator:
    """`config()`: the live configuration (users, failed_logins); `clock()`: seconds; `sleep`:
    the server's (trio's), None to answer failures at once."""

    def __init__(self, config: Callable[[], RouterConfig], clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self.sleep = sleep
        limits = config().failed_logins
        self.logins = LoginThrottle(limits.initial_delay_s, limits.max_delay_s, limits.forget_after_s, limits.max_hosts)
        self._verified: OrderedDict[tuple[str, bytes], Any] = OrderedDict()

    def requester(self, listener: HttpListener | None, authorization: str | None) -> Requester | None:
        """Who sends a request through `listener` with this Authorization header; None when the
        listener wants credentials and they are missing or wrong (401)."""
        if listener is None:
            return Requester(None, face="http")
        loopback = is_loopback(listener.host)
        if listener.authenticate == "none":
            return Requester(None, loopback=loopback, face="http")
        user = self.basic_user(authorization)
        return None if user is None else Requester(user, loopback=loopback, face="http")

    def basic_user(self, authorization: str | None) -> str | None:
        """The user whose right password the header carries, else None (never an error)."""
        if authorization is None or len(authorization) > MAX_CREDENTIALS_BYTES:
            return None
        scheme, _, encoded = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        name, colon, password = decoded.partition(":")
        if not colon or not name:
            return None
        store = credential_store(self.config())
        stored = store.user(name)
        digest = hmac.new(_PEPPER, f"{name}\0{password}".encode(), hashlib.sha256).digest()
        if stored is not None and self._verified.get((name, digest)) is stored:
            return name
        if not store.check_plain("", name, password):
            return None
        self._verified[(name, digest)] = store.user(name)
        while len(self._verified) > VERIFIED_MEMORY:
            self._verified.popitem(last=False)
        return name

    async def throttle(self, host: str, *, ok: bool, tried: bool) -> None:
        """After the check of a request from `host`: a success forgets the host, a failure
        with credentials waits its turn."""
        if ok:
            self.logins.succeeded(host)
        elif tried:
            delay = self.logins.failed(host, self.clock())
            if delay > 0 and self.sleep is not None:
                await self.sleep(delay)
