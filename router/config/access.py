"""Who may log in and who may manage the router, as configured: users and their password hashes,
the slowing of repeated failed logins, and the management section's operators, readers and
groups. Re-exported by router/config/models.py, whose RouterConfig holds them.

Owns: these models' fields, defaults and rules. Must not touch: the users file and credential
store (users.py), the SASL exchange (router.amqp.sasl / scram), checking management rights
(router/management/authz.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ..amqp.scram_keys import StoredCredentials
from .base import Model


class User(Model):
    """A user for SASL PLAIN and SCRAM: `hashes` as `router users hash` prints them (salted,
    iterated; never the password). A plain-text `password` is still read, with a warning at
    start: the router hashes it in memory, but the file holds a secret it should not."""

    username: str = Field(min_length=1, max_length=255)
    hashes: tuple[str, ...] = Field(
        default=(), description="SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY (and/or SCRAM-SHA-1$...), base64"
    )
    password: str | None = Field(default=None, min_length=1, description="deprecated: plain text; use hashes or users_file")

    @model_validator(mode="after")
    def _one_secret(self) -> User:
        if (self.password is None) == (not self.hashes):
            raise ValueError(f"user {self.username!r}: give hashes (or, deprecated, password), not both")
        for text in self.hashes:
            StoredCredentials.decode(text)  # raises ValueError naming what is wrong
        return self


class FailedLogins(Model):
    """Slowing down repeated failed SASL logins from one host: the first failure is answered at
    once, each further one within `forget_after_s` waits twice as long (from `initial_delay_s`
    up to `max_delay_s`) before the outcome; a success forgets the host. Only the failing
    connection waits."""

    initial_delay_s: float = Field(default=0.25, gt=0, description="delay of the second failure in a row")
    max_delay_s: float = Field(default=4.0, gt=0, le=60, description="longest delay before a failed login's outcome")
    forget_after_s: float = Field(default=60.0, gt=0, description="a host that has not failed for this long starts afresh")
    max_hosts: int = Field(default=4096, ge=1, le=1_000_000, description="hosts remembered (the oldest go first)")
    # A SASL PLAIN check derives PBKDF2 from the offered password (about a millisecond of the
    # event loop each): router-wide, at most this many per second; past it a login is refused at
    # once with sys-temp (the client tries again). A password verified before is not derived again.
    max_password_checks_per_s: float = Field(
        default=50.0, gt=0, le=100_000, description="PLAIN password derivations per second, router-wide"
    )
    password_checks_burst: int = Field(
        default=50, ge=1, le=100_000, description="derivations allowed at once before the per-second rate applies"
    )

    @model_validator(mode="after")
    def _ordered(self) -> FailedLogins:
        if self.max_delay_s < self.initial_delay_s:
            raise ValueError("max_delay_s must be >= initial_delay_s")
        return self


Principals = tuple[Annotated[str, Field(min_length=1, max_length=255)], ...]


class Management(Model):
    """Who may use management (the AMQP node, WD14 over AMQP and the HTTP listeners).

    `operators` and a list of `readers` name users or groups (of `groups`). Operators may
    read and write (CREATE, UPDATE, DELETE; HTTP POST, PUT, DELETE); readers may read.
    `loopback_anonymous_operator`: a connection that did not log in as a user may write when it
    came through a listener bound only to a loopback address (127.0.0.0/8, ::1, localhost), so
    that a fresh `router run` can be managed from its own host. When not set it is true while no
    operators are configured and false once some are: naming operators turns the check on
    everywhere."""

    operators: Principals = Field(default=(), description="users or groups that may change the router")
    readers: Literal["open", "authenticated"] | Principals = Field(
        default="open", description="open: anyone who reaches management; authenticated: any logged-in user; or users/groups"
    )
    groups: dict[Annotated[str, Field(min_length=1, max_length=255)], Principals] = Field(
        default_factory=dict, description="group name -> its users"
    )
    loopback_anonymous_operator: bool | None = Field(
        default=None,
        description="anonymous writes through a loopback-only listener; when not set: allowed until operators are named",
    )
