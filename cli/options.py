"""Options and helpers shared by the command modules: ``--data-dir``, ``--json``, ``--endpoint``,
``--coordinator``, one option per config field, logging, the group that prints a TableError as one
line, and the lookup of a local cluster's endpoints in its ``cluster.json``.

Command modules import this, never :mod:`cli.main`; :mod:`cli.main` registers their commands.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import click

from rangetable.config import env_name
from rangetable.data_dir import DATA_DIR_ENV, FALLBACK_DATA_DIR, default_data_dir
from rangetable.errors import TableError

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
data_dir_option = click.option("--data-dir", default=default_data_dir, show_default=FALLBACK_DATA_DIR,
                               help=f"Data root [env {DATA_DIR_ENV}].")
endpoint_option = click.option("--endpoint", default=None, help="Native endpoint (default: from cluster.json).")
rate_option = click.option("--rate", type=float, default=None,
                           help="Operations per second of the whole workload (default: every client thread as fast "
                                "as the cluster answers).")
coordinator_option = click.option("--coordinator", default=None, help="Coordinator endpoint (default: cluster.json).")


def config_options(cls: type) -> Callable:
    """Decorate a command with one ``--field-name`` option per config field."""

    def deco(fn: Callable) -> Callable:
        for f in reversed(dataclasses.fields(cls)):
            flag = "--" + f.name.replace("_", "-")
            help_ = f"[env {env_name(cls, f.name)}; default {f.default!r}]"
            if isinstance(f.default, bool):
                fn = click.option(flag, f.name, is_flag=True, default=None, help=help_)(fn)
            else:
                fn = click.option(flag, f.name, type=type(f.default), default=None, help=help_)(fn)
        return fn

    return deco


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr with timestamps, at INFO (DEBUG when ``verbose``)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


class TableErrorGroup(click.Group):
    """A click group that prints TableErrors as one line with Azure's error code."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a TableError becomes a one-line ClickException."""
        try:
            return super().invoke(ctx)
        except TableError as exc:
            raise click.ClickException(f"{exc.error_code}: {exc.message}") from None


def cluster_doc(data_dir: str, instead: str | None = "--endpoint") -> dict:
    """The ``cluster.json`` of the local cluster on ``data_dir``; a ClickException when there is none,
    naming the flag the command takes ``instead`` (if any)."""
    from cli.cluster_file import read_cluster

    doc = read_cluster(data_dir)
    if doc is None:
        raise click.ClickException(f"no cluster.json in {data_dir}: start one with `rangetable up`"
                                   + (f" or pass {instead}" if instead else ""))
    return doc


def native_endpoint(data_dir: str, endpoint: str | None) -> str:
    """The native endpoint: ``--endpoint`` when given (remembering the cluster's CURVE keys), else cluster.json's."""
    if endpoint:
        from cli.cluster_file import read_cluster

        read_cluster(data_dir)  # remembers its CURVE keys, if the endpoint is one of that cluster's
        return endpoint
    return cluster_doc(data_dir)["native"]


def coordinator_endpoint(data_dir: str, endpoint: str | None) -> str:
    """The coordinator endpoint: the one given, or cluster.json's."""
    return native_endpoint(data_dir, endpoint) if endpoint else cluster_doc(data_dir, "--coordinator")["coordinator"]


def emit(obj: Any, as_json: bool, text: str) -> None:
    """Print ``obj`` as indented JSON with ``--json``, else ``text``."""
    click.echo(json.dumps(obj, indent=2, default=str) if as_json else text)
