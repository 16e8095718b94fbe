"""SCRAM (RFC 5802) keys and the credentials a server stores, for SHA-256 (RFC 7677) and SHA-1.

Owns: the hash of each mechanism, password normalisation (SASLprep, RFC 4013), the key
derivations (SaltedPassword, ClientKey, StoredKey, ServerKey), the stored credentials and their
`SCRAM-SHA-256$i:salt$stored:server` text form, making them from a password and checking a
password against them (what SASL PLAIN does with a SCRAM hash).
Must not touch: the exchange of SCRAM messages (scram.py), SASL frames (sasl.py), where
credentials are kept (router.config.users).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from dataclasses import dataclass

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-1": "sha1"}
MECHANISMS = tuple(HASHES)
DEFAULT_ITERATIONS = 4096  # RFC 7677 §4: at least 4096
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000  # a hostile server must not make a client spin for minutes


def to_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def from_base64(text: str) -> bytes:
    """The bytes of strict base64 `text`; a ValueError (binascii.Error, UnicodeEncodeError) when
    it is not."""
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True, slots=True)
class StoredCredentials:
    """What a server keeps of a password for one SCRAM hash (RFC 5802 §3): enough to check a
    login, not enough to log in as the user."""

    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-1
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def encode(self) -> str:
        b64 = to_base64
        return f"{self.mechanism}${self.iterations}:{b64(self.salt)}${b64(self.stored_key)}:{b64(self.server_key)}"

    @classmethod
    def decode(cls, text: str) -> StoredCredentials:
        """Parse the `MECHANISM$ITERATIONS:SALT$STOREDKEY:SERVERKEY` form (the one PostgreSQL uses)."""
        try:
            mechanism, params, keys = text.split("$")
            iterations_text, salt_text = params.split(":")
            stored_text, server_text = keys.split(":")
            iterations = int(iterations_text)
            salt, stored, server = (from_base64(t) for t in (salt_text, stored_text, server_text))
        except ValueError:  # a wrong shape, a bad number or bad base64
            raise ValueError("not a SCRAM hash (expected MECHANISM$ITERATIONS:SALT$STOREDKEY:SERVERKEY)") from None
        if mechanism not in HASHES:
            raise ValueError(f"unknown hash mechanism {mechanism!r} (expected one of {', '.join(MECHANISMS)})")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
        size = hashlib.new(HASHES[mechanism]).digest_size
        if len(stored) != size or len(server) != size or not salt:
            raise ValueError(f"{mechanism} keys must be {size} bytes and the salt not empty")
        return cls(mechanism, iterations, salt, stored, server)


def saslprep(text: str) -> str:
    """RFC 4013 SASLprep (stored strings): what passwords are normalised with (RFC 5802 §2.2)."""
    mapped = "".join(
        " " if stringprep.in_table_c12(ch) else ch for ch in text if not stringprep.in_table_b1(ch)
    )
    normal = unicodedata.normalize("NFKC", mapped)
    for ch in normal:
        if (stringprep.in_table_c12(ch) or stringprep.in_table_c21_c22(ch) or stringprep.in_table_c3(ch)
                or stringprep.in_table_c4(ch) or stringprep.in_table_c5(ch) or stringprep.in_table_c6(ch)
                or stringprep.in_table_c7(ch) or stringprep.in_table_c8(ch) or stringprep.in_table_c9(ch)
                or stringprep.in_table_a1(ch)):  # fmt: skip
            raise ValueError("the password holds a character SASLprep prohibits")
    if any(stringprep.in_table_d1(ch) for ch in normal):
        if not (stringprep.in_table_d1(normal[0]) and stringprep.in_table_d1(normal[-1])):
            raise ValueError("the password mixes text directions in a way SASLprep prohibits")
        if any(stringprep.in_table_d2(ch) for ch in normal):
            raise ValueError("the password mixes text directions in a way SASLprep prohibits")
    return normal


def saslprep_or_same(text: str) -> str:
    try:
        return saslprep(text)
    except ValueError:
        return text


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) = PBKDF2-HMAC (RFC 5802 §2.2)."""
    try:
        normal = saslprep(password)
    except ValueError:
        normal = password  # as RFC 5802 §2.2 allows for unassigned code points: use the string as is
    return hashlib.pbkdf2_hmac(HASHES[mechanism], normal.encode("utf-8"), salt, iterations)


def derive_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from SaltedPassword."""
    name = HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", name)
    return client_key, hashlib.new(name, client_key).digest(), hmac.digest(salted, b"Server Key", name)


def make_credentials(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                     salt: bytes | None = None) -> StoredCredentials:  # fmt: skip
    salt = salt if salt is not None else secrets.token_bytes(16)
    _, stored, server = derive_keys(mechanism, salted_password(mechanism, password, salt, iterations))
    return StoredCredentials(mechanism, iterations, salt, stored, server)


def check_password(credentials: StoredCredentials, password: str) -> bool:
    """Whether `password` is the one `credentials` were made from (SASL PLAIN checks with this)."""
    salted = salted_password(credentials.mechanism, password, credentials.salt, credentials.iterations)
    _, stored, _ = derive_keys(credentials.mechanism, salted)
    return hmac.compare_digest(stored, credentials.stored_key)
