"""``rangetable`` — the command line: run processes, start a local cluster, use and administer it,
bench it and drill it.

This is the one module that registers commands: every command module defines plain click commands
and groups (importing only :mod:`cli.options` for shared options), and ``main`` adds them here.
"""

from __future__ import annotations

import click

from cli import (
    backup,
    balance,
    cluster_commands,
    local_cluster,
    observe,
    processes,
    replica_commands,
    security,
    tables,
    transfer,
)
from cli.bench import commands as bench
from cli.bench.stress import stress_cmd
from cli.dashboard.command import dashboard_cmd
from cli.drills import chaos, disk_loss, failover, netsplit, rebalance
from cli.drills.group import drill_group
from cli.drills.verify import verify_group
from cli.options import TableErrorGroup


@click.group(cls=TableErrorGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """rangetable: a sharded table store with the semantics of Azure Table Storage."""


for command in (
    # processes and the local cluster
    processes.coordinator_cmd, processes.partition_server_cmd, processes.frontend_cmd, processes.http_frontend_cmd,
    local_cluster.up_cmd, local_cluster.down_cmd, dashboard_cmd,
    # tables and entities
    tables.table_group, tables.entity_group, tables.query_cmd, transfer.export_cmd, transfer.import_cmd,
    # administration
    cluster_commands.ranges_cmd, cluster_commands.servers_cmd, cluster_commands.status_cmd,
    cluster_commands.events_cmd, cluster_commands.split_cmd, cluster_commands.move_cmd, cluster_commands.merge_cmd,
    replica_commands.replica_group,
    balance.balancer_cmd, balance.top_cmd, backup.backup_cmd, backup.restore_cmd, observe.metrics_cmd,
    security.cert_group, security.keys_group,
    # tools
    bench.bench_group, stress_cmd, drill_group, verify_group,
):
    main.add_command(command)

for command in (bench.bench_store, bench.bench_http, bench.bench_soak, bench.bench_scale, bench.bench_frontends,
                bench.bench_control_plane, bench.bench_takeover, bench.bench_ttl, bench.bench_capacity,
                bench.bench_aio, bench.bench_stock, bench.bench_point_or, bench.bench_replicas):
    bench.bench_group.add_command(command)

for command in (failover.drill_failover, chaos.drill_chaos, rebalance.drill_rebalance, netsplit.drill_netsplit,
                disk_loss.drill_disk_loss):
    drill_group.add_command(command)

if __name__ == "__main__":
    main()
