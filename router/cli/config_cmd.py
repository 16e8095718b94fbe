"""`router config check FILE` and `router config schema`.

Owns: validating a file without starting anything (exit 0 and "FILE: ok", or one line per
problem on stderr and exit 2; the users file it names must load; plain-text passwords are warned about) and printing the configuration's JSON Schema.
Must not touch: running routers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..config.loader import ConfigError, load_config, schema
from ..config.users import UsersFileError, check_users_file
from .common import stderr

app = typer.Typer(help="Validate configuration files and print their schema.", no_args_is_help=True)


@app.command()
def check(file: Annotated[Path, typer.Argument(help="YAML configuration file")]) -> None:
    """Validate FILE: print "FILE: ok", or every problem (one line each) and exit 2."""
    try:
        config = load_config(file)
    except ConfigError as exc:
        for problem in exc.problems:
            stderr.print(problem, markup=False)
        raise typer.Exit(2) from None
    try:
        check_users_file(config)
    except UsersFileError as exc:
        stderr.print(f"{file}: users_file: {exc}", markup=False)
        raise typer.Exit(2) from None
    for user in config.users:
        if user.password is not None:  # valid, but a secret in the file: said, not refused
            stderr.print(f"{file}: warning: user {user.username!r} has a plain-text password; "
                         "replace it with the hashes `router users hash` prints", markup=False)  # fmt: skip
    typer.echo(f"{file}: ok")


@app.command("schema")
def print_schema() -> None:
    """Print the configuration's JSON Schema."""
    typer.echo(json.dumps(schema(), indent=2))
