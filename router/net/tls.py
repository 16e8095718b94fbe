"""TLS for listeners and connectors: SSL contexts from the configured profiles, what a peer opens
with on a TLS listener (direct TLS, the AMQP TLS header, or plain AMQP), the client certificate's
user for SASL EXTERNAL, and rotation of certificates and keys without a restart.

    profiles = TlsProfiles(config.ssl_profiles)          # TlsError (one line) if a file does not load
    stream, prefix, info = await accept(stream, profiles.get(name), listener)   # a listener's peer
    stream, info = await connect(stream, profiles.get(name), connector)         # a connector's dial

Rotation: each handshake first looks at the profile's files (an os.stat each, cheaper than the
handshake by far); when one changed the material is loaded again and new handshakes use it,
connections already up keep theirs. A change that does not load (a half-written pair, a key that
does not match its certificate) is logged once, with the reason, and the old material stays in
force until the files load. `TlsProfiles.update` does the same for a management UPDATE, whose
caller gets the error instead.

Owns: ssl.SSLContext construction and caching, the first bytes of a TLS listener's connections,
starting the handshakes (tlssession.py runs them, in the connection's own task, so a stalled or
garbage handshake costs that connection only; the caller bounds it with the handshake time-out).
Must not touch: AMQP framing after the first header, SASL, routing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
from dataclasses import dataclass
from typing import Any

import trio

from ..amqp.framing import TLS_HEADER
from ..config.models import Connector, Listener, SslProfile
from .tlssession import TlsRefused, TlsSession, TlsStream

__all__ = ["TlsError", "TlsInfo", "TlsProfile", "TlsProfiles", "TlsRefused", "accept", "connect", "session_of",
           "transport_of", "user_of"]  # fmt: skip

log = logging.getLogger(__name__)

TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
TLS_RECORD_HANDSHAKE = 0x16  # the first byte of a ClientHello (direct TLS)
HEADER_SIZE = 8
# Subject fields by uid_format letter (the anchors' letters), and fingerprints by digit.
SUBJECT_FIELDS = {"c": "countryName", "s": "stateOrProvinceName", "l": "localityName", "o": "organizationName",
                  "u": "organizationalUnitName", "n": "commonName"}  # fmt: skip
FINGERPRINTS = {"1": "sha1", "2": "sha256", "5": "sha512"}


class TlsError(ValueError):
    """A profile's files do not load; the message names the profile, the file and the reason."""


@dataclass(frozen=True, slots=True)
class TlsInfo:
    """What a TLS session established: for management and SASL EXTERNAL."""

    protocol: str
    cipher: str
    user: str | None  # from a verified peer certificate (uid_format); None without one


def _files(profile: SslProfile) -> tuple[str, ...]:
    return tuple(f for f in (profile.cert_file, profile.key_file, profile.password_file, profile.ca_file) if f)


def _signature(profile: SslProfile) -> tuple[Any, ...]:
    """What changes when a file is rewritten or replaced (renamed over: a new inode)."""
    out: list[Any] = []
    for path in _files(profile):
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError as exc:
            out.append(exc.errno)
    return tuple(out)


class _Material:
    """The contexts built from one version of a profile's files."""

    def __init__(self, profile: SslProfile) -> None:
        self.profile = profile
        self.signature = _signature(profile)
        self._contexts: dict[tuple[str, bool], ssl.SSLContext] = {}
        password: str | None = None
        if profile.password_file:
            password = _read(profile, "password_file", lambda path: open(path, encoding="utf-8").readline().rstrip("\r\n"))
        self._password = password
        # Built now, so that a file that does not load is reported at once, not at the first peer.
        self.context("server" if profile.cert_file else "client", True)

    def context(self, side: str, verify: bool) -> ssl.SSLContext:
        """The server context (`verify`: the peer must present a certificate) or the client one
        (`verify`: the peer's certificate must name the host we dialled)."""
        key = (side, verify)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = self._build(side, verify, self._password)
        return ctx

    def _build(self, side: str, verify: bool, password: str | None) -> ssl.SSLContext:
        profile = self.profile
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if side == "server" else ssl.PROTOCOL_TLS_CLIENT)
        versions = sorted(TLS_VERSIONS[p] for p in profile.protocols)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        if profile.ciphers:
            _read(profile, "ciphers", ctx.set_ciphers, profile.ciphers)
        if profile.cert_file:
            cert, key = profile.cert_file, profile.key_file
            _read(profile, "cert_file", lambda path: ctx.load_cert_chain(path, key, password), cert)
        if profile.ca_file:
            _read(profile, "ca_file", lambda path: ctx.load_verify_locations(cafile=path), profile.ca_file)
        elif side == "client":
            ctx.load_default_certs()
        if side == "server":
            ctx.num_tickets = 0  # no session resumption: tickets would only cost a write per handshake
            # A listener asks for a client certificate whenever it has a CA to check one with:
            # EXTERNAL needs it; authenticate_peer makes it compulsory.
            ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_OPTIONAL if profile.ca_file else ssl.CERT_NONE
        else:
            ctx.check_hostname = verify
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def _read(profile: SslProfile, field: str, load: Any, value: str | None = None) -> Any:
    path = value if value is not None else getattr(profile, field)
    try:
        return load(path)
    except (OSError, ssl.SSLError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        what = field if field == "ciphers" else f"{field} {path}"
        if field == "cert_file" and profile.key_file:
            what = f"cert_file {path} / key_file {profile.key_file}"
        raise TlsError(f"ssl profile {profile.name!r}: cannot load {what}: {reason}") from None


class TlsProfile:
    """One profile's current material, reloaded when its files change."""

    def __init__(self, profile: SslProfile) -> None:
        self._material = _Material(profile)
        self._refused_signature: tuple[Any, ...] | None = None  # a change already logged as bad
        self.loads = 1  # times material was (re)loaded, for management

    @property
    def config(self) -> SslProfile:
        return self._material.profile

    def current(self) -> _Material:
        """The material for a new handshake: the files' if they changed and load, else the old."""
        material = self._material
        signature = _signature(material.profile)
        if signature != material.signature and signature != self._refused_signature:
            try:
                self.replace(material.profile)
            except TlsError as exc:
                self._refused_signature = signature
                log.error("%s; new handshakes keep the previous certificate", exc)
        return self._material

    def replace(self, profile: SslProfile) -> None:
        """Load `profile` (TlsError if it does not; the old material then stays in force)."""
        self._material = _Material(profile)
        self._refused_signature = None
        self.loads += 1
        log.info("ssl profile %s: certificate material loaded (version %d)", profile.name, self.loads)


class TlsProfiles:
    def __init__(self, profiles: tuple[SslProfile, ...] = ()) -> None:
        """TlsError for the first profile whose files do not load."""
        self._profiles = {profile.name: TlsProfile(profile) for profile in profiles}

    def get(self, name: str | None) -> TlsProfile | None:
        return None if name is None else self._profiles.get(name)

    def update(self, profile: SslProfile) -> None:
        """Add `profile`, or load its new settings (TlsError, and nothing changes, if they do not load)."""
        existing = self._profiles.get(profile.name)
        if existing is None:
            self._profiles[profile.name] = TlsProfile(profile)
        else:
            existing.replace(profile)

    def remove(self, name: str) -> None:
        self._profiles.pop(name, None)

    def loads(self, name: str) -> int:
        profile = self._profiles.get(name)
        return 0 if profile is None else profile.loads


def transport_of(stream: trio.abc.Stream) -> trio.abc.Stream:
    """The TCP stream under a TLS stream (for the peer's address)."""
    while isinstance(stream, (TlsStream, trio.SSLStream)):
        stream = stream.transport_stream
    return stream


async def _read_header(stream: trio.abc.Stream) -> bytes:
    """The first bytes: one if it starts a TLS record, else up to the 8 of a protocol header
    (fewer when they are not "AMQP" already: they are garbage either way)."""
    data = b""
    while len(data) < HEADER_SIZE:
        chunk = bytes(await stream.receive_some(HEADER_SIZE - len(data)))
        if not chunk:
            raise TlsRefused("the peer closed before its protocol header")
        data += chunk
        if data[0] == TLS_RECORD_HANDSHAKE or not b"AMQP".startswith(data[:4]):
            break
    return data


async def accept(stream: trio.abc.Stream, profile: TlsProfile, listener: Listener) -> tuple[trio.abc.Stream, bytes, TlsInfo | None]:
    """Start a connection accepted on a listener with a TLS profile: (the stream to run AMQP
    over, AMQP bytes read already that belong to it, the TLS session or None for plain AMQP).

    Direct TLS (a ClientHello first: security 5.2.1) and the AMQP TLS header (security 5.2:
    we answer with the same header, then the TLS handshake, then the SASL or AMQP header
    inside) are both accepted. Plain AMQP only when the listener does not require TLS; else we
    answer a protocol header with the TLS one (transport 2.2: the header we support) and close.
    TlsRefused when the peer does not get through."""
    first = await _read_header(stream)
    if first[0] != TLS_RECORD_HANDSHAKE:
        if first[:HEADER_SIZE] != TLS_HEADER:
            if not listener.require_ssl:
                return stream, first, None
            if first.startswith(b"AMQP"):
                await stream.send_all(TLS_HEADER)
            raise TlsRefused(f"protocol header {first!r} on a listener that requires TLS")
        await stream.send_all(TLS_HEADER)
        first = first[HEADER_SIZE:]
    material = profile.current()
    session = TlsSession(material.context("server", listener.authenticate_peer), server_side=True, received=first)
    await session.handshake(stream)
    # The peer's first AMQP bytes may have come with its last handshake message.
    initial, ended = session.decrypt(b"")
    if ended:
        raise TlsRefused("the peer ended the TLS session at once")
    return TlsStream(stream, session), initial, _info(session, material.profile)


async def connect(stream: trio.abc.Stream, profile: TlsProfile, connector: Connector) -> tuple[TlsStream, TlsInfo]:
    """Direct TLS on a dialled stream (what Proton and the anchors' connectors do: a listener
    on an AMQPS port expects the ClientHello first). TlsRefused if the handshake fails."""
    material = profile.current()
    ctx = material.context("client", connector.verify_hostname)
    session = TlsSession(ctx, server_side=False, server_hostname=connector.host)
    await session.handshake(stream)
    return TlsStream(stream, session), _info(session, material.profile)


def session_of(stream: trio.abc.Stream) -> TlsInfo | None:
    """The TLS session of a connected stream (None for plain TCP); no user (a server's
    certificate names a host, not a user)."""
    if not isinstance(stream, TlsStream):
        return None
    return TlsInfo(protocol=stream.session.version(), cipher=stream.session.cipher(), user=None)


def _info(session: TlsSession, profile: SslProfile) -> TlsInfo:
    cert, der = session.peer_certificate()
    user = user_of(cert, der, profile.uid_format) if cert else None  # a dict only when verified
    return TlsInfo(protocol=session.version(), cipher=session.cipher(), user=user)


def user_of(cert: dict[str, Any], der: bytes | None, uid_format: str) -> str | None:
    """The user a verified certificate stands for: the `uid_format` fields, joined by ';'
    (the anchors' uidFormat). None if none of them is in the certificate."""
    subject: dict[str, str] = {}
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            subject.setdefault(key, value)
    parts = []
    for letter in uid_format:
        if letter in FINGERPRINTS:
            if der:
                parts.append(hashlib.new(FINGERPRINTS[letter], der).hexdigest())
        elif SUBJECT_FIELDS[letter] in subject:
            parts.append(subject[SUBJECT_FIELDS[letter]])
    return ";".join(parts) or None
