"""The `router` command: run and inspect routers, and small AMQP client tools."""

from __future__ import annotations

import typer
from rich.console import Console

from .. import __version__

app = typer.Typer(
    name="router",
    help="An AMQP 1.0 message router mesh.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


@app.command()
def demo(count: int = typer.Option(2000, "-n", "--count", help="messages in the throughput run")) -> None:
    """Exchange messages between our client and an endpoint on our engine over loopback."""
    import trio

    from ..demo import run_demo

    raise typer.Exit(trio.run(run_demo, count, Console()))


if __name__ == "__main__":
    app()
