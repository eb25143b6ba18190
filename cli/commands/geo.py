"""``rangetable geo``: a secondary cluster that follows another (issue 35, ``docs/geo.md``).

``geo status`` shows, per table of the secondary, the cut its reads are answered at, how far that is behind the
source (the RPO a failover at this moment would have) and which frontend applies it.
"""

from __future__ import annotations

import click

from cli.coordinator_client import call
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, emit, json_option
from rangetable.edm import ticks_to_iso


@click.group("geo")
def geo_group() -> None:
    """A secondary cluster following another (start one with `rangetable up --secondary-of`)."""


def render(st: dict) -> str:
    """The table ``geo status`` prints."""
    rows = st["tables"]
    if not st.get("secondary", True):
        return "this cluster follows no other (start a secondary with `rangetable up --secondary-of CLUSTER`)"
    if not rows:
        return "no tables yet"
    lines = [f"{'table':<24} {'cut (reads are as of)':<30} {'lag s':>14} {'applied':>9}  applier"]
    for r in rows:
        cut = "- (copying)" if r["cut"] is None else ticks_to_iso(r["cut"])
        lag = "-" if r["lag_s"] is None else f"{r['lag_s']:.3f}" + (" ALARM" if r.get("alarm") else "")
        applied = "-" if r.get("applied") is None else str(r["applied"])
        lines.append(f"{r['table']:<24} {cut:<30} {lag:>14} {applied:>9}  {r.get('applier') or '-'}")
        if r.get("error"):
            lines.append(f"{'':<24} {r['error']}")
    last = st.get("last_sync")
    lines.append(f"LastSyncTime (every table): {'- (bootstrap)' if last is None else ticks_to_iso(last)}; "
                 f"alarm over {st.get('alarm_s', 0):g} s of lag")
    return "\n".join(lines)


@geo_group.command("status")
@data_dir_option
@coordinator_option
@json_option
def geo_status_cmd(data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Each table's cut, lag behind the source and applier, on a secondary cluster."""
    st = call(coordinator_endpoint(data_dir, coordinator), {"op": "geo_status"})
    emit(st, as_json, render(st))
