"""How the command-line tools log in to a router: the credential and TLS options that `router
stat`, `router manage`, `router send/receive` and `topology` share, and what they become.

    --username NAME  [--password TEXT | --password-file FILE]   (asked for on a terminal otherwise)
    --ssl-ca FILE    [--ssl-cert FILE --ssl-key FILE]

Owns: reading those options into a Login (a password from the option, the first line of a file,
or a prompt; a TLS context), the SASL mechanisms a login tries (SCRAM-SHA-256, SCRAM-SHA-1,
PLAIN with a user; EXTERNAL with a client certificate; ANONYMOUS without either), and
`with_login`, which adds the options to a command and makes its Login the one `mgmt.session`
connects with.
Must not touch: the router's internals; the SASL exchange itself (router.amqp.sasl).
"""

from __future__ import annotations

import functools
import getpass
import inspect
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from .common import stderr

Username = Annotated[str | None, typer.Option("--username", help="log in as this user (SCRAM-SHA-256, SCRAM-SHA-1 or PLAIN, as the router offers; default: ANONYMOUS)")]
Password = Annotated[str | None, typer.Option("--password", help="the user's password (visible to other local users in the process list: prefer --password-file)")]
PasswordFile = Annotated[str | None, typer.Option("--password-file", help="read the password from the first line of this file")]
SslCa = Annotated[str | None, typer.Option("--ssl-ca", help="connect with TLS, trusting the PEM CA certificates in this file")]
SslCert = Annotated[str | None, typer.Option("--ssl-cert", help="TLS client certificate (PEM; SASL EXTERNAL when the router offers it)")]
SslKey = Annotated[str | None, typer.Option("--ssl-key", help="the client certificate's private key (PEM)")]

PASSWORD_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN")


@dataclass(frozen=True, slots=True)
class Login:
    username: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None
    certificate: bool = False

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """With a user name, only the password mechanisms: a tool told to log in as someone
        must not carry on anonymously. Over TLS EXTERNAL comes first without one (a router
        offers it only to a client whose certificate it verified)."""
        if self.username is not None:
            return PASSWORD_MECHANISMS
        return ("EXTERNAL", "ANONYMOUS") if self.ssl_context is not None else ("ANONYMOUS",)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for router.net.client.connect."""
        return {"username": self.username, "password": self.password, "ssl_context": self.ssl_context,
                "mechanisms": self.mechanisms}  # fmt: skip


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The client's TLS context from the options (None: plain TCP)."""
    if ca is None and cert is None:
        if key is not None:
            raise typer.BadParameter("--ssl-key needs --ssl-cert", param_hint="--ssl-key")
        return None
    try:
        context = ssl.create_default_context(cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise typer.BadParameter(f"cannot load the TLS files: {getattr(exc, 'strerror', None) or exc}", param_hint="--ssl-*") from None
    return context


def read_password(username: str | None, password: str | None, password_file: str | None) -> str | None:
    if password is not None and password_file is not None:
        raise typer.BadParameter("give --password or --password-file, not both", param_hint="--password")
    if username is None:
        if password is not None or password_file is not None:
            raise typer.BadParameter("a password needs --username", param_hint="--username")
        return None
    if password is not None:
        return password
    if password_file is not None:
        try:
            with open(password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise typer.BadParameter(f"cannot read {password_file}: {reason}", param_hint="--password-file") from None
    if sys.stdin.isatty():
        return getpass.getpass(f"password for {username}: ")
    raise typer.BadParameter("give --password or --password-file (no terminal to ask on)", param_hint="--username")


def make_login(username: str | None = None, password: str | None = None, password_file: str | None = None,
               ssl_ca: str | None = None, ssl_cert: str | None = None, ssl_key: str | None = None) -> Login:  # fmt: skip
    secret = read_password(username, password, password_file)
    return Login(username, secret, tls_context(ssl_ca, ssl_cert, ssl_key), ssl_cert is not None)


_current = Login()


def current() -> Login:
    """The Login of the command that is running (with_login sets it)."""
    return _current


_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("username", Username), ("password", Password), ("password_file", PasswordFile),
    ("ssl_ca", SslCa), ("ssl_cert", SslCert), ("ssl_key", SslKey),
)  # fmt: skip
F = TypeVar("F", bound=Callable[..., Any])


def with_login(fn: F) -> F:
    """Add the login options to the typer command `fn`; `current()` is their Login while it runs."""
    signature = inspect.signature(fn, eval_str=True)  # typer reads the annotations as objects
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind) for name, kind in _OPTIONS]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        global _current
        values = {name: kwargs.pop(name, None) for name, _ in _OPTIONS}
        try:
            _current = make_login(**values)
        except typer.BadParameter as exc:
            stderr.print(f"error: {exc.param_hint}: {exc.message}", markup=False)
            raise typer.Exit(2) from None
        try:
            return fn(*args, **kwargs)
        finally:
            _current = Login()

    command.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])  # type: ignore[attr-defined]
    command.__annotations__ = {**fn.__annotations__, **dict(_OPTIONS)}
    return command  # type: ignore[return-value]
