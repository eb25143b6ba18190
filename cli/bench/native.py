"""``rangetable bench``: the native path, next to a bare two-hop ZeroMQ echo on the same machine.

Phases, each pipelined on one DEALER socket with a window of requests in flight: point insert,
point get, upsert, EGT of 100, PartitionKey query (a 100-entity partition), full scan (pages of 1000,
sequential: each page needs the previous continuation), and bulk ingest (:mod:`rangetable.client.bulk`).
Each prints ops/s and p50/p99 latency. The echo baseline runs the same pipelining through a Python
forwarding process to a Python echo process — the cost of two hops with no work — so the ratio
of our point operations to it is visible.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import zmq

from cli.bench.proc import cpu_seconds
from rangetable import curve, protocol
from rangetable.client.bulk import bulk_upsert
from rangetable.kernel.stats import percentile_ms

# The echo baseline, in two flavours: with the fast send/receive helpers every rangetable process uses
# ("fast"), and with pyzmq's own send_multipart/recv_multipart as the stack notes measured it ("pyzmq").
_IO = {
    "fast": "from rangetable.protocol import NOBLOCK, recv_frames as recv, send_frames as send",
    "pyzmq": "NOBLOCK = zmq.NOBLOCK\nrecv = lambda s, f=0: s.recv_multipart(f)\nsend = lambda s, m: s.send_multipart(m)",
}
ECHO_SERVER = """
import sys, zmq
{io}
s = zmq.Context().socket(zmq.ROUTER); {server_keys}; s.bind(sys.argv[1])
while True:
    send(s, recv(s))
"""
FORWARDER = """
import sys, zmq
{io}
ctx = zmq.Context(); front = ctx.socket(zmq.ROUTER); {front_keys}; front.bind(sys.argv[1])
back = ctx.socket(zmq.DEALER); {back_keys}; back.connect(sys.argv[2])
poller = zmq.Poller(); poller.register(front, zmq.POLLIN); poller.register(back, zmq.POLLIN)
while True:
    for sock in dict(poller.poll()):
        while True:
            try:
                msg = recv(sock, NOBLOCK)
            except zmq.Again:
                break
            send(back if sock is front else front, msg)
"""


def pipelined(endpoint: str, bodies: Iterator[bytes], window: int = 64, secure: bool = True) -> dict[str, Any]:
    """Send every body with ``window`` in flight; returns ops/s, p50/p99 ms and error count
    (``secure``: with the CURVE keys remembered for ``endpoint``; the echo baseline is plain)."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if secure:
        curve.connect(sock, endpoint)
    else:
        sock.connect(endpoint)
    ids = itertools.count(1)
    sent: dict[bytes, float] = {}
    lat: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    try:
        exhausted = False
        while True:
            while not exhausted and len(sent) < window:
                body = next(bodies, None)
                if body is None:
                    exhausted = True
                    break
                rid = b"%d" % next(ids)
                sent[rid] = time.perf_counter()
                protocol.send_frames(sock, [rid, body])
            if not sent:
                break
            if not sock.poll(30000):
                raise RuntimeError(f"no answer from {endpoint}")
            rid, raw = protocol.recv_frames(sock)
            lat.append(time.perf_counter() - sent.pop(rid))
            if raw[:1] != b"\x81" or b"error" in raw[:8]:
                errors += 1
    finally:
        sock.close(0)
    elapsed = time.perf_counter() - t0
    return {"ops": len(lat), "ops_per_s": round(len(lat) / elapsed, 1), "p50_ms": percentile_ms(lat, 0.5),
            "p99_ms": percentile_ms(lat, 0.99), "errors": errors}


def _keys_code(sock: str, server: curve.KeyPair | None, client: curve.KeyPair | None = None) -> str:
    if server is None:
        return "pass"
    if client is None:
        return f"{sock}.curve_server = True; {sock}.curve_publickey = {server.public!r}; " \
               f"{sock}.curve_secretkey = {server.secret!r}"
    return f"{sock}.curve_serverkey = {server.public!r}; {sock}.curve_publickey = {client.public!r}; " \
           f"{sock}.curve_secretkey = {client.secret!r}"


def echo_baseline(n: int, window: int = 64, payload: int = 200, flavour: str = "fast",
                  with_curve: bool = False) -> dict[str, Any]:
    """Throughput of client → Python forwarder → Python echo server (two bare hops); ``with_curve``:
    both hops encrypted and authenticated with CURVE (no ZAP: the handshake is not measured)."""
    from cli.cluster.port_reservation import PortReservation

    ports = PortReservation()
    back, front = f"tcp://127.0.0.1:{ports.take()}", f"tcp://127.0.0.1:{ports.take()}"
    ports.release()
    io = _IO[flavour]
    srv, fwd, cli = (curve.KeyPair.generate() for _ in range(3)) if with_curve else (None, None, None)
    procs = [subprocess.Popen([sys.executable, "-c", ECHO_SERVER.format(io=io, server_keys=_keys_code("s", srv)), back]),
             subprocess.Popen([sys.executable, "-c", FORWARDER.format(
                 io=io, front_keys=_keys_code("front", fwd), back_keys=_keys_code("back", srv, fwd)), front, back])]
    try:
        time.sleep(0.5)
        body = protocol.pack({"ok": "x" * payload})
        if fwd is not None and cli is not None:
            curve.remember(front, fwd.public, cli)
        pipelined(front, iter([body] * 1000), window, secure=with_curve)  # warm-up
        cpu0 = cpu_seconds([p.pid for p in procs])
        res = pipelined(front, iter([body] * n), window, secure=with_curve)
        # CPU of the forwarder and the echo server per message: what a hop costs, whatever the load
        res["server_cpu_us"] = round((cpu_seconds([p.pid for p in procs]) - cpu0) / max(1, res["ops"]) * 1e6, 1)
        return res
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _ent(i: int) -> dict:
    return {"name": [0, f"customer-{i:08d}"], "qty": [1, i % 100], "price": [3, i * 0.25 + 0.5],
            "active": [4, i % 3 == 0], "note": [0, "lorem ipsum dolor sit amet " * 3]}


def run_native_bench(native: str, n: int = 20_000, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every phase against a running cluster's native endpoint; prints and returns the figures."""
    table = f"bench{int(time.time() * 1000) % 10**9}"
    protocol.result(_one(native, {"op": "create_table", "table": table}))
    parts = max(1, n // 100)

    def write(kind: str, i: int) -> bytes:
        w = {"op": kind, "pk": f"p{i % parts:05d}", "rk": f"r{i // parts:05d}", "props": _ent(i), "if_match": None}
        return protocol.pack({"op": "write", "table": table, "write": w})

    res: dict[str, Any] = {}
    res["echo_two_hops"] = echo_baseline(n)
    res["echo_two_hops_pyzmq"] = echo_baseline(n, flavour="pyzmq")
    res["echo_two_hops_curve"] = echo_baseline(n, with_curve=True)
    res["insert"] = pipelined(native, (write("insert", i) for i in range(n)))
    res["get"] = pipelined(native, (protocol.pack({"op": "get", "table": table, "pk": f"p{i % parts:05d}",
                                                   "rk": f"r{i // parts:05d}"}) for i in range(n)))
    res["upsert"] = pipelined(native, (write("insert_or_merge", i) for i in range(n)))

    def egt(b: int) -> bytes:
        ops = [{"op": "insert_or_replace", "pk": f"b{b:05d}", "rk": f"r{j:03d}", "props": _ent(j), "if_match": None}
               for j in range(100)]
        return protocol.pack({"op": "batch", "table": table, "ops": ops})

    nb = max(10, n // 100)
    r = pipelined(native, (egt(b) for b in range(nb)), window=8)
    r["entities_per_s"] = round(r["ops_per_s"] * 100, 1)
    res["egt100"] = r
    res["pk_query"] = pipelined(native, (protocol.pack({"op": "query", "table": table, "filter":
                                                       f"PartitionKey eq 'b{q % nb:05d}'"}) for q in range(n // 20)),
                                window=16)
    t0 = time.perf_counter()
    token, pages, rows, page_lat = None, 0, 0, []
    while True:
        t1 = time.perf_counter()
        page = protocol.result(_one(native, {"op": "query", "table": table, "next": token}))
        page_lat.append(time.perf_counter() - t1)
        pages += 1
        rows += len(page["entities"])
        token = page["next"]
        if token is None:
            break
    el = time.perf_counter() - t0
    res["full_scan"] = {"entities": rows, "pages": pages, "entities_per_s": round(rows / el, 1),
                        "page_p50_ms": percentile_ms(page_lat, 0.5), "page_p99_ms": percentile_ms(page_lat, 0.99)}
    bulk = bulk_upsert(native, table, ({"PartitionKey": f"k{i // 100:05d}", "RowKey": f"{i % 100:03d}",
                                        "name": f"c{i}", "qty": i % 100} for i in range(max(n, 50_000))))
    res["bulk_ingest"] = {"entities": bulk.entities, "entities_per_s": round(bulk.rate, 1), "batches": bulk.batches}
    base = res["echo_two_hops"]["ops_per_s"]
    base_pyzmq = res["echo_two_hops_pyzmq"]["ops_per_s"]
    for k in ("insert", "get", "upsert"):
        res[k]["vs_echo"] = round(res[k]["ops_per_s"] / base, 2)
        res[k]["vs_echo_pyzmq"] = round(res[k]["ops_per_s"] / base_pyzmq, 2)
    _print(res, echo)
    _one(native, {"op": "delete_table", "table": table})
    return res


def _one(endpoint: str, body: dict) -> bytes:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    curve.connect(sock, endpoint)
    try:
        sock.send_multipart([b"1", protocol.pack(body)])
        if not sock.poll(60000):
            raise RuntimeError("no answer")
        return sock.recv_multipart()[1]
    finally:
        sock.close(0)


def _print(res: dict[str, Any], echo: Callable[[str], None]) -> None:
    for key, how in (("echo_two_hops", "fast sends"), ("echo_two_hops_pyzmq", "pyzmq send_multipart"),
                     ("echo_two_hops_curve", "fast sends, CURVE")):
        e = res[key]
        echo(f"bare two-hop echo ({how}):{'':{max(0, 21 - len(how))}} {e['ops_per_s']:>10,.0f} msg/s  "
             f"p50 {e['p50_ms']} ms  p99 {e['p99_ms']} ms  server CPU {e['server_cpu_us']} µs/msg")
    for k, label in (("insert", "point insert"), ("get", "point get"), ("upsert", "upsert (merge)")):
        r = res[k]
        echo(f"{label:22} {r['ops_per_s']:>10,.0f} ops/s  p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  "
             f"({r['vs_echo']}x fast echo, {r['vs_echo_pyzmq']}x pyzmq echo)"
             f"{'  errors ' + str(r['errors']) if r['errors'] else ''}")
    r = res["egt100"]
    echo(f"{'EGT of 100':22} {r['ops_per_s']:>10,.0f} batches/s = {r['entities_per_s']:,.0f} entities/s  "
         f"p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms")
    r = res["pk_query"]
    echo(f"{'PartitionKey query':22} {r['ops_per_s']:>10,.0f} queries/s (100 entities each)  p50 {r['p50_ms']} ms  "
         f"p99 {r['p99_ms']} ms")
    r = res["full_scan"]
    echo(f"{'full scan':22} {r['entities_per_s']:>10,.0f} entities/s ({r['pages']} pages)  page p50 "
         f"{r['page_p50_ms']} ms  p99 {r['page_p99_ms']} ms")
    r = res["bulk_ingest"]
    echo(f"{'bulk ingest':22} {r['entities_per_s']:>10,.0f} entities/s ({r['entities']:,} entities)")
