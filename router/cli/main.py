"""The `router` command: run routers, check their configuration, and small AMQP client tools.

    router run [-c FILE]               a router (the embedded default without -c)
    router config check FILE | schema  validate a file / print the JSON Schema
    router send ADDRESS ...            send messages and report their outcomes
    router receive ADDRESS ...         receive (and accept) messages
    router collect --connect HOST:PORT --dir DIR   write the mesh's flow records to files
    router stat [VIEW]                 a running router's state as tables (like qdstat)
    router manage VERB ...             query and change its entities, JSON in and out (like qdmanage)
    router users add|remove|list|hash  the users file of salted password hashes
    router demo                        a router with a sender and a receiver, in one process
    router k8s site NAME --peer ...    a Kubernetes overlay for a new site (deploy/k8s)

Each command lives in its own module; only `run` loads the routing core.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .. import __version__
from . import clients, collect, config_cmd, k8s, manage, run, stat, users

app = typer.Typer(
    name="router",
    help="An AMQP 1.0 message router mesh.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # errors are reported as one line by each command
)
app.command()(run.run)
app.add_typer(config_cmd.app, name="config")
app.command()(clients.send)
app.command()(clients.receive)
app.command()(collect.collect)
app.command()(stat.stat)
app.add_typer(manage.app, name="manage")
app.add_typer(users.app, name="users")
app.add_typer(k8s.app, name="k8s")


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


@app.command()
def demo(
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="messages per phase")] = 200,
) -> None:
    """Start a mesh of three routers (processes), pass traffic, kill one and show it move."""
    from ..demo import demo as run_demo

    raise typer.Exit(run_demo(count))


if __name__ == "__main__":
    app()
