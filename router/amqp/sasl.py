"""SASL negotiation (security §5.3): server and client sides for ANONYMOUS, PLAIN, EXTERNAL,
SCRAM-SHA-256 and SCRAM-SHA-1.

Owns: which SASL frame answers which, mechanism selection, credential checking through
pluggable callbacks (PLAIN: a password check; SCRAM: the user's stored credentials, scram.py
does the exchange), and the outcome. The connection engine owns the bytes: it feeds decoded SASL
frames in and writes the frames returned here.
EXTERNAL uses the identity the transport established (the TLS peer's certificate subject); the
driver supplies it as `external_identity`.
Must not touch: framing, sockets, TLS.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from .performatives import (
    SASL_AUTH,
    SASL_OK,
    SASL_SYS,
    SASL_SYS_PERM,
    SASL_SYS_TEMP,
    SaslChallenge,
    SaslFrame,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)
from .scram import ScramClient, ScramError, ScramServer
from .scram_keys import MECHANISMS as SCRAM_MECHANISMS
from .scram_keys import StoredCredentials

PlainCheck = Callable[[str, str, str], bool]  # (authzid, username, password) -> accepted
ScramLookup = Callable[[str, str], StoredCredentials | None]  # (mechanism, username) -> credentials
SUPPORTED = ("EXTERNAL", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS")
# Keys the made-up salts of unknown SCRAM users: the same name gets the same salt for the life
# of the process, so asking twice does not tell a made-up user from a real one.
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslServerConfig:
    """What a listener offers. PLAIN is only offered when `check_plain` is given, SCRAM only
    when `scram_credentials` is."""

    mechanisms: tuple[str, ...] = ("ANONYMOUS",)
    check_plain: PlainCheck | None = None
    scram_credentials: ScramLookup | None = None
    external_identity: str | None = None
    allow_no_sasl: bool = False  # accept a client that skips SASL (plain AMQP header)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslClientConfig:
    """What a client tries, in order of preference among those the server offers."""

    mechanisms: tuple[str, ...] = ("EXTERNAL", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS")
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
    user_given: str | None = field(default=None)  # the name a failed login tried (for the log)


class SaslProtocolError(Exception):
    """A SASL frame arrived that the exchange does not allow at this point."""


class PasswordChecksBusy(Exception):
    """Raised by a PLAIN check when the router's budget of password derivations is spent for
    now: the login is refused at once with sys-temp (security 5.3.3.6), so the client tries again."""


class SaslServer:
    __slots__ = ("config", "_offered", "_mechanism", "_done", "_scram")

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        offered = [m for m in config.mechanisms if m in SUPPORTED]
        if "PLAIN" in offered and config.check_plain is None:
            offered.remove("PLAIN")
        if "EXTERNAL" in offered and not config.external_identity:
            offered.remove("EXTERNAL")
        if config.scram_credentials is None:
            offered = [m for m in offered if m not in SCRAM_MECHANISMS]
        self._offered = tuple(offered)
        self._mechanism: str | None = None
        self._done = False
        self._scram: ScramServer | None = None

    def start(self) -> SaslMechanisms:
        return SaslMechanisms(sasl_server_mechanisms=self._offered)

    def on_frame(self, frame: SaslFrame) -> tuple[list[SaslFrame], SaslResult | None]:
        if self._done:
            raise SaslProtocolError(f"{type(frame).__name__} after the SASL outcome")
        if isinstance(frame, SaslInit) and self._mechanism is None:
            self._mechanism = frame.mechanism
            if frame.mechanism not in self._offered:
                return self._finish(False, None, SASL_AUTH, f"mechanism {frame.mechanism[:32]!r} not offered")
            if frame.mechanism in ("PLAIN", *SCRAM_MECHANISMS) and frame.initial_response is None:
                return [SaslChallenge(challenge=b"")], None  # ask for the credentials
            if frame.mechanism in SCRAM_MECHANISMS:
                return self._scram_step(frame.initial_response or b"")
            return self._authenticate(frame.initial_response or b"")
        if isinstance(frame, SaslResponse) and self._mechanism == "PLAIN":
            return self._authenticate(frame.response)
        if isinstance(frame, SaslResponse) and self._mechanism in SCRAM_MECHANISMS:
            return self._scram_step(frame.response)
        raise SaslProtocolError(f"unexpected {type(frame).__name__} in the SASL exchange")

    def _scram_step(self, message: bytes) -> tuple[list[SaslFrame], SaslResult | None]:
        """client-first -> challenge(server-first); client-final -> outcome(server-final as
        additional-data, security §5.3.3.6). Anything wrong ends in an auth failure."""
        mechanism = self._mechanism
        assert mechanism is not None and self.config.scram_credentials is not None
        lookup = self.config.scram_credentials
        scram = self._scram
        try:
            if scram is None:
                scram = self._scram = ScramServer(mechanism, lambda user: lookup(mechanism, user), _UNKNOWN_USER_KEY)
                return [SaslChallenge(challenge=scram.first(message))], None
            server_final, user = scram.final(message)
        except ScramError as exc:
            return self._finish(False, None, SASL_AUTH, str(exc), scram.user if scram else None)
        except Exception:  # a broken credential store must not take the connection engine down
            return self._finish(False, None, SASL_SYS_PERM, "credential lookup failed", scram.user if scram else None)
        self._done = True
        return [SaslOutcome(code=SASL_OK, additional_data=server_final)], SaslResult(True, mechanism, user, SASL_OK, "")

    def _authenticate(self, response: bytes) -> tuple[list[SaslFrame], SaslResult | None]:
        mechanism = self._mechanism
        if mechanism == "ANONYMOUS":
            return self._finish(True, "anonymous", SASL_OK, "")
        if mechanism == "EXTERNAL":
            return self._finish(True, self.config.external_identity, SASL_OK, "")
        # PLAIN, RFC 4616: [authzid] NUL authcid NUL passwd
        parts = response.split(b"\x00")
        if len(parts) != 3 or len(response) > 4096:
            return self._finish(False, None, SASL_AUTH, "malformed PLAIN response")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._finish(False, None, SASL_AUTH, "PLAIN response is not UTF-8")
        check = self.config.check_plain
        try:
            accepted = check is not None and check(authzid, username, password)
        except PasswordChecksBusy:
            return self._finish(False, None, SASL_SYS_TEMP, "too many password checks at once", username)
        except Exception:  # a broken credential store must not take the connection engine down
            return self._finish(False, None, SASL_SYS_PERM, "credential check failed", username)
        if not accepted:
            return self._finish(False, None, SASL_AUTH, "authentication failed", username)
        if authzid not in ("", username):  # acting for another user is not supported: refuse, never grant
            return self._finish(False, None, SASL_AUTH, "authorisation identity differs from the user", username)
        return self._finish(True, username, SASL_OK, "")

    def _finish(
        self, ok: bool, user: str | None, code: int, description: str, user_given: str | None = None
    ) -> tuple[list[SaslFrame], SaslResult | None]:
        self._done = True
        result = SaslResult(ok, self._mechanism, user, code, description, user_given)
        return [SaslOutcome(code=code)], result


SASL_CODES = {
    SASL_AUTH: "wrong user name or password, or the mechanism was refused",
    SASL_SYS: "a system error on the server",
    SASL_SYS_PERM: "a permanent system error on the server",
    SASL_SYS_TEMP: "a temporary system error on the server",
}


class SaslClient:
    __slots__ = ("config", "_mechanism", "_done", "_scram")

    def __init__(self, config: SaslClientConfig) -> None:
        self.config = config
        self._mechanism: str | None = None
        self._done = False
        self._scram: ScramClient | None = None

    def _choose(self, offered: tuple[str, ...]) -> str | None:
        for mechanism in self.config.mechanisms:
            if mechanism not in offered:
                continue
            if mechanism == "PLAIN" and self.config.username is None:
                continue
            if mechanism in SCRAM_MECHANISMS and (self.config.username is None or self.config.password is None):
                continue
            return mechanism
        return None

    def _initial_response(self, mechanism: str) -> bytes:
        c = self.config
        if mechanism == "PLAIN":
            return f"{c.authzid}\x00{c.username}\x00{c.password or ''}".encode()
        if mechanism in SCRAM_MECHANISMS:
            assert c.username is not None and c.password is not None
            self._scram = ScramClient(mechanism, c.username, c.password, c.authzid)
            return self._scram.first()
        if mechanism == "ANONYMOUS":
            return (c.username or "anonymous").encode()
        return b""  # EXTERNAL: the identity comes from the TLS layer

    def _failed(self, description: str, code: int = SASL_AUTH) -> tuple[list[SaslFrame], SaslResult | None]:
        self._done = True
        return [], SaslResult(False, self._mechanism, self.config.username, code, description)

    def on_frame(self, frame: SaslFrame) -> tuple[list[SaslFrame], SaslResult | None]:
        if self._done:
            raise SaslProtocolError(f"{type(frame).__name__} after the SASL outcome")
        if isinstance(frame, SaslMechanisms) and self._mechanism is None:
            mechanism = self._choose(tuple(frame.sasl_server_mechanisms))
            if mechanism is None:
                offered = ", ".join(frame.sasl_server_mechanisms) or "none"
                need = "" if self.config.username else " without credentials"
                return self._failed(f"no usable mechanism{need} (the server offers {offered})")
            self._mechanism = mechanism
            init = SaslInit(
                mechanism=mechanism,
                initial_response=self._initial_response(mechanism),
                hostname=self.config.hostname,
            )
            return [init], None
        if isinstance(frame, SaslChallenge) and self._mechanism is not None:
            if self._scram is None:
                return [SaslResponse(response=self._initial_response(self._mechanism))], None
            try:  # server-first, or (some servers) server-final in a challenge before the outcome
                if frame.challenge.startswith((b"v=", b"e=")):
                    self._scram.verify(frame.challenge)
                    return [SaslResponse(response=b"")], None
                return [SaslResponse(response=self._scram.final(frame.challenge))], None
            except ScramError as exc:
                return self._failed(f"{self._mechanism}: {exc}")
        if isinstance(frame, SaslOutcome) and self._mechanism is not None:
            if frame.code != SASL_OK:
                reason = SASL_CODES.get(frame.code, f"sasl-code {frame.code}")
                return self._failed(f"{self._mechanism} login refused: {reason}", frame.code)
            if self._scram is not None and not self._scram.verified:
                try:  # RFC 5802 §3: the server proves it knows the password too
                    self._scram.verify(frame.additional_data or b"")
                except ScramError as exc:
                    return self._failed(f"{self._mechanism}: {exc}")
            self._done = True
            return [], SaslResult(True, self._mechanism, self.config.username, frame.code, "")
        raise SaslProtocolError(f"unexpected {type(frame).__name__} in the SASL exchange")
