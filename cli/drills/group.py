"""The ``rangetable drill`` click group; :mod:`cli.main` adds every drill command to it."""

from __future__ import annotations

import click


@click.group("drill")
def drill_group() -> None:
    """Failure drills against a running cluster."""
