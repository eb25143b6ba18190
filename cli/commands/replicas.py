"""``rangetable replica move``: move one replica of a range to another partition server (balancing data).

The coordinator adds the new replica (rebuilt from the primary's checkpoint), waits until it is in sync and
then drops the old one (:mod:`coordinator.control.replica_move`); this command waits for that end by polling the map.
"""

from __future__ import annotations

import time

import click

from cli.coordinator_client import call
from cli.options import coordinator_endpoint, coordinator_option, data_dir_option, emit, json_option
from rangetable.errors import TableError

POLL_S = 0.25


@click.group("replica")
def replica_group() -> None:
    """Replicas of ranges (clusters started with --replicas > 1)."""


def _record(endpoint: str, rid: str) -> dict | None:
    st = call(endpoint, {"op": "status"})
    return next((r for r in st["ranges"] if r["id"] == rid), None)


@replica_group.command("move")
@click.argument("range_id")
@click.option("--from", "source", required=True, help="The partition server whose replica moves.")
@click.option("--to", "target", required=True, help="The partition server that gets a replica.")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Seconds the new replica may take to catch up; past them the move is abandoned (the old one stays).")
@click.option("--no-wait", is_flag=True, help="Return once the new replica is being rebuilt.")
@data_dir_option
@coordinator_option
@json_option
def replica_move_cmd(range_id: str, source: str, target: str, timeout_s: float, no_wait: bool, data_dir: str,
                     coordinator: str | None, as_json: bool) -> None:
    """Move RANGE_ID's replica from one server to another: add it on --to (rebuilt from the primary's checkpoint),
    wait until it is in sync, then remove the one on --from (if --from leads, its leadership moves first)."""
    endpoint = coordinator_endpoint(data_dir, coordinator)
    t0 = time.monotonic()
    res = call(endpoint, {"op": "replica_move", "range": range_id, "source": source, "target": target,
                          "timeout_s": timeout_s}, timeout=60)
    if no_wait:
        emit(res, as_json, f"{range_id}: {target} is rebuilding its replica; {source}'s goes once it is in sync")
        return
    deadline = time.monotonic() + timeout_s + 30
    rec = _record(endpoint, range_id)
    while rec is not None and rec.get("move") and time.monotonic() < deadline:
        time.sleep(POLL_S)
        rec = _record(endpoint, range_id)
    if rec is None:
        raise TableError("ResourceNotFound", f"range {range_id} is gone (split or merged meanwhile)")
    if rec.get("move"):
        raise TableError("OperationTimedOut", f"the move of {range_id} is still pending after {timeout_s + 30:g} s")
    if target not in rec["replicas"] or source in rec["replicas"]:
        raise TableError("OperationTimedOut", f"{target} did not catch up with {range_id} in time: the move was "
                         f"abandoned, its replicas are {', '.join(rec['replicas'])}")
    out = {**res, "state": "moved", "seconds": round(time.monotonic() - t0, 2), "primary": rec["primary"],
           "replicas": rec["replicas"], "insync": rec["insync"]}
    lead = f", its primary handed over to {rec['primary']} first" if res.get("transfer") else ""
    emit(out, as_json, f"moved {range_id}'s replica from {source} to {target} in {out['seconds']} s{lead}: "
                       f"replicas {', '.join(rec['replicas'])} (primary {rec['primary']}, "
                       f"{len(rec['insync'])} in sync)")
