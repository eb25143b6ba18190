"""``rangetable bench takeover``: how fast a standby coordinator renews leases for a large map.

Seeds a meta store with ``--ranges`` ranges on ``--servers`` servers (as ``bench control-plane``
does), starts two real coordinators on it, heartbeats both every 50 ms as one partition server would,
lets the standby follow the leader's meta store for ``follow_s`` (``coordinator/standby/warm.py``),
pauses the leader (SIGSTOP) and reports: when the first lease of the new term came, and how long the
new leader took to copy the paused leader's meta store and load the map (which it does after it
started granting leases, see ``coordinator/takeover.py``), and whether it took its warm copy.
With ``mode="kill"`` the leader is killed instead, and the new leader reopens its store.

With ``meta="etcd"`` the bench starts a real etcd of its own (``cli/bench/etcd_server.py``, ephemeral
ports, a temporary directory), seeds the same keys under ``/bench/meta/`` and runs both coordinators
with ``--meta etcd://…/bench``: the standby follows etcd's watch (``coordinator/standby/etcd_follower.py``),
and the bench waits until it has read its snapshot before the follow time starts. ``cold=True`` runs
both with ``--cold-takeover`` (no warm copy), the figure to compare with.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import msgpack
import zmq

from cli.bench.control_plane import range_layout, seed_meta, seed_puts
from cli.bench.etcd_server import LocalEtcd
from cli.cluster.port_reservation import PortReservation
from cli.coordinator_client import call
from coordinator.etcd.client import EtcdClient, put_op
from rangetable import curve, protocol
from rangetable.errors import TableError

HB_EVERY_S = 0.05
SEED_BATCH = 2000  # puts per etcd transaction while seeding (within --max-txn-ops and --max-request-bytes)


def _leases(socks: list[zmq.Socket], body: dict, seconds: float) -> list[tuple[float, int, int]]:
    """Heartbeat every socket every HB_EVERY_S for ``seconds``; returns (time, socket index, term)
    of every lease granted."""
    out = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        for s in socks:
            s.send_multipart([b"%d" % n, protocol.pack(body)])
        t = time.monotonic()
        while time.monotonic() - t < HB_EVERY_S:
            for i, s in enumerate(socks):
                while s.poll(0):
                    frames = s.recv_multipart()
                    try:
                        out.append((time.monotonic(), i, protocol.result(frames[1])["term"]))
                    except TableError:
                        pass  # NotLeader from the standby
            time.sleep(0.005)
    return out


def _seed_etcd(base: str, prefix: str, sids: list[str], recs: list[dict]) -> float:
    """The keys :func:`seed_meta` writes, under ``<prefix>/meta/`` in etcd; returns the seconds it took."""
    t0 = time.monotonic()
    client = EtcdClient(base, timeout_s=60)
    root = f"{prefix}/meta/".encode()
    puts = list(seed_puts(sids, recs).items())
    for i in range(0, len(puts), SEED_BATCH):
        client.txn([], [put_op(root + k, msgpack.packb(v, use_bin_type=True)) for k, v in puts[i:i + SEED_BATCH]])
    return time.monotonic() - t0


def _standby_ready(log_path: str, within_s: float) -> float | None:
    """Wait until the standby's log says it read its snapshot from etcd; the seconds waited (None: never)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        with open(log_path, errors="replace") as f:
            if "standby read" in f.read():
                return time.monotonic() - t0
        time.sleep(0.1)
    return None


def run_takeover_bench(servers: int = 1000, ranges: int = 100_000, echo: Any = print,
                       follow_s: float = 2.0, mode: str = "pause", meta: str = "rocksdb", cold: bool = False) -> dict:
    """Run the measurement; returns its figures."""
    work = tempfile.mkdtemp(prefix="rt-takeover-")
    sids, recs = range_layout(servers, ranges)
    etcd: LocalEtcd | None = None
    extra: list[str] = ["--cold-takeover"] if cold else []
    seed_s = None
    load_before = os.getloadavg()[0]
    if meta == "etcd":
        os.makedirs(os.path.join(work, "etcd"))
        etcd = LocalEtcd(os.path.join(work, "etcd")).start()
        try:
            seed_s = _seed_etcd(etcd.base, "/bench", sids, recs)
        except BaseException:
            etcd.stop()  # the try below that stops it has not begun
            raise
        echo(f"etcd on {etcd.base}: seeded {len(recs)} ranges in {seed_s:.1f} s")
        extra += ["--meta", etcd.url + "/bench"]
    else:
        seed_meta(work, sids, recs)
    standby_read_s = None
    ports = PortReservation()
    eps = [f"tcp://127.0.0.1:{ports.take()}" for _ in range(4)]
    ports.release()
    ring = curve.KeyRing.create(curve.keys_dir(work))  # CURVE keys, as `rangetable up` makes them
    for e in eps[:2]:
        curve.remember(e, ring.public("coordinator"), ring.pair("admin"))
    procs = []
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    socks: list[zmq.Socket] = []
    try:
        for i in range(2):
            with open(os.path.join(work, f"coordinator-{i + 1}.log"), "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "cli.main", "coordinator", "--data-dir", work, "--bind", eps[i],
                     "--pub-bind", eps[i + 2], *extra], stdout=log, stderr=subprocess.STDOUT))
            if i == 0:
                time.sleep(0.3)  # the first one wins term 1
        t0 = time.monotonic()
        # On a busy host the second may win; a cold load of 100,000 ranges from etcd takes 10-25 s there.
        first = call(",".join(eps[:2]), {"op": "status"}, timeout=60 if etcd is None else 240)
        lead = eps.index(first["leader"])
        if lead == 1:
            procs.reverse()
            eps[0], eps[1], eps[2], eps[3] = eps[1], eps[0], eps[3], eps[2]
        echo(f"coordinator-{lead + 1} leads term {first['term']} ({time.monotonic() - t0:.2f} s): {first['takeover']}")
        if etcd is not None and not cold:
            standby_read_s = _standby_ready(os.path.join(work, f"coordinator-{2 - lead}.log"), 120)
            echo("standby never read its snapshot from etcd" if standby_read_s is None else
                 f"standby has read its snapshot from etcd (waited {standby_read_s:.2f} s more)")
        for e in eps[:2]:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            curve.secure_client(s, ring.pair("partition-server"), ring.public("coordinator"))  # heartbeats
            s.connect(e)
            socks.append(s)
        hb = {"op": "heartbeat", "server": sids[0], "endpoint": "tcp://127.0.0.1:1", "incarnation": "bench",
              "pid": 0, "ranges": [], "load": {}, "pending": 0}
        _leases(socks, hb, follow_s)  # the standby follows the leader's store meanwhile
        os.kill(procs[0].pid, signal.SIGSTOP if mode == "pause" else signal.SIGKILL)
        paused = time.monotonic()
        got = _leases(socks, hb, 4.0)
        lease = next((t - paused for t, i, term in got if i == 1 and term > first["term"]), None)
        after = call(eps[1], {"op": "status"}, timeout=30)["takeover"]
    finally:
        for s in socks:
            s.close(0)
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            p.kill()
            p.wait()
        if etcd is not None:
            etcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"meta": meta, "seed_s": round(seed_s, 1) if seed_s is not None else None, "standby_read_s":
            round(standby_read_s, 2) if standby_read_s is not None else None, "revision": after.get("revision"),
            "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],"servers": servers, "ranges": ranges, "meta_keys": len(recs) + len(sids) + 3,
            "first_lease_after_pause_s": round(lease, 3) if lease is not None else None,
            "copy_ms": after.get("meta_ms"), "load_ms": after.get("load_ms"), "takeover_ms": after.get("takeover_ms"),
            "copied_keys": after.get("copied_keys"), "warm": after.get("warm"), "follow_s": follow_s,
            "mode": mode, "seq": after.get("seq"), "cold_takeover": cold}


def format_result(r: dict) -> str:
    """The figures as text."""
    return "\n".join([
        f"takeover with {r['ranges']} ranges on {r['servers']} servers ({r['meta_keys']} meta keys), leader "
        f"{'paused' if r.get('mode', 'pause') == 'pause' else 'killed'}, meta store {r.get('meta', 'rocksdb')}"
        f"{' (--cold-takeover)' if r.get('cold_takeover') else ''}:",
        f"  first lease of the new term   {r['first_lease_after_pause_s']} s after the {r.get('mode', 'pause')}",
        f"  meta store copied             {r['copied_keys']} keys in {r['copy_ms']} ms" if r["copied_keys"] else
        f"  meta store opened in etcd     in {r['copy_ms']} ms; term won at revision {r.get('seq')}"
        if r.get("meta") == "etcd" else f"  meta store reopened           in {r['copy_ms']} ms",
        f"  map loaded                    {r['load_ms']} ms after the term was won (leases granted meanwhile),"
        f" {'warm' if r.get('warm') else 'cold'}",
        f"  leader fully in charge        {r['takeover_ms']} ms after the term was won",
        f"  host load average (1 min)     {r['load_avg'][0]} before, {r['load_avg'][1]} after",
    ])
