"""Process entry points: ``rangetable coordinator``, ``partition-server``, ``frontend`` and
``http-frontend`` run one process of a cluster in the foreground, configured by flags or environment."""

from __future__ import annotations

from typing import Any

import click

from cli.options import config_options, setup_logging
from rangetable.config import CoordinatorConfig, FrontendConfig, PartitionServerConfig, load


@click.command("coordinator")
@config_options(CoordinatorConfig)
def coordinator_cmd(**kw: Any) -> None:
    """Run the coordinator (partition manager) in the foreground."""
    from coordinator.server import run

    setup_logging()
    try:
        run(load(CoordinatorConfig, **kw))
    except ValueError as exc:  # no CURVE keys
        raise click.ClickException(str(exc)) from None


@click.command("partition-server")
@config_options(PartitionServerConfig)
def partition_server_cmd(**kw: Any) -> None:
    """Run a partition server in the foreground."""
    from partition_server.server import run

    setup_logging()
    try:
        run(load(PartitionServerConfig, **kw))
    except ValueError as exc:  # no CURVE keys
        raise click.ClickException(str(exc)) from None


@click.command("frontend")
@config_options(FrontendConfig)
def frontend_cmd(**kw: Any) -> None:
    """Run a frontend in the foreground."""
    from frontend.server import run

    setup_logging()
    try:
        run(load(FrontendConfig, **kw))
    except ValueError as exc:  # no CURVE keys
        raise click.ClickException(str(exc)) from None


@click.command("http-frontend")
@config_options(FrontendConfig)
def http_frontend_cmd(**kw: Any) -> None:
    """Run an HTTP frontend (Azure Table REST API) in the foreground."""
    from frontend.http.serve import run

    setup_logging()
    try:
        run(load(FrontendConfig, **kw))
    except ValueError as exc:  # a bad --accounts spec, --http address, certificate or no CURVE keys
        raise click.ClickException(str(exc)) from None
