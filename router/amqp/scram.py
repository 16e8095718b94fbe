"""The SCRAM exchange (RFC 5802) with SHA-256 (RFC 7677) and SHA-1: both sides, without I/O.

Owns: the client's and the server's messages, strict parsing of the peer's (sizes, attribute
order, base64, nonces, the GS2 channel-binding flag), the proofs and signatures computed from the
keys and their constant-time comparison, and an unknown user's made-up answer.
Must not touch: deriving keys or the credentials a server stores (scram_keys.py), SASL frames
(sasl.py carries these messages in sasl-init/-challenge/-response/-outcome), where credentials
are kept (router.config.users).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from .scram_keys import (
    DEFAULT_ITERATIONS,
    HASHES,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    StoredCredentials,
    derive_keys,
    from_base64,
    salted_password,
    saslprep_or_same,
    to_base64,
)

MAX_MESSAGE_BYTES = 2048  # any honest SCRAM message is far shorter
MAX_USERNAME_BYTES = 255
NONCE_BYTES = 24


class ScramError(Exception):
    """The peer's SCRAM message is malformed or does not verify; the text is safe to log."""


# --- messages -----------------------------------------------------------------------------------


def _unb64(text: str) -> bytes:
    try:
        return from_base64(text)
    except ValueError:  # binascii.Error and UnicodeEncodeError are ValueErrors
        raise ScramError("bad base64") from None


def _text(message: bytes) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"message longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("message is not UTF-8") from None
    if "\x00" in text:
        raise ScramError("message holds a NUL")
    return text


def _attributes(text: str, names: str, what: str) -> list[str]:
    """The values of `text`'s leading attributes, which must be `names` in that order (extensions
    may follow; a mandatory extension `m=` is refused, RFC 5802 §5.1)."""
    parts = text.split(",")
    if len(parts) < len(names):
        raise ScramError(f"{what}: expected attributes {','.join(names)}")
    values = []
    for name, part in zip(names, parts, strict=False):
        if part[:2] != f"{name}=":
            if part.startswith("m="):
                raise ScramError(f"{what}: mandatory extension not supported")
            raise ScramError(f"{what}: expected attribute {name}= (got {part[:2]!r})")
        values.append(part[2:])
    return values


def _nonce_ok(nonce: str) -> bool:
    # printable ASCII but ',' (RFC 5802 §7)
    return 0 < len(nonce) <= 256 and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def _saslname(value: str) -> str:
    """Decode =2C and =3D; any other '=' is malformed (RFC 5802 §5.1)."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "=":
            escape = value[i : i + 3]
            if escape not in ("=2C", "=3D"):
                raise ScramError("bad escape in the user name")
            out.append("," if escape == "=2C" else "=")
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


Lookup = Callable[[str], "StoredCredentials | None"]  # user -> credentials for this mechanism


# --- the server side ------------------------------------------------------------------------------


class ScramServer:
    """One server-side exchange: first(client-first) -> server-first; final(client-final) ->
    (server-final, user). `lookup(user)` gives the user's stored credentials for this mechanism,
    or None; an unknown user gets a made-up salt and fails at the proof, like a wrong password,
    so the exchange does not tell who exists."""

    __slots__ = ("mechanism", "_lookup", "_fake_key", "_server_nonce", "_nonce", "_gs2", "_first_bare", "_server_first",
                 "_user", "_authzid", "_credentials")  # fmt: skip

    def __init__(self, mechanism: str, lookup: Lookup, fake_key: bytes, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._server_nonce = nonce or to_base64(secrets.token_bytes(NONCE_BYTES))  # given: the RFCs' test vectors
        self._lookup = lookup
        self._fake_key = fake_key
        self._nonce = ""
        self._gs2 = ""
        self._first_bare = ""
        self._server_first = ""
        self._user = ""
        self._authzid = ""
        self._credentials: StoredCredentials | None = None

    @property
    def user(self) -> str:
        return self._user

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        flag, sep, rest = text.partition(",")
        if not sep:
            raise ScramError("client-first: no GS2 header")
        if flag.startswith("p="):
            raise ScramError("channel binding requested but not offered (no -PLUS mechanism)")
        if flag not in ("n", "y"):  # y: the client could bind but believes we cannot; we cannot
            raise ScramError("client-first: bad channel-binding flag")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise ScramError("client-first: no GS2 header")
        if authzid and not authzid.startswith("a="):
            raise ScramError("client-first: bad authzid")
        self._authzid = _saslname(authzid[2:]) if authzid else ""
        username, nonce = _attributes(bare, "nr", "client-first")
        user = _saslname(username)
        if not user or len(user.encode("utf-8")) > MAX_USERNAME_BYTES:
            raise ScramError("client-first: bad user name length")
        if not _nonce_ok(nonce):
            raise ScramError("client-first: bad nonce")
        self._gs2 = f"{flag},{authzid},"
        self._first_bare = bare
        self._user = user
        credentials = self._lookup(user)
        self._credentials = credentials
        if credentials is None:  # the same answer, and a proof that can never match
            size = hashlib.new(HASHES[self.mechanism]).digest_size
            salt = hmac.digest(self._fake_key, user.encode("utf-8"), "sha256")[:16]
            credentials = StoredCredentials(self.mechanism, DEFAULT_ITERATIONS, salt, bytes(size), bytes(size))
        self._nonce = nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={to_base64(credentials.salt)},i={credentials.iterations}"
        return self._server_first.encode("ascii")

    def final(self, message: bytes) -> tuple[bytes, str]:
        """Check client-final; (server-final, authenticated user) or ScramError."""
        text = _text(message)
        channel, nonce = _attributes(text, "cr", "client-final")
        without_proof, sep, proof_text = text.rpartition(",")
        if not sep or not proof_text.startswith("p="):
            raise ScramError("client-final: the proof is not last")
        if _unb64(channel) != self._gs2.encode("utf-8"):
            raise ScramError("client-final: channel binding does not match the GS2 header")
        if not hmac.compare_digest(nonce.encode("ascii", "replace"), self._nonce.encode("ascii")):
            raise ScramError("client-final: wrong nonce")
        proof = _unb64(proof_text[2:])
        credentials = self._credentials
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode("utf-8")
        name = HASHES[self.mechanism]
        if credentials is None or len(proof) != len(credentials.stored_key):
            raise ScramError("authentication failed")
        signature = hmac.digest(credentials.stored_key, auth_message, name)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(name, client_key).digest(), credentials.stored_key):
            raise ScramError("authentication failed")
        if self._authzid not in ("", self._user):  # acting for another user is not supported
            raise ScramError("authorisation identity differs from the user")
        verifier = hmac.digest(credentials.server_key, auth_message, name)
        return f"v={to_base64(verifier)}".encode("ascii"), self._user


# --- the client side ------------------------------------------------------------------------------


class ScramClient:
    """One client-side exchange: first() -> client-first; final(server-first) -> client-final;
    verify(server-final) proves the server knew the password too (RFC 5802 §3)."""

    __slots__ = ("mechanism", "_user", "_password", "_authzid", "_nonce", "_first_bare", "_server_signature", "verified")

    def __init__(self, mechanism: str, username: str, password: str, authzid: str = "", nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._user = username
        self._password = password
        self._authzid = authzid
        self._nonce = nonce or to_base64(secrets.token_bytes(NONCE_BYTES))
        self._first_bare = ""
        self._server_signature: bytes | None = None
        self.verified = False  # the server proved it knows the password

    def _gs2(self) -> str:
        return f"n,{'a=' + _escape(self._authzid) if self._authzid else ''},"

    def first(self) -> bytes:
        self._first_bare = f"n={_escape(saslprep_or_same(self._user))},r={self._nonce}"
        return (self._gs2() + self._first_bare).encode("utf-8")

    def final(self, message: bytes) -> bytes:
        text = _text(message)
        nonce, salt_text, iterations_text = _attributes(text, "rsi", "server-first")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not _nonce_ok(nonce):
            raise ScramError("server-first: the nonce does not extend ours")
        salt = _unb64(salt_text)
        if not iterations_text.isdigit() or not MIN_ITERATIONS <= int(iterations_text) <= MAX_ITERATIONS:
            raise ScramError(f"server-first: iteration count out of range ({iterations_text[:12]!r})")
        salted = salted_password(self.mechanism, self._password, salt, int(iterations_text))
        client_key, stored_key, server_key = derive_keys(self.mechanism, salted)
        without_proof = f"c={to_base64(self._gs2().encode('utf-8'))},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode("utf-8")
        name = HASHES[self.mechanism]
        signature = hmac.digest(stored_key, auth_message, name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(server_key, auth_message, name)
        return f"{without_proof},p={to_base64(proof)}".encode("ascii")

    def verify(self, message: bytes) -> None:
        text = _text(message)
        if text.startswith("e="):
            raise ScramError(f"the server refused: {text[2:100]}")
        (verifier,) = _attributes(text, "v", "server-final")
        if self._server_signature is None or not hmac.compare_digest(_unb64(verifier), self._server_signature):
            raise ScramError("the server's signature does not verify (it does not know the password)")
        self.verified = True
