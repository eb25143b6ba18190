"""``rangetable`` — the command line: run processes, start a local cluster, use and administer it,
bench it and drill it.

This is the one module that registers commands: every command module defines plain click commands
and groups (importing only :mod:`cli.options` for shared options), and ``main`` names them here. A command's
module is imported when the command runs (click's lazy group), so a partition server or ``rangetable entity
get`` does not import the benches and drills: each process of a local cluster starts in about half the CPU.
"""

from __future__ import annotations

import importlib

import click

from cli.options import TableErrorGroup

COMMANDS: dict[str, str] = {
    # processes and the local cluster
    "coordinator": "cli.cluster.processes:coordinator_cmd",
    "partition-server": "cli.cluster.processes:partition_server_cmd",
    "frontend": "cli.cluster.processes:frontend_cmd",
    "http-frontend": "cli.cluster.processes:http_frontend_cmd",
    "up": "cli.cluster.local_cluster:up_cmd",
    "down": "cli.cluster.local_cluster:down_cmd",
    "dashboard": "cli.dashboard.command:dashboard_cmd",
    # tables and entities
    "table": "cli.commands.tables:table_group",
    "entity": "cli.commands.tables:entity_group",
    "query": "cli.commands.tables:query_cmd",
    "explain": "cli.commands.tables:explain_cmd",
    "changes": "cli.commands.changes:changes_cmd",
    "export": "cli.commands.transfer:export_cmd",
    "import": "cli.commands.transfer:import_cmd",
    # administration
    "ranges": "cli.commands.map_admin:ranges_cmd",
    "servers": "cli.commands.map_admin:servers_cmd",
    "status": "cli.commands.map_admin:status_cmd",
    "events": "cli.commands.map_admin:events_cmd",
    "split": "cli.commands.map_admin:split_cmd",
    "move": "cli.commands.map_admin:move_cmd",
    "merge": "cli.commands.map_admin:merge_cmd",
    "replica": "cli.commands.replicas:replica_group",
    "geo": "cli.commands.geo:geo_group",
    "balancer": "cli.commands.balance:balancer_cmd",
    "top": "cli.commands.balance:top_cmd",
    "backup": "cli.commands.backup:backup_cmd",
    "restore": "cli.commands.backup:restore_cmd",
    "metrics": "cli.commands.observe:metrics_cmd",
    "cert": "cli.commands.security:cert_group",
    "keys": "cli.commands.security:keys_group",
    # tools
    "bench": "cli.bench.commands:bench_group",
    "stress": "cli.bench.stress:stress_cmd",
    "drill": "cli.drills.group:drill_group",
    "verify": "cli.drills.verify:verify_group",
}
"""Each top-level command's name and where it is defined (``module:attribute``), in the order help lists them."""

SUBCOMMANDS: dict[str, list[str]] = {
    "bench": ["cli.bench.commands:" + f for f in (
        "bench_store", "bench_http", "bench_soak", "bench_scale", "bench_frontends", "bench_control_plane",
        "bench_takeover", "bench_ttl", "bench_capacity", "bench_aio", "bench_stock", "bench_point_or",
        "bench_replicas", "bench_feed", "bench_index", "bench_host", "bench_geo", "bench_geo_rejoin")],
    "drill": ["cli.drills.failover:drill_failover", "cli.drills.chaos:drill_chaos",
              "cli.drills.rebalance:drill_rebalance", "cli.drills.netsplit:drill_netsplit",
              "cli.drills.disk_loss:drill_disk_loss", "cli.drills.geo:drill_geo"],
}
"""The commands of the groups whose modules do not add them themselves (benches and drills)."""


def load(path: str) -> click.Command:
    """The click command at ``module:attribute``."""
    module, _, attr = path.partition(":")
    cmd = getattr(importlib.import_module(module), attr)
    assert isinstance(cmd, click.Command), path
    return cmd


class LazyGroup(TableErrorGroup):
    """The top-level group: imports a command's module only when that command is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, in :data:`COMMANDS`' order."""
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name`` (its module imported now), or None."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            cmd = load(COMMANDS[cmd_name])
            if isinstance(cmd, click.Group):
                for sub in SUBCOMMANDS.get(cmd_name, []):
                    cmd.add_command(load(sub))
            self.add_command(cmd, cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """rangetable: a sharded table store with the semantics of Azure Table Storage."""


if __name__ == "__main__":
    main()
