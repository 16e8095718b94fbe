"""`router config check FILE` and `router config schema`.

Owns: validating a file without starting anything (exit 0 and "FILE: ok", or one line per
problem on stderr and exit 2) and printing the configuration's JSON Schema.
Must not touch: running routers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..config.loader import ConfigError, load_config, schema
from .common import stderr

app = typer.Typer(help="Validate configuration files and print their schema.", no_args_is_help=True)


@app.command()
def check(file: Annotated[Path, typer.Argument(help="YAML configuration file")]) -> None:
    """Validate FILE: print "FILE: ok", or every problem (one line each) and exit 2."""
    try:
        load_config(file)
    except ConfigError as exc:
        for problem in exc.problems:
            stderr.print(problem, markup=False)
        raise typer.Exit(2) from None
    typer.echo(f"{file}: ok")


@app.command("schema")
def print_schema() -> None:
    """Print the configuration's JSON Schema."""
    typer.echo(json.dumps(schema(), indent=2))
