"""`router users`: the users file that SASL PLAIN and SCRAM logins are checked against.

    router users add NAME [--file F] [--password-file P]     (asked for twice on a terminal otherwise)
    router users remove NAME [--file F]
    router users list [--file F]
    router users hash [--password-file P]                    hashes for a configuration's inline `users`

Owns: the commands and their messages. The file's format, its atomic write with mode 0600 and
the hashing are router.config.users'. A running router reads the file again when it changes.
Must not touch: a running router (it is never asked; it notices the file).
"""

from __future__ import annotations

import getpass
import os
import sys
from typing import Annotated

import typer

from ..amqp.scram_keys import StoredCredentials
from ..config.users import Credentials, UsersFileError, hash_password, read_users, write_users
from .common import stderr

app = typer.Typer(help="Manage the users file (salted, iterated password hashes; never passwords).", no_args_is_help=True)

File = Annotated[str, typer.Option("--file", "-f", help="the users file (the configuration's users_file)")]
PasswordFile = Annotated[str | None, typer.Option("--password-file", help="read the password from the first line of this file")]
Iterations = Annotated[int, typer.Option("--iterations", min=4096, max=1_000_000, help="PBKDF2 iterations")]
DEFAULT_FILE = "users.yaml"


def _fail(message: str, code: int = 1) -> None:
    stderr.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def _password(password_file: str | None) -> str:
    if password_file is not None:
        try:
            with open(password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"cannot read {password_file}: {getattr(exc, 'strerror', None) or exc}", 2)
    elif sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            _fail("the two passwords differ", 2)
    else:  # a pipe: the first line
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        _fail("the password is empty", 2)
    return password


def _read(path: str, *, missing_ok: bool) -> Credentials:
    if missing_ok and not os.path.exists(path):
        return {}
    try:
        return read_users(path)
    except UsersFileError as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable: _fail exits


def _write(path: str, users: Credentials) -> None:
    try:
        write_users(path, users)
    except OSError as exc:
        _fail(f"cannot write {path}: {exc.strerror or exc}")


@app.command()
def add(
    name: Annotated[str, typer.Argument(help="user name")],
    file: File = DEFAULT_FILE,
    password_file: PasswordFile = None,
    iterations: Iterations = 4096,
) -> None:
    """Add a user, or give an existing one a new password (the file is created if missing)."""
    if not name or len(name.encode("utf-8")) > 255:
        _fail("the user name must be 1 to 255 bytes", 2)
    users = _read(file, missing_ok=True)
    hashes = hash_password(_password(password_file), iterations)
    existed = name in users
    users[name] = {c.mechanism: c for c in map(StoredCredentials.decode, hashes)}
    _write(file, users)
    stderr.print(f"{'changed' if existed else 'added'} user {name!r} in {file}", markup=False)


@app.command()
def remove(name: Annotated[str, typer.Argument(help="user name")], file: File = DEFAULT_FILE) -> None:
    """Remove a user."""
    users = _read(file, missing_ok=False)
    if users.pop(name, None) is None:
        _fail(f"no user {name!r} in {file}")
    _write(file, users)
    stderr.print(f"removed user {name!r} from {file}", markup=False)


@app.command("list")
def list_users(file: File = DEFAULT_FILE) -> None:
    """List the users and the mechanisms each can log in with."""
    for name, entry in sorted(_read(file, missing_ok=False).items()):
        sys.stdout.write(f"{name}\t{' '.join(sorted(entry))}\tPLAIN\n")


@app.command("hash")
def hash_command(password_file: PasswordFile = None, iterations: Iterations = 4096) -> None:
    """Print the hashes of a password, for a configuration's inline `users: [{username, hashes}]`."""
    for text in hash_password(_password(password_file), iterations):
        sys.stdout.write(text + "\n")

