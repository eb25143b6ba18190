"""``rangetable dashboard``: serve the web dashboard of a running cluster.

``rangetable up`` runs it as one more supervised process (``--dashboard-port``); run it alone with
``rangetable dashboard --coordinator tcp://HOST:PORT`` (or ``--data-dir`` of a local cluster).
"""

from __future__ import annotations

import functools
import signal
import threading
from typing import Any

import click

from cli.options import config_options, setup_logging
from rangetable.config import DashboardConfig, load


def split_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); raises click.BadParameter."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, not {text!r}", param_hint="--dashboard")
    return host, int(port)


@click.command("dashboard")
@config_options(DashboardConfig)
def dashboard_cmd(**kw: Any) -> None:
    """Serve the web dashboard (servers, ranges, events, key-space heatmap) of a running cluster."""
    from cli.cluster_file import read_cluster
    from cli.coordinator_client import Connections, call
    from cli.dashboard.ports import browser_refuses
    from cli.dashboard.server import Dashboard
    from cli.dashboard.state import Watch, collect
    from rangetable import curve
    from rangetable.kernel.metrics import serve_metrics

    cfg = load(DashboardConfig, **kw)
    coordinator = cfg.coordinator
    if not coordinator:
        doc = read_cluster(cfg.data_dir)  # also remembers the cluster's CURVE keys
        if doc is None:
            raise click.ClickException(f"no cluster.json in {cfg.data_dir}: give --coordinator tcp://HOST:PORT")
        coordinator = doc["coordinator"]
    if cfg.interval_s <= 0 or cfg.history_s < cfg.interval_s:
        raise click.ClickException("--interval-s must be > 0 and --history-s at least --interval-s")
    host, port = split_host_port(cfg.dashboard)
    if browser_refuses(port):
        raise click.ClickException(f"browsers refuse to open port {port} (ERR_UNSAFE_PORT): pick another")
    if cfg.coordinator:  # the coordinator is asked with the admin key of the keys directory
        try:
            ring = curve.KeyRing.load(curve.keys_dir(cfg.data_dir, cfg.keys_dir), own="admin")
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        for ep in coordinator.split(","):
            curve.remember(ep, ring.public("coordinator"), ring.pair("admin"))
    setup_logging()
    # the poller thread asks over kept sockets (cli/coordinator_client.py, Connections)
    watch = Watch(coordinator, functools.partial(call, conns=Connections()), cfg.interval_s, cfg.history_s, cfg.lease_s)
    try:
        dash = Dashboard(watch, host, port, cfg.history_s)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {cfg.dashboard}: {exc}") from None

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=dash.shutdown, daemon=True).start()  # shutdown() waits for serve_forever

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    click.echo(f"dashboard on {dash.url} (coordinator {coordinator}, every {cfg.interval_s:g} s, "
               f"{watch.history.columns.maxlen} columns of history)", err=True)
    if cfg.metrics:
        click.echo(f"metrics on {serve_metrics(cfg.metrics, lambda: collect(watch))}", err=True)
    dash.serve_forever()
