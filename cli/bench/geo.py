"""``rangetable bench geo``: what a secondary cluster costs and how far behind it stays (issue 35, step 7).

Two clusters as ``rangetable up`` starts them (3 partition servers, 3 replicas each), the second started with
``--secondary-of`` the first, on this one host (they share its cores). On them:

0. **first copy** (with ``preload``): the table is bulk-loaded with ``preload`` entities at the source before
   the secondary starts, and the time from its start to the table's first cut is the copy (a scan of the
   source, put into every range, then the feed replayed), with its rate.
1. **full write rate**: ``threads`` native clients upsert random rows of ``rows`` into a table of the source,
   back to back, for ``minutes``. Four times a second the secondary's coordinator is asked for the table's cut
   (``geo_status``); the **RPO** at that moment is the wall clock less the cut: how much a failover right then
   would lose. A row every ``interval``: the source's writes/s and p50/p99, the secondary's applied records/s
   (the applier's count, reported each second), the RPO's p50/p99/max, and the CPU the secondary's processes
   spent per applied record.
2. **catch-up**: the secondary's HTTP frontends (where the applier runs) are stopped (SIGSTOP) for ``cut_s``
   seconds while the writes go on, as when the link to the source is cut: no page of the feed is read. Then
   they go on, and the time until the RPO is back under :data:`CAUGHT_UP_S` is the catch-up, with its rate.
3. **checked**: the writers stop; once the cut passes their last write, every entity of the source is read and
   compared with the secondary's (values and ETags): any difference is a loss and fails the run.

Steady figures are over the intervals after the first (warm-up).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from cli.bench.aio import ClientThreads
from cli.bench.feed import Rows
from cli.bench.http import server_pids, start_temp_cluster, stop_temp_cluster
from cli.bench.proc import cpu_seconds
from cli.bench.scale import parallel_load
from cli.coordinator_client import call
from cli.geo_cuts import CutSampler
from rangetable import TableClient
from rangetable.edm import TICKS_PER_SECOND, now_ticks
from rangetable.kernel.stats import percentile, percentile_ms

Echo = Callable[[str], None]
TABLE = "geobench"
LOADERS = 2  # bulk-load processes of a preload
CAUGHT_UP_S = 2.0  # the RPO under which the secondary has caught up after the cut
GOAL_KEEP_UP = 0.98  # applied records over the steady intervals against the source's writes


def _seconds(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _row(label: str, dt: float, lat: list[float], errors: int, applied: int, rpo: list[float],
         cpu: float) -> dict[str, Any]:
    """One interval's figures."""
    return {"at": label, "writes_s": round(len(lat) / dt, 1), "errors": errors,
            "p50_ms": percentile_ms(lat, 0.5) if lat else None, "p99_ms": percentile_ms(lat, 0.99) if lat else None,
            "applied_s": round(applied / dt, 1),
            "rpo_p50_s": _seconds(percentile(rpo, 0.5)), "rpo_p99_s": _seconds(percentile(rpo, 0.99)),
            "rpo_max_s": round(max(rpo), 3) if rpo else None,
            "secondary_cpu_us_per_record": round(cpu * 1e6 / applied, 1) if applied else None}


def format_row(r: dict[str, Any]) -> str:
    """A row as the bench prints it."""
    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)
    return (f"{r['at']:>8} {r['writes_s']:>9.1f} {f(r['p50_ms'], '>7.2f')} {f(r['p99_ms'], '>7.2f')} "
            f"{r['applied_s']:>10.1f} {f(r['rpo_p50_s'], '>8.3f')} {f(r['rpo_p99_s'], '>8.3f')} "
            f"{f(r['rpo_max_s'], '>8.3f')} {f(r['secondary_cpu_us_per_record'], '>9.1f')}")


HEADER = (f"{'at':>8} {'writes/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'applied/s':>10} {'RPO p50':>8} {'RPO p99':>8} "
          f"{'RPO max':>8} {'sec µs/rec':>9}")


def _wait(what: str, check: Callable[[], bool], timeout: float) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - t0


def _entities(native: str) -> dict[tuple[str, str], tuple[Any, str]]:
    with TableClient(native, TABLE) as t:
        return {(e["PartitionKey"], e["RowKey"]): (e.get("Seq"), e.metadata["etag"]) for e in t.list_entities()}


def run_geo_bench(*, minutes: float, interval: float, threads: int, rows: int, cut_s: float, preload: int = 0,
                  echo: Echo, keep_on_fail: bool = False) -> dict[str, Any]:
    """The phases of the module docstring; the figures as a dict (``format_table`` prints them)."""
    flags = ["--no-dashboard", "--no-metrics"]
    src_dir, src = start_temp_cluster(extra=flags)
    sec_dir, keep = "", False
    out: dict[str, Any] = {"threads": threads, "rows": rows, "preload": preload, "intervals": []}
    try:
        call(src["coordinator"], {"op": "create_table", "table": TABLE}, timeout=60)
        if preload:
            took = parallel_load(src["native"], TABLE, 0, preload, LOADERS, window=32)
            echo(f"source: {preload:,} entities bulk-loaded in {took:.1f} s")
        t0 = time.monotonic()
        sec_dir, sec = start_temp_cluster(extra=[*flags, "--secondary-of", src_dir])
        sampler = CutSampler(sec["coordinator"], TABLE)
        sampler.start()
        _wait("the table's first cut at the secondary", lambda: sampler.last_rpo is not None, max(60.0, preload / 1000))
        copy_s = time.monotonic() - t0
        counted = time.monotonic() + 5.0  # the applier reports its count with its claim's renewals (every second)
        while preload and sampler.copied < preload and time.monotonic() < counted:
            time.sleep(0.1)
        out["copy"] = {"entities": preload, "seconds": round(copy_s, 2),
                       "per_s": round(preload / copy_s, 1) if preload else None, "copied": sampler.copied}
        echo(f"secondary: started and its first cut of the table {copy_s:.1f} s later"
             + (f" ({preload / copy_s:,.0f} entities/s copied; its first copy put {sampler.copied:,} entities)"
                if preload else ""))
        sec_pids = server_pids(sec, ("partition-server", "http-frontend", "frontend", "coordinator"))
        appliers = server_pids(sec, ("http-frontend",))
        echo(f"source {src_dir}, secondary {sec_dir}: {threads} threads upserting random rows of {rows:,} for "
             f"{minutes:g} min")
        echo(HEADER)
        gen = Rows(rows)
        writers = ClientThreads(src["native"], TABLE, threads, lambda c, rng: c.upsert_entity(gen.next(rng)))
        try:
            sampler.take()
            writers.tally.take()
            applied0, cpu0, t0 = sampler.applied, cpu_seconds(sec_pids), time.monotonic()
            start, k = t0, 0
            while time.monotonic() - start < minutes * 60:
                k += 1
                time.sleep(max(0.0, start + k * interval - time.monotonic()))
                lat, errors = writers.tally.take()
                rpo, applied = sampler.take()
                cpu, now = cpu_seconds(sec_pids), time.monotonic()
                row = _row(f"{(now - start) / 60:.1f}m", now - t0, lat, errors, applied - applied0, rpo, cpu - cpu0)
                out["intervals"].append(row)
                echo(format_row(row))
                applied0, cpu0, t0 = applied, cpu, now
            out["cut"] = _catch_up(appliers, sampler, writers, cut_s, echo)
        finally:
            writers.close()
        last = now_ticks()
        drained = _wait("the secondary's cut past the last write", lambda: sampler.last_cut > last, 120)
        sampler.stop.set()
        theirs, ours = _entities(src["native"]), _entities(sec["native"])
        missing = sorted(k for k in theirs if k not in ours)
        changed = sorted(k for k in theirs if k in ours and ours[k] != theirs[k])
        extra = sorted(k for k in ours if k not in theirs)
        lost = len(missing) + len(changed) + len(extra)
        out["check"] = {"entities": len(theirs), "differences": lost, "missing": len(missing),
                        "changed": len(changed), "extra": len(extra), "drain_s": round(drained, 2),
                        "examples": [[*k, theirs.get(k), ours.get(k)] for k in (missing[:3] + changed[:3] + extra[:3])]}
        echo(f"checked: {len(theirs):,} entities at the source, {lost} differ at the secondary ({len(missing)} "
             f"missing, {len(changed)} changed, {len(extra)} extra; its cut passed the last write {drained:.1f} s "
             f"after the writers stopped)")
        for ex in out["check"]["examples"]:
            echo(f"  e.g. {ex[0]!r} {ex[1]!r}: source {ex[2]!r}, secondary {ex[3]!r}")
        keep = lost > 0 and keep_on_fail
        if keep:
            echo(f"kept for a look: source {src_dir}, secondary {sec_dir} (`rangetable down --data-dir` each)")
        return out
    finally:
        if not keep:
            if sec_dir:
                stop_temp_cluster(sec_dir)
            stop_temp_cluster(src_dir)


def _catch_up(appliers: list[int], sampler: CutSampler, writers: ClientThreads, cut_s: float,
              echo: Echo) -> dict[str, Any]:
    """Stop the appliers for ``cut_s`` under the writes, then time their catch-up."""
    echo(f"the secondary's appliers stopped for {cut_s:g} s (SIGSTOP of its HTTP frontends), writes going on")
    writers.tally.take()
    for pid in appliers:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(cut_s)
    finally:
        for pid in appliers:
            os.kill(pid, signal.SIGCONT)
    behind, cut0 = sampler.last_rpo or 0.0, sampler.last_cut
    lat, _ = writers.tally.take()
    took = _wait("catching up", lambda: sampler.last_rpo is not None and sampler.last_rpo < CAUGHT_UP_S
                 and sampler.last_cut > cut0, max(600.0, 10 * cut_s))
    speed = (sampler.last_cut - cut0) / TICKS_PER_SECOND / max(took, 1e-9)  # seconds of the source's history per second
    writes_s = len(lat) / cut_s
    res = {"cut_s": cut_s, "writes_s_during": round(writes_s, 1), "rpo_at_resume_s": round(behind, 2),
           "catch_up_s": round(took, 2), "history_per_s": round(speed, 2),
           "catch_up_applied_s": round(speed * writes_s, 1)}
    echo(f"resumed {behind:.1f} s behind; caught up (RPO < {CAUGHT_UP_S:g} s) in {took:.1f} s: the cut crossed "
         f"{speed:.2f} s of the source's history a second, about {speed * writes_s:,.0f} records/s (the source "
         f"wrote {writes_s:,.0f}/s)")
    return res


def verdict(res: dict[str, Any]) -> tuple[bool, str]:
    """Whether the secondary kept up at the source's full write rate and lost nothing, and why."""
    steady = res["intervals"][1:] or res["intervals"]
    writes = sum(r["writes_s"] for r in steady)
    applied = sum(r["applied_s"] for r in steady)
    ratio = applied / writes if writes else 0.0
    first, last = steady[0]["rpo_p50_s"] or 0.0, steady[-1]["rpo_p50_s"] or 0.0
    diffs = res["check"]["differences"]
    cp = res.get("copy") or {}
    copied_ok = not cp.get("entities") or cp.get("copied") == cp["entities"]  # none written before the first cut
    ok = ratio >= GOAL_KEEP_UP and last <= first + 1.0 and diffs == 0 and copied_ok
    why = (f"applied {ratio:.1%} of the source's writes over the steady intervals (needs >= {GOAL_KEEP_UP:.0%}), "
           f"RPO p50 {first:.3f} s in the first and {last:.3f} s in the last (may grow 1 s at most), "
           f"{diffs} entities differ at the end (needs 0)")
    if cp.get("entities"):
        why += f", the first copy put {cp.get('copied', 0):,} of the source's {cp['entities']:,} entities (needs all)"
    return ok, why


def format_table(res: dict[str, Any]) -> str:
    """The whole result as text, with the verdict."""
    lines = [HEADER, *(format_row(r) for r in res["intervals"])]
    cp = res.get("copy")
    if cp and cp["entities"]:
        lines.insert(0, f"first copy of {cp['entities']:,} entities: {cp['seconds']} s from the secondary's start "
                        f"to the table's first cut ({cp['per_s']:,.0f} entities/s)")
    c = res.get("cut")
    if c:
        lines.append(f"appliers stopped {c['cut_s']:g} s: resumed {c['rpo_at_resume_s']} s behind, caught up in "
                     f"{c['catch_up_s']} s at {c['catch_up_applied_s']:,.0f} records/s")
    ok, why = verdict(res)
    lines.append(f"{'PASS' if ok else 'FAIL'}  {why}")
    return "\n".join(lines)
