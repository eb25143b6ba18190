"""``rangetable drill geo``: two clusters in two regions, the link between them cut, a primary lost, failovers
planned and forced, and back (issue 35, ``docs/geo.md``).

Each cluster runs as ``rangetable up`` starts it (3 partition servers, 3 replicas) in a network namespace of its
own, ``region-a`` and ``region-b`` (cli/drills/netns.py); the drill and its clients run in the root namespace,
which reaches both. The link between the regions is cut by a blackhole route in each namespace to the other's
address: each region keeps its clients, neither reaches the other. Region B's cluster starts as a secondary of
A's. The workload (cli/drills/geo_workload.py) writes at whichever cluster takes writes and reads at the
secondary, judging every read against the history. Phases:

1. **steady**: B follows A; the RPO (the clock less B's cut: cli/geo_cuts.py) sampled;
2. **link cut** for ``--cut-s``, then healed: the RPO grows with the cut, and B catches up;
3. **planned failover** to B, and **back** to A (`geo failover --planned`): nothing acknowledged is lost;
4. **primary lost**: the link cut again, A (cut off, its clients still writing) goes on acknowledging; B is
   promoted at its cut (`geo failover --force`); A goes on acknowledging; the link heals, B's coordinator
   fences A by itself, the writer moves to B; `geo rejoin` reads A's **loss ledger**, which must be exactly the
   writes A acknowledged after B's cut, in order, and A follows B again.

Each phase reports its seconds, writes acknowledged and refused, the RPO seen (p50/max of the secondary's) and the
reads judged; the drill ends with every check and PASS or FAIL. ``--sabotage early-ledger`` reads the ledger
before the old primary is fenced — the mistake the fence exists to prevent — and the drill must FAIL, saying
which acknowledged writes the ledger lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import click

from cli import geo_failover
from cli.cluster_file import read_cluster
from cli.commands.security import follower_keys
from cli.drills.geo_workload import Reader, Write, Writer, ledger_check, read_state, state_after, summary
from cli.drills.netns import NetnsUnavailable, Network, ip, unavailable_reason
from cli.geo_cuts import CutSampler, table_row
from cli.options import json_option
from rangetable.client.blocking import TableServiceClient
from rangetable.errors import TableError

TABLE = "geodrill"
SABOTAGE = ("early-ledger",)


class Regions:
    """The two namespaces and the link between them."""

    def __init__(self) -> None:
        self.net = Network(prefix="10.79")
        self.net.create()
        self.a = self.net.add_host("region-a")
        self.b = self.net.add_host("region-b")
        self.cut = False

    def cut_link(self) -> None:
        """Neither region reaches the other (each keeps its clients in the root namespace)."""
        ip("-n", self.a.netns, "route", "add", "blackhole", f"{self.b.address}/32")
        ip("-n", self.b.netns, "route", "add", "blackhole", f"{self.a.address}/32")
        self.cut = True

    def heal_link(self) -> None:
        """The regions reach each other again."""
        ip("-n", self.a.netns, "route", "del", "blackhole", f"{self.b.address}/32", check=False)
        ip("-n", self.b.netns, "route", "del", "blackhole", f"{self.a.address}/32", check=False)
        self.cut = False

    def destroy(self) -> list[str]:
        """Kill what runs in the namespaces and delete them."""
        return self.net.destroy()


def start_cluster(regions: Regions, host: str, data_dir: str, extra: list[str]) -> dict[str, Any]:
    """``rangetable up`` in a region's namespace, listening on its address; its cluster.json."""
    address = regions.net.hosts[host].address
    argv = [sys.executable, "-m", "cli.main", "up", "--detach", "--data-dir", data_dir, "--native-port", "0",
            "--http-port", "0", "--no-dashboard", "--bind-host", address, *extra]
    out = subprocess.run(regions.net.argv(host, argv), capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"could not start the cluster of {host}: {out.stdout}{out.stderr}")
    doc = read_cluster(data_dir)
    if doc is None:
        raise RuntimeError(f"the cluster of {host} wrote no cluster.json")
    return doc


def run_geo_drill(cut_s: float = 10.0, steady_s: float = 5.0, sabotage: str | None = None,
                  echo: Any = None, keep: bool = False) -> dict[str, Any]:
    """Run the drill (see the module docstring); returns the report (``passed`` says it all). Raises
    NetnsUnavailable when namespaces cannot be made here."""
    say = echo or (lambda _m: None)
    reason = unavailable_reason()
    if reason:
        raise NetnsUnavailable(reason)
    root = tempfile.mkdtemp(prefix="rt-drill-geo-")
    regions = Regions()
    dirs = {"a": os.path.join(root, "a"), "b": os.path.join(root, "b")}
    phases: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    writer: Writer | None = None
    reader: Reader | None = None
    lag: CutSampler | None = None
    report: dict[str, Any] = {"table": TABLE, "phases": phases, "checks": checks, "sabotage": sabotage}
    try:
        docs = {"a": start_cluster(regions, "region-a", dirs["a"], [])}
        docs["b"] = start_cluster(regions, "region-b", dirs["b"], ["--secondary-of", dirs["a"]])
        say(f"region-a {regions.a.address}: primary; region-b {regions.b.address}: secondary of it")
        clients = {k: TableServiceClient(d["native"]) for k, d in docs.items()}
        clients["a"].create_table(TABLE)
        writer = Writer(clients, TABLE, "a")
        reader = Reader(clients, TABLE, writer)
        writer.start()
        reader.start()
        _wait(lambda: _cut_of(docs["b"]) is not None, 60, "the secondary's first copy")
        lag = CutSampler(docs["b"]["coordinator"], TABLE)
        lag.start()
        reader.target = "b"

        def phase(name: str, t0: float, acked0: int, refused0: int, **extra: Any) -> dict[str, Any]:
            assert writer is not None and reader is not None and lag is not None
            rpo = summary(lag.take()[0])
            row = {"phase": name, "seconds": round(time.monotonic() - t0, 2), "acked": len(writer.acked) - acked0,
                   "refused": writer.refused - refused0, "rpo_p50_s": rpo["p50"], "rpo_max_s": rpo["max"],
                   "reads": reader.reads, "violations": len(reader.violations), **extra}
            phases.append(row)
            say(format_phase(row))
            return row

        t0, a0, r0 = time.monotonic(), len(writer.acked), writer.refused
        lag.take()
        time.sleep(steady_s)
        phase("steady", t0, a0, r0)

        t0, a0, r0 = time.monotonic(), len(writer.acked), writer.refused
        regions.cut_link()
        time.sleep(cut_s)
        regions.heal_link()
        healed = time.monotonic()
        _wait(lambda: (lag.last_rpo or 99.0) < 1.0, 120, "the secondary catching up")
        phase(f"link cut {cut_s:g} s", t0, a0, r0, catch_up_s=round(time.monotonic() - healed, 2))

        for to, frm in (("b", "a"), ("a", "b")):
            t0, a0, r0 = time.monotonic(), len(writer.acked), writer.refused
            reader.target = None
            res = geo_failover.planned(docs[frm], docs[to], follower_keys(docs[to]), lambda _m: None)
            reader.target, lag.coordinator = frm, docs[frm]["coordinator"]
            _wait(lambda to=to, a0=a0: writer.at == to and len(writer.acked) > a0 + 20, 60,  # type: ignore[misc]
                  "writes at the new primary")
            lost = _lost_at(writer, clients, docs, to, frm)
            checks.append({"check": f"planned failover to {to}: every write acknowledged is there",
                           "ok": not lost, "why": lost})
            phase(f"planned failover to {to}", t0, a0, r0, writes_refused_s=res["writes_refused_s"],
                  lost=0 if not lost else lost)
            time.sleep(steady_s)

        t0, a0, r0 = time.monotonic(), len(writer.acked), writer.refused
        regions.cut_link()  # region A lost to region B; its own clients still reach it
        time.sleep(steady_s)
        reader.target = None
        forced = geo_failover.forced(docs["b"], lambda _m: None, docs["a"])
        cut = int(forced["promoted"][TABLE])
        rpo_at = float(forced["rpo_s"][TABLE])
        time.sleep(steady_s)  # the old primary, isolated, acknowledges on
        early = geo_failover.read_ledger(docs["a"], forced["promoted"]) if sabotage == "early-ledger" else None
        time.sleep(1.0)
        regions.heal_link()  # B's coordinator fences A as soon as it answers
        _wait(lambda: writer.at == "b" and len(writer.acked_by("b")) > 10, 60, "writes at the new primary")
        writer.paused.set()
        t_rejoin = time.monotonic()
        rejoined = geo_failover.rejoin(docs["b"], docs["a"], follower_keys(docs["b"]), 30.0, lambda _m: None)
        _wait(lambda: _cut_of(docs["a"]) is not None, 120, "the old primary's first cut after rejoining")
        rejoin_s = time.monotonic() - t_rejoin
        ledger = early if early is not None else rejoined["ledger"]
        after = [w for w in writer.acked_by("a") if w.ts > cut]
        why = ledger_check([(r["RowKey"], int((r["entity"] or {}).get("n", -1))) for r in ledger], after)
        if why is not None and early is not None:
            why += (" — the ledger was read before the old primary was fenced (--sabotage early-ledger): what it "
                    "acknowledged after the read is in no ledger, which is why rejoin fences first")
        checks.append({"check": "the loss ledger is exactly the writes the old primary acknowledged after the cut",
                       "ok": why is None, "why": why, "ledger": len(ledger), "acknowledged_after_cut": len(after)})
        kept = [w for w in writer.acked if not (w.cluster == "a" and w.ts > cut)]
        want = state_after(kept)
        got = read_state(clients["b"], TABLE)
        checks.append({"check": "the new primary holds the history up to its cut and its own writes since",
                       "ok": got == want, "why": None if got == want else _diff(got, want)})
        phase("primary lost: forced failover to b", t0, a0, r0, rpo_at_promotion_s=round(rpo_at, 3),
              ledger=len(ledger), acknowledged_after_cut=len(after))
        phases.append({"phase": "rejoin of a by the diff", "seconds": round(rejoin_s, 2)})
        say(format_phase(phases[-1]))
        reader.lost = lambda w: w.cluster == "a" and w.ts > cut  # the ledger's: not in the history that survived
        reader.target, lag.coordinator = "a", docs["a"]["coordinator"]
        held = read_state(clients["a"], TABLE)
        checks.append({"check": "the old primary, rejoined, holds what the new primary holds", "ok": held == want,
                       "why": None if held == want else _diff(held, want)})
        time.sleep(1.0)  # a few reads at the rejoined secondary
        checks.append({"check": f"every read at a secondary was a prefix of the history ({reader.reads} reads)",
                       "ok": not reader.violations, "why": "; ".join(reader.violations[:3]) or None,
                       "reads": reader.reads})
    except (RuntimeError, TableError, OSError) as exc:
        checks.append({"check": "the drill ran to its end", "ok": False, "why": f"{type(exc).__name__}: {exc}"})
    finally:
        for t in (writer, reader, lag):
            if t is not None:
                t.stop.set()
        for k in ("b", "a"):
            subprocess.run([sys.executable, "-m", "cli.main", "down", "--data-dir", dirs[k]], capture_output=True,
                           timeout=120)
        problems = regions.destroy()
        if problems:
            checks.append({"check": "the namespaces were removed", "ok": False, "why": "; ".join(problems)})
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    report["passed"] = all(c["ok"] for c in checks) and bool(checks)
    return report


def _cut_of(doc: dict[str, Any]) -> int | None:
    row = table_row(doc["coordinator"], TABLE)
    return None if row is None else row["cut"]


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except TableError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def _lost_at(writer: Writer, clients: dict[str, TableServiceClient], docs: dict[str, Any], primary: str,
             old: str) -> str | None:
    """After a planned failover: rows whose last write the old primary acknowledged are not at the new one."""
    writes = [w for w in writer.acked if w.cluster == old]
    if not writes:
        return None
    last: dict[str, Write] = {}
    for w in writes:
        last[w.row] = w
    got = read_state(clients[primary], TABLE)
    lost = [w for w in last.values() if got.get(w.row, -1) < w.n]
    return None if not lost else f"{len(lost)} rows lack a write the old primary acknowledged, e.g. {lost[:3]}"


def _diff(got: dict[str, int], want: dict[str, int]) -> str:
    rows = sorted(r for r in set(got) | set(want) if got.get(r) != want.get(r))
    return f"{len(rows)} rows differ, e.g. " + ", ".join(f"{r}: {got.get(r)} (want {want.get(r)})" for r in rows[:3])


def format_phase(row: dict[str, Any]) -> str:
    """One phase as a line."""
    extra = {k: v for k, v in row.items() if k not in ("phase", "seconds", "acked", "refused", "rpo_p50_s",
                                                       "rpo_max_s", "reads", "violations")}
    rpo = "" if row.get("rpo_max_s") is None else f" RPO p50 {row['rpo_p50_s']:.3f} s max {row['rpo_max_s']:.3f} s"
    writes = "" if "acked" not in row else f" writes {row['acked']} acked {row['refused']} refused"
    return (f"  {row['phase']:<36} {row['seconds']:6.2f} s{writes}{rpo}"
            + "".join(f" {k} {v}" for k, v in extra.items()))


def format_report(rep: dict[str, Any]) -> str:
    """The phases, the checks and the verdict."""
    lines = [f"geo drill: table {rep['table']}, two clusters of 3 servers and 3 replicas in two namespaces"
             + (f" (sabotage: {rep['sabotage']})" if rep.get("sabotage") else "")]
    lines += [format_phase(p) for p in rep["phases"]]
    for c in rep["checks"]:
        lines.append(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['check']}" + ("" if c["ok"] else f": {c['why']}"))
    lines.append("PASS" if rep["passed"] else "FAIL")
    return "\n".join(lines)


@click.command("geo")
@click.option("--cut-s", default=10.0, show_default=True, help="Seconds the link between the regions is cut.")
@click.option("--steady-s", default=5.0, show_default=True, help="Seconds of each steady stretch.")
@click.option("--sabotage", type=click.Choice(SABOTAGE), default=None,
              help="early-ledger: read the loss ledger before the old primary is fenced (the drill must FAIL).")
@click.option("--keep", is_flag=True, help="Keep the clusters' data dirs (under the temp dir) for a look.")
@json_option
def drill_geo(cut_s: float, steady_s: float, sabotage: str | None, keep: bool, as_json: bool) -> None:
    """Two clusters in two network namespaces under a checked workload: the link cut, a planned failover and
    back, the primary lost and a forced failover with its loss ledger, the old primary rejoining; PASS or
    FAIL."""
    try:
        rep = run_geo_drill(cut_s, steady_s, sabotage, None if as_json else click.echo, keep)
    except NetnsUnavailable as exc:
        raise click.ClickException(f"the geo drill needs network namespaces: {exc}") from None
    click.echo(json.dumps(rep, indent=2) if as_json else format_report(rep))
    if not rep["passed"]:
        raise SystemExit(1)
