"""SASL negotiation (security §5.3): server and client sides for ANONYMOUS, PLAIN and EXTERNAL.

Owns: which SASL frame answers which, mechanism selection, credential checking through a
pluggable callback, and the outcome. The connection engine owns the bytes: it feeds decoded SASL
frames in and writes the frames returned here.
EXTERNAL uses the identity the transport established (the TLS peer's certificate subject); the
driver supplies it as `external_identity`.
Must not touch: framing, sockets, TLS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .performatives import (
    SASL_AUTH,
    SASL_OK,
    SASL_SYS_PERM,
    SaslChallenge,
    SaslFrame,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)

PlainCheck = Callable[[str, str, str], bool]  # (authzid, username, password) -> accepted
SUPPORTED = ("EXTERNAL", "PLAIN", "ANONYMOUS")


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslServerConfig:
    """What a listener offers. PLAIN is only offered when `check_plain` is given."""

    mechanisms: tuple[str, ...] = ("ANONYMOUS",)
    check_plain: PlainCheck | None = None
    external_identity: str | None = None
    allow_no_sasl: bool = False  # accept a client that skips SASL (plain AMQP header)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslClientConfig:
    """What a client tries, in order of preference among those the server offers."""

    mechanisms: tuple[str, ...] = ("EXTERNAL", "PLAIN", "ANONYMOUS")
    username: str | None = None
    password: str | None = None
    authzid: str = ""
    hostname: str | None = None


@dataclass(frozen=True, slots=True)
class SaslResult:
    ok: bool
    mechanism: str | None
    user: str | None
    code: int
    description: str


class SaslProtocolError(Exception):
    """A SASL frame arrived that the exchange does not allow at this point."""


class SaslServer:
    __slots__ = ("config", "_offered", "_mechanism", "_done")

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        offered = [m for m in config.mechanisms if m in SUPPORTED]
        if "PLAIN" in offered and config.check_plain is None:
            offered.remove("PLAIN")
        if "EXTERNAL" in offered and not config.external_identity:
            offered.remove("EXTERNAL")
        self._offered = tuple(offered)
        self._mechanism: str | None = None
        self._done = False

    def start(self) -> SaslMechanisms:
        return SaslMechanisms(sasl_server_mechanisms=self._offered)

    def on_frame(self, frame: SaslFrame) -> tuple[list[SaslFrame], SaslResult | None]:
        if self._done:
            raise SaslProtocolError(f"{type(frame).__name__} after the SASL outcome")
        if isinstance(frame, SaslInit) and self._mechanism is None:
            self._mechanism = frame.mechanism
            if frame.mechanism not in self._offered:
                return self._finish(False, None, SASL_AUTH, f"mechanism {frame.mechanism} refused")
            if frame.mechanism == "PLAIN" and frame.initial_response is None:
                return [SaslChallenge(challenge=b"")], None  # ask for the credentials
            return self._authenticate(frame.initial_response or b"")
        if isinstance(frame, SaslResponse) and self._mechanism == "PLAIN":
            return self._authenticate(frame.response)
        raise SaslProtocolError(f"unexpected {type(frame).__name__} in the SASL exchange")

    def _authenticate(self, response: bytes) -> tuple[list[SaslFrame], SaslResult | None]:
        mechanism = self._mechanism
        if mechanism == "ANONYMOUS":
            return self._finish(True, "anonymous", SASL_OK, "")
        if mechanism == "EXTERNAL":
            return self._finish(True, self.config.external_identity, SASL_OK, "")
        # PLAIN, RFC 4616: [authzid] NUL authcid NUL passwd
        parts = response.split(b"\x00")
        if len(parts) != 3:
            return self._finish(False, None, SASL_AUTH, "malformed PLAIN response")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._finish(False, None, SASL_AUTH, "PLAIN response is not UTF-8")
        check = self.config.check_plain
        try:
            accepted = check is not None and check(authzid, username, password)
        except Exception:  # a broken credential store must not take the connection engine down
            return self._finish(False, username, SASL_SYS_PERM, "credential check failed")
        if not accepted:
            return self._finish(False, username, SASL_AUTH, "authentication failed")
        return self._finish(True, authzid or username, SASL_OK, "")

    def _finish(
        self, ok: bool, user: str | None, code: int, description: str
    ) -> tuple[list[SaslFrame], SaslResult | None]:
        self._done = True
        result = SaslResult(ok, self._mechanism, user, code, description)
        return [SaslOutcome(code=code)], result


class SaslClient:
    __slots__ = ("config", "_mechanism", "_done")

    def __init__(self, config: SaslClientConfig) -> None:
        self.config = config
        self._mechanism: str | None = None
        self._done = False

    def _choose(self, offered: tuple[str, ...]) -> str | None:
        for mechanism in self.config.mechanisms:
            if mechanism not in offered:
                continue
            if mechanism == "PLAIN" and self.config.username is None:
                continue
            return mechanism
        return None

    def _initial_response(self, mechanism: str) -> bytes:
        if mechanism == "PLAIN":
            c = self.config
            return f"{c.authzid}\x00{c.username}\x00{c.password or ''}".encode()
        if mechanism == "ANONYMOUS":
            return (self.config.username or "anonymous").encode()
        return b""  # EXTERNAL: the identity comes from the TLS layer

    def on_frame(self, frame: SaslFrame) -> tuple[list[SaslFrame], SaslResult | None]:
        if self._done:
            raise SaslProtocolError(f"{type(frame).__name__} after the SASL outcome")
        if isinstance(frame, SaslMechanisms) and self._mechanism is None:
            mechanism = self._choose(tuple(frame.sasl_server_mechanisms))
            if mechanism is None:
                self._done = True
                offered = ", ".join(frame.sasl_server_mechanisms) or "none"
                return [], SaslResult(False, None, None, SASL_AUTH, f"no usable mechanism (server offers {offered})")
            self._mechanism = mechanism
            init = SaslInit(
                mechanism=mechanism,
                initial_response=self._initial_response(mechanism),
                hostname=self.config.hostname,
            )
            return [init], None
        if isinstance(frame, SaslChallenge) and self._mechanism is not None:
            return [SaslResponse(response=self._initial_response(self._mechanism))], None
        if isinstance(frame, SaslOutcome) and self._mechanism is not None:
            self._done = True
            ok = frame.code == SASL_OK
            description = "" if ok else f"authentication failed (sasl-code {frame.code})"
            return [], SaslResult(ok, self._mechanism, self.config.username, frame.code, description)
        raise SaslProtocolError(f"unexpected {type(frame).__name__} in the SASL exchange")


class LoginThrottle:
    """Slows down repeated failed logins from one host (sans-IO: time comes in as `now`).

    The first failure from a host is answered at once; each further failure within
    `forget_after_s` of the previous one waits twice as long before its sasl-outcome, from
    `initial_delay_s` up to `max_delay_s`. A success forgets the host. The table of hosts is
    bounded (`max_hosts`, the oldest failures go first), so a flood of hosts costs bounded
    memory; a delay holds back only the failing connection's outcome (the engine's deadline),
    never another connection or the router.
    """

    __slots__ = ("initial_delay_s", "max_delay_s", "forget_after_s", "max_hosts", "_hosts",
                 "failures", "delayed")  # fmt: skip

    def __init__(self, initial_delay_s: float = 0.25, max_delay_s: float = 4.0,
                 forget_after_s: float = 60.0, max_hosts: int = 4096) -> None:  # fmt: skip
        self.initial_delay_s = initial_delay_s
        self.max_delay_s = max_delay_s
        self.forget_after_s = forget_after_s
        self.max_hosts = max_hosts
        # host -> (failures in a row, when the last one was answered); insertion order is the
        # order of the last failure (a host is moved to the end on each), oldest first.
        self._hosts: dict[str, tuple[int, float]] = {}
        self.failures = 0  # failed logins (management)
        self.delayed = 0  # of those, the ones whose outcome was held back

    def failed(self, host: str, now: float) -> float:
        """A login from `host` failed at `now`: how long to hold back its outcome (seconds)."""
        self.failures += 1
        previous = self._hosts.pop(host, None)
        count = 0
        if previous is not None and now - previous[1] <= self.forget_after_s + self.max_delay_s:
            count = previous[0]
        delay = 0.0 if count == 0 else min(self.initial_delay_s * 2 ** min(count - 1, 32), self.max_delay_s)
        while len(self._hosts) >= self.max_hosts:
            del self._hosts[next(iter(self._hosts))]
        self._hosts[host] = (count + 1, now + delay)
        if delay > 0:
            self.delayed += 1
        return delay

    def succeeded(self, host: str) -> None:
        self._hosts.pop(host, None)

    @property
    def hosts(self) -> int:
        """Hosts remembered for their failures now."""
        return len(self._hosts)
