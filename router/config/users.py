"""The users file and the credential store that SASL PLAIN and SCRAM check logins against.

The file (YAML, written by `router users add`, mode 0600) holds, per user, salted and
iterated hashes only, never a password:

    users:
      alice:
        - SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>
        - SCRAM-SHA-1$4096:<salt>$<StoredKey>:<ServerKey>

Owns: reading and writing that file (atomically: a temporary file renamed over the old one),
hashing a new password, and CredentialStore: the configuration's inline `users` and the file's
together, the file read again when it changes (a file that no longer loads is logged once and
the users read before stay in force), and the cost of SASL PLAIN checks: a bounded cache of
passwords verified before and a router-wide budget of PBKDF2 derivations (sans-IO: time comes
in as `now`).
Must not touch: the SASL exchange (router.amqp.sasl / scram), the configuration schema.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml

from ..amqp.sasl import PasswordChecksBusy
from ..amqp.scram_keys import MECHANISMS, StoredCredentials, check_password, make_credentials
from .models import RouterConfig, User

log = logging.getLogger("router.users")

MAX_USERS_FILE_BYTES = 16 * 1024 * 1024
Credentials = dict[str, dict[str, StoredCredentials]]  # user -> mechanism -> credentials


class UsersFileError(Exception):
    """The users file cannot be read or is malformed; the text names the file and the problem."""


def hash_password(password: str, iterations: int = 4096) -> tuple[str, ...]:
    """The hashes a users file keeps for `password`: one per SCRAM mechanism (each with its own salt)."""
    return tuple(make_credentials(m, password, iterations=iterations).encode() for m in MECHANISMS)


def parse_users(data: Any, source: str) -> Credentials:
    if data is None:
        return {}
    if not isinstance(data, dict) or set(data) - {"users"}:
        raise UsersFileError(f"{source}: expected a mapping with one key, users:")
    users = data.get("users") or {}
    if not isinstance(users, dict):
        raise UsersFileError(f"{source}: users: expected a mapping of user name to a list of hashes")
    out: Credentials = {}
    for name, hashes in users.items():
        if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 255:
            raise UsersFileError(f"{source}: user name {name!r} must be text of 1 to 255 bytes")
        if isinstance(hashes, str):
            hashes = [hashes]
        if not isinstance(hashes, list) or not hashes:
            raise UsersFileError(f"{source}: user {name!r}: expected a list of hashes")
        entry: dict[str, StoredCredentials] = {}
        for text in hashes:
            try:
                credentials = StoredCredentials.decode(str(text))
            except ValueError as exc:
                raise UsersFileError(f"{source}: user {name!r}: {exc}") from None
            entry[credentials.mechanism] = credentials
        out[name] = entry
    return out


def read_users(path: str | Path) -> Credentials:
    source = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_USERS_FILE_BYTES + 1)
    except OSError as exc:
        raise UsersFileError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_USERS_FILE_BYTES:
        raise UsersFileError(f"{source}: larger than {MAX_USERS_FILE_BYTES} bytes")
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise UsersFileError(f"{source}: not YAML: {str(exc).splitlines()[0]}") from None
    return parse_users(data, source)


def write_users(path: str | Path, users: Credentials) -> None:
    """Write the file atomically with mode 0600 (the hashes are not passwords, but they let
    anyone who reads them try passwords offline)."""
    target = Path(path)
    data = {"users": {name: [c.encode() for c in entry.values()] for name, entry in sorted(users.items())}}
    text = "# users and salted password hashes: edit with `router users add/remove`\n" + yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, width=1000
    )
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def inline_users(users: tuple[User, ...]) -> Credentials:
    """The configuration's `users`: hashes as given; a plain-text password hashed here (in
    memory only) with a warning, once per user."""
    out: Credentials = {}
    for user in users:
        if user.password is not None:
            log.warning(
                "user %r has a plain-text password in the configuration: replace it with the hashes "
                "`router users hash` prints, or move the user to a users_file (`router users add`)", user.username,
            )
            out[user.username] = {m: make_credentials(m, user.password) for m in MECHANISMS}
        else:
            out[user.username] = {c.mechanism: c for c in map(StoredCredentials.decode, user.hashes)}
    return out


class DerivationBudget:
    """A token bucket of password derivations (sans-IO: `now` in seconds): `burst` at once, then
    `rate_per_s`. A `now` earlier than one seen before refills nothing."""

    __slots__ = ("rate_per_s", "burst", "_tokens", "_last")

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._last: float | None = None

    def take(self, now: float) -> bool:
        if self._last is None or now > self._last:
            if self._last is not None:
                self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate_per_s)
            self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


VERIFIED_CACHE_SIZE = 256
# Keys the cache's hashes of verified passwords: what the cache holds is no fast hash of a
# password that could be tried offline.
_CACHE_KEY = secrets.token_bytes(32)


class CredentialStore:
    """Who may log in with a password: the configuration's inline users, then the users file's
    (a user in both: the file wins, it is the one `router users add` changes)."""

    def __init__(self, config: RouterConfig) -> None:
        self._inline = inline_users(config.users)
        self._path = config.users_file
        self._file: Credentials = {}
        self._signature: tuple[int, int, int] | None = None
        self._reported: tuple[int, int, int] | None = None
        limits = config.failed_logins
        self.budget = DerivationBudget(limits.max_password_checks_per_s, limits.password_checks_burst)
        # (user, the stored credentials, keyed hash of the password) of PLAIN logins that passed,
        # least recently used first: a changed or removed user or another password never matches.
        self._verified: OrderedDict[tuple[str, StoredCredentials, bytes], None] = OrderedDict()
        self.derivations = 0  # PBKDF2 derivations done for PLAIN checks
        self.cache_hits = 0  # PLAIN checks answered from the cache
        self.refused_busy = 0  # PLAIN checks refused because the budget was spent
        if self._path is not None:
            self._signature = self._stat()
            try:  # `router run` has checked it at start (check_users_file); this is a later read
                self._file = read_users(self._path)
            except UsersFileError as exc:
                self._reported = self._signature
                log.error("%s; no users from it until it is fixed", exc)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._path or "")
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _refresh(self) -> None:
        """Read the file again when it changed (one stat per login)."""
        if self._path is None:
            return
        signature = self._stat()
        if signature == self._signature or signature is None and self._signature is None:
            return
        try:
            self._file = read_users(self._path)
            self._signature = signature
            log.info("users file %s read again: %d users", self._path, len(self._file))
        except UsersFileError as exc:
            if signature != self._reported:
                self._reported = signature
                log.error("%s; the users read before stay in force", exc)

    def user(self, name: str) -> dict[str, StoredCredentials] | None:
        self._refresh()
        return self._file.get(name) or self._inline.get(name)

    def scram(self, mechanism: str, name: str) -> StoredCredentials | None:
        entry = self.user(name)
        return entry.get(mechanism) if entry else None

    def check_plain(self, authzid: str, name: str, password: str, now: float | None = None) -> bool:
        """SASL PLAIN: the password checked against the user's SCRAM hash (PBKDF2 with its salt);
        acting for another user (an authzid other than the user's own) is refused. A password
        verified before for the same stored hash is answered from the cache; any other check
        spends one of the budget's derivations (with `now`; None: unbounded) or raises
        PasswordChecksBusy."""
        entry = self.user(name)
        credentials = (entry.get("SCRAM-SHA-256") or next(iter(entry.values()))) if entry else _NOBODY
        key = (name, credentials, hmac.digest(_CACHE_KEY, password.encode("utf-8", "surrogatepass"), "sha256"))
        if entry is not None and key in self._verified:
            self._verified.move_to_end(key)
            self.cache_hits += 1
            return authzid in ("", name)
        if now is not None and not self.budget.take(now):
            self.refused_busy += 1
            raise PasswordChecksBusy()
        self.derivations += 1
        # An unknown user costs the same derivation as a real one: the answer's timing must not tell.
        if not check_password(credentials, password) or entry is None:
            return False
        self._verified[key] = None
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return authzid in ("", name)


_NOBODY = make_credentials("SCRAM-SHA-256", os.urandom(16).hex())


def check_users_file(config: RouterConfig) -> None:
    """At start: the configured users file must load (UsersFileError names the problem)."""
    if config.users_file is not None:
        read_users(config.users_file)


_stores: dict[tuple[tuple[User, ...], str | None], CredentialStore] = {}


def credential_store(config: RouterConfig) -> CredentialStore:
    """The store for `config`'s users (one per distinct users/users_file, kept for the process:
    a connection's login must not hash inline passwords or read the file afresh)."""
    key = (config.users, config.users_file)
    store = _stores.get(key)
    if store is None:
        if len(_stores) >= 64:  # configurations replaced at run time: keep the newest only
            _stores.clear()
        store = _stores[key] = CredentialStore(config)
    return store
