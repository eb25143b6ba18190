"""``rangetable up`` and ``rangetable down``: start a local cluster (in the foreground, or detached)
under :mod:`cli.cluster.supervisor`, and stop it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import click

from cli.options import data_dir_option, emit, json_option


def check_replicas(servers: int, replicas: int) -> None:
    """Refuse fewer partition servers than copies of a range (each replica needs a server of its own) with a
    UsageError naming both flags and the fix; nothing is shrunk silently."""
    if replicas > 1 and servers < replicas:
        raise click.UsageError(
            f"--servers {servers} is fewer than --replicas {replicas}: every replica of a range needs a partition "
            f"server of its own. Start at least {replicas} servers (--servers {replicas}), or keep one copy of "
            f"each range with --replicas 1 (the shared data root, for benchmarks).")


def parse_zones(text: str) -> list[str]:
    """``--zones a,b,c`` as a list (empty: no zones); a clear error for an empty label."""
    if not text.strip():
        return []
    zones = [z.strip() for z in text.split(",")]
    if not all(zones):
        raise click.BadParameter(f"an empty zone label in {text!r}", param_hint="--zones")
    return zones


@click.command("up")
@data_dir_option
@click.option("--servers", default=3, show_default=True, type=click.IntRange(0),
              help="Number of partition servers (at least --replicas).")
@click.option("--coordinators", default=1, show_default=True,
              help="Coordinator processes: one leads (a lock on the data root elects it), the others stand by "
                   "and take over within about a second when it dies or pauses.")
@click.option("--frontends", default=1, show_default=True,
              help="Frontend processes of each kind: native ones on consecutive ports from --native-port, "
                   "HTTP ones all on --http-port (SO_REUSEPORT; the kernel spreads connections).")
@click.option("--native-port", default=10012, show_default=True, help="Native port of the first frontend (0 = any).")
@click.option("--http-port", default=10002, show_default=True,
              help="REST (Azure Table API) port of the HTTP frontends (0 = any).")
@click.option("--detach", is_flag=True, help="Run in the background; stop with `rangetable down`.")
@click.option("--no-restart", is_flag=True, help="Do not restart processes that die.")
@click.option("--sync", is_flag=True, help="fsync every write before acknowledging it.")
@click.option("--lease-s", default=2.0, show_default=True, help="Partition-server lease.")
@click.option("--partition-target", default=0.0, show_default=True,
              help="Entities/s per PartitionKey before ServerBusy, as Azure enforces (2000); 0 = off.")
@click.option("--metrics/--no-metrics", default=True, show_default=True,
              help="Every process serves Prometheus /metrics on a port of its own (cluster.json lists the URLs).")
@click.option("--dashboard/--no-dashboard", default=True, show_default=True,
              help="Serve the web dashboard (servers, ranges, events, key-space heatmap) on --dashboard-port.")
@click.option("--dashboard-port", default=10081, show_default=True,
              help="Port of the web dashboard (0 = any; not 10080, which browsers refuse).")
@click.option("--cert", envvar="RANGETABLE_CERT", default="",
              help="PEM certificate: the REST endpoint speaks HTTPS (with --key) [env RANGETABLE_CERT].")
@click.option("--key", envvar="RANGETABLE_KEY", default="", help="PEM private key of --cert [env RANGETABLE_KEY].")
@click.option("--bind-host", default="127.0.0.1", show_default=True,
              help="Address every process listens on (0.0.0.0: all interfaces).")
@click.option("--advertise-host", default="",
              help="Address the processes are reached at, published in the map and cluster.json "
                   "[default: --bind-host, or 127.0.0.1 when that is 0.0.0.0].")
@click.option("--oauth", type=click.Choice(["basic"]), default=None,
              help="Accept bearer tokens for the storage audience, checked as Azurite's basic level does "
                   "(structure, audience, issuer, expiry; not the signature): for development. Needs --cert.")
@click.option("--meta", envvar="RANGETABLE_META", default="",
              help="etcd://HOST:PORT[/prefix]: coordinators are elected and keep their state in etcd "
                   "(its JSON gateway) instead of lock files and RocksDB on the data root [env RANGETABLE_META].")
@click.option("--replicas", default=3, show_default=True, type=click.IntRange(1, 9),
              help="Copies of each range on distinct partition servers, each in the server's own directory "
                   "(<data-dir>/servers/<id>/); 1 keeps one copy under the shared data root (for benchmarks).")
@click.option("--min-insync", default=2, show_default=True, type=click.IntRange(1, 9),
              help="A replicated range refuses writes (ServerBusy) with fewer in-sync replicas than this.")
@click.option("--rereplicate-after-s", default=10.0, show_default=True, type=click.FloatRange(0),
              help="A replica on a server dead this long is rebuilt on another server (from the primary's checkpoint).")
@click.option("--rebuild-mb-s", default=100.0, show_default=True, type=click.FloatRange(0),
              help="MB/s at which a partition server rebuilds a lost replica from its primary's checkpoint "
                   "(0: no limit).")
@click.option("--zones", default="", metavar="Z1,Z2,...",
              help="Zone labels given to the partition servers round-robin (each one's --zone): the replicas of a "
                   "range go to distinct zones. E.g. --servers 4 --zones a,b,c,c.")
@click.option("--secondary-of", "secondary_of", default="", metavar="CLUSTER",
              help="Follow another cluster (its data dir, or its cluster.json or a connection file of `rangetable "
                   "keys add`): every table of it is copied and kept in step, reads are answered at a consistent "
                   "cut, writes are refused (docs/geo.md). Remembered in the data dir.")
@click.option("--json", "as_json", is_flag=True, help="Print cluster.json once ready.")
def up_cmd(data_dir: str, servers: int, coordinators: int, frontends: int, native_port: int, http_port: int,
           detach: bool, no_restart: bool, sync: bool, lease_s: float, partition_target: float, cert: str, key: str,
           bind_host: str, advertise_host: str, metrics: bool, dashboard: bool, dashboard_port: int,
           oauth: str | None, meta: str, replicas: int, min_insync: int, rereplicate_after_s: float,
           rebuild_mb_s: float, zones: str, secondary_of: str, as_json: bool) -> None:
    """Start a local cluster: coordinators (one leads), partition servers and frontends."""
    from cli.cluster.supervisor import ClusterSpec, supervise
    from cli.cluster_file import down, pid_alive, read_cluster
    from cli.dashboard.ports import browser_refuses
    from frontend.auth.bearer import check_oauth
    from rangetable.kernel.tls import server_context

    check_replicas(servers, replicas)
    zone_list = parse_zones(zones)
    try:
        check_oauth(oauth or "", bool(cert))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if cert or key:
        try:
            server_context(cert, key)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        cert, key = os.path.abspath(cert), os.path.abspath(key)

    if dashboard and browser_refuses(dashboard_port):
        raise click.ClickException(f"browsers refuse to open port {dashboard_port} (ERR_UNSAFE_PORT): "
                                   "pick another --dashboard-port")
    doc = read_cluster(data_dir)
    if doc and pid_alive(doc.get("supervisor_pid", 0)):
        raise click.ClickException(f"a cluster is already running on {data_dir} (pid {doc['supervisor_pid']}); "
                                   "stop it with `rangetable down`")
    if doc:
        down(data_dir)  # leftovers of a supervisor that was killed
    if coordinators < 1:
        raise click.BadParameter("at least 1", param_hint="--coordinators")
    if meta:
        from coordinator.etcd.client import parse_url

        try:
            parse_url(meta)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--meta") from None
    source = keep_source(data_dir, secondary_of)
    spec = ClusterSpec(os.path.abspath(data_dir), servers, frontends, native_port, not no_restart, sync, lease_s,
                       http_port, partition_target, metrics, cert, key, bind_host, advertise_host, dashboard,
                       dashboard_port, coordinators, oauth or "", meta, replicas, min(min_insync, replicas),
                       rereplicate_after_s, rebuild_mb_s, zone_list, source)

    def ready(doc: dict) -> None:
        if as_json:
            click.echo(json.dumps(doc, indent=2))
            return
        copies = (f"{replicas} replicas of each range (writes need {spec.min_insync} in sync)" if replicas > 1
                  else "1 copy of each range (shared data root)")
        where = f" in zones {','.join(zone_list)}" if zone_list else ""
        click.echo(f"rangetable is up: {servers} partition servers{where}, {copies}, {frontends} frontend(s), "
                   f"data in {spec.data_dir}")
        click.echo(f"  native endpoint:  {doc['native']}")
        click.echo(f"  REST endpoint:    {doc['http']}")
        click.echo(f"  {'coordinators:' if coordinators > 1 else 'coordinator:':<18}{doc['coordinator']}")
        if doc.get("dashboard"):
            click.echo(f"  dashboard:        {doc['dashboard']}")
        if source:
            click.echo(f"  follows:          {doc.get('source_native')} (reads only; `rangetable geo status`)")
        click.echo(f"  logs:             {os.path.join(spec.data_dir, 'logs')}")
        click.echo("Stop with Ctrl-C" + ("" if not detach else f" or `rangetable down --data-dir {data_dir}`"))

    if not detach:
        try:
            supervise(spec, echo=click.echo, on_ready=ready)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
        return
    os.makedirs(os.path.join(spec.data_dir, "logs"), exist_ok=True)
    argv = [sys.executable, "-m", "cli.main", "up", "--data-dir", spec.data_dir, "--servers", str(servers),
            "--coordinators", str(coordinators),
            "--frontends", str(frontends), "--native-port", str(native_port), "--lease-s", str(lease_s),
            "--http-port", str(http_port), "--partition-target", str(partition_target),
            "--dashboard-port", str(dashboard_port)]
    argv += ["--no-restart"] * no_restart + ["--sync"] * sync + ["--no-metrics"] * (not metrics)
    argv += ["--cert", cert, "--key", key] if cert else []
    argv += ["--bind-host", bind_host, "--advertise-host", advertise_host]
    argv += ["--no-dashboard"] * (not dashboard)
    argv += ["--oauth", oauth] if oauth else []
    argv += ["--meta", meta] if meta else []
    argv += ["--replicas", str(replicas), "--min-insync", str(min_insync), "--rereplicate-after-s",
             str(rereplicate_after_s), "--rebuild-mb-s", str(rebuild_mb_s)]
    argv += ["--zones", ",".join(zone_list)] if zone_list else []
    with open(os.path.join(spec.data_dir, "logs", "supervisor.log"), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = read_cluster(spec.data_dir)
        if doc and doc.get("supervisor_pid") == proc.pid:
            ready(doc)
            return
        if proc.poll() is not None:
            raise click.ClickException(f"the cluster failed to start; see {spec.data_dir}/logs/supervisor.log")
        time.sleep(0.1)
    proc.terminate()
    raise click.ClickException("the cluster did not become ready within 60 s")


def keep_source(data_dir: str, secondary_of: str) -> str:
    """The source connection file a secondary cluster follows: ``secondary_of`` (a data dir, a cluster.json or a
    connection file) copied into ``data_dir`` as :data:`SOURCE_FILE`; without it, the copy kept by an earlier
    start (a secondary stays one across restarts); "" for a primary cluster."""
    from cli.cluster_file import SOURCE_FILE
    from rangetable.curve import read_cluster_doc
    from rangetable.files import write_json_atomic

    kept = os.path.abspath(os.path.join(data_dir, SOURCE_FILE))
    if not secondary_of:
        return kept if os.path.exists(kept) else ""
    path = os.path.join(secondary_of, "cluster.json") if os.path.isdir(secondary_of) else secondary_of
    try:
        doc = read_cluster_doc(path)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--secondary-of") from None
    if os.path.abspath(doc.get("data_dir") or "") == os.path.abspath(data_dir):
        raise click.BadParameter("a cluster cannot follow itself", param_hint="--secondary-of")
    os.makedirs(data_dir, exist_ok=True)
    keep = {k: doc[k] for k in ("native", "frontends", "coordinator", "pub", "curve", "data_dir") if k in doc}
    write_json_atomic(kept, keep, private=True, indent=2)  # a client key of the source
    return kept


@click.command("down")
@data_dir_option
@json_option
def down_cmd(data_dir: str, as_json: bool) -> None:
    """Stop the local cluster running on a data dir."""
    from cli.cluster_file import down, read_cluster

    if read_cluster(data_dir) is None:
        emit({"data_dir": data_dir, "stopped": False, "killed": 0}, as_json, f"no cluster is running on {data_dir}")
        return
    killed = down(data_dir)
    emit({"data_dir": data_dir, "stopped": True, "killed": len(killed)}, as_json,
         "stopped" + (f" (killed {len(killed)} stragglers)" if killed else ""))
