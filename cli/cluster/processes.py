"""Process entry points: ``rangetable coordinator``, ``partition-server``, ``frontend`` and
``http-frontend`` run one process of a cluster in the foreground, configured by flags or environment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cli.options import config_options, setup_logging
from rangetable.config import CoordinatorConfig, FrontendConfig, PartitionServerConfig, load


def _serve(run: Callable[[Any], None], cls: type, kw: dict[str, Any]) -> None:
    """Log to stderr and run a process with its config from flags and environment; a ValueError (no
    CURVE keys; for HTTP frontends also a bad --accounts spec, --http address or certificate) becomes
    a one-line error."""
    setup_logging()
    try:
        run(load(cls, **kw))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("coordinator")
@config_options(CoordinatorConfig)
def coordinator_cmd(**kw: Any) -> None:
    """Run the coordinator (partition manager) in the foreground."""
    from coordinator.server import run

    _serve(run, CoordinatorConfig, kw)


@click.command("partition-server")
@config_options(PartitionServerConfig)
def partition_server_cmd(**kw: Any) -> None:
    """Run a partition server in the foreground."""
    from partition_server.server import run

    _serve(run, PartitionServerConfig, kw)


@click.command("frontend")
@config_options(FrontendConfig)
def frontend_cmd(**kw: Any) -> None:
    """Run a frontend in the foreground."""
    from frontend.native.server import run

    _serve(run, FrontendConfig, kw)


@click.command("http-frontend")
@config_options(FrontendConfig)
def http_frontend_cmd(**kw: Any) -> None:
    """Run an HTTP frontend (Azure Table REST API) in the foreground."""
    from frontend.http.serve import run

    _serve(run, FrontendConfig, kw)
