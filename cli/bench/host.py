"""``rangetable bench host``: what this machine charges for waking up, the cost every figure of a cluster on it
carries.

A request crosses several processes (client, frontend, primary, followers) and in each a ZeroMQ I/O thread
and the loop; each hop wakes a thread that was idle. On some hosts (virtual machines above all) work done
right after such a wake-up costs several times what the same work costs on a busy core, so a lightly loaded
cluster pays more CPU per operation than a saturated one, and figures measured on two hosts, or on one host
at two load levels, differ by more than their code does. This bench measures it, in one process and a child:

1. **ZeroMQ send**: the CPU time (``time.thread_time``) of one ``send`` of 200 bytes on a DEALER connected over
   TCP to a ROUTER in another process, back to back and after idle gaps: a send after a gap wakes the
   sender's own I/O thread;
2. **Python after idle**: the CPU time of a fixed loop (:func:`spin`) back to back and after the same gaps;
3. **round trip**: one 1 KiB DEALER/ROUTER echo at a time, p50 and p99 (``shared/reference/stack-notes.md``
   measured 135 µs p50 on the reference machine when the project started).

Each figure is the median of as many samples as ``seconds`` allows per gap.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import zmq

GAPS_S = (0.0, 0.0005, 0.002)  # idle time before each measured call
SPIN = 200  # iterations of spin()'s loop


def spin() -> int:
    """A fixed piece of pure-Python work (a 200-step loop)."""
    s = 0
    for i in range(SPIN):
        s += i
    return s


def _sink(port_to: Any, echo: bool) -> None:
    """A ROUTER bound to a free port of 127.0.0.1 that it names through the pipe ``port_to`` (so no other
    process can take the port between a probe and this bind), echoing what it gets with ``echo``."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port_to.send(sock.bind_to_random_port("tcp://127.0.0.1"))
    port_to.close()
    while True:
        frames = sock.recv_multipart()
        if echo:
            sock.send_multipart(frames)


def cpu_after_gaps(call: Callable[[], Any], seconds: float) -> dict[str, float]:
    """The median CPU time (µs, this thread's) of ``call`` back to back and after each idle gap of
    :data:`GAPS_S`, ``seconds`` per gap: ``{"0.0 ms": …, "0.5 ms": …, "2.0 ms": …}``."""
    out: dict[str, float] = {}
    for gap in GAPS_S:
        samples: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.thread_time()
            call()
            samples.append(time.thread_time() - t0)
            if gap:
                time.sleep(gap)
        out[f"{gap * 1000:.1f} ms"] = round(statistics.median(samples) * 1e6, 2)
    return out


@contextlib.contextmanager
def _connected(echo: bool) -> Iterator[zmq.Socket]:
    """A DEALER connected over TCP to a ROUTER in a child process (which echoes what it gets with ``echo``);
    both are gone when the block ends."""
    spawn = multiprocessing.get_context("spawn")
    mine, theirs = spawn.Pipe(duplex=False)
    proc = spawn.Process(target=_sink, args=(theirs, echo), daemon=True)
    proc.start()
    theirs.close()
    sock: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if not mine.poll(60):
            raise RuntimeError("the echo process did not start within 60 s")
        sock.connect(f"tcp://127.0.0.1:{mine.recv()}")
        yield sock
    finally:
        sock.close(0)
        proc.kill()
        proc.join(5)


def round_trip(seconds: float) -> dict[str, float]:
    """p50/p99 (µs) and rate of one 1 KiB echo at a time through a ROUTER in another process."""
    with _connected(True) as sock:
        msg = b"x" * 1024
        for _ in range(200):  # connect and warm up
            sock.send(msg)
            sock.recv()
        lat: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            sock.send(msg)
            sock.recv()
            lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"per_s": round(len(lat) / seconds), "p50_us": round(lat[len(lat) // 2] * 1e6, 1),
            "p99_us": round(lat[int(len(lat) * 0.99)] * 1e6, 1)}


def zmq_send(seconds: float) -> dict[str, float]:
    """:func:`cpu_after_gaps` of a 200-byte send to a ROUTER in another process."""
    with _connected(False) as sock:
        msg = b"x" * 200
        for _ in range(200):
            sock.send(msg)
        time.sleep(0.2)
        return cpu_after_gaps(lambda: sock.send(msg), seconds)


def run_host_bench(seconds: float = 2.0, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Every measurement (see the module docstring); ``seconds`` per gap and for the round trip."""
    res = {"zmq_send_cpu_us": zmq_send(seconds), "python_spin_cpu_us": cpu_after_gaps(spin, seconds),
           "round_trip": round_trip(seconds)}
    echo(format_host(res))
    return res


def format_host(res: dict[str, Any]) -> str:
    """The table :func:`run_host_bench` prints."""
    gaps = list(res["zmq_send_cpu_us"])
    head = "CPU µs (median) after an idle gap of"
    lines = [f"{head:42}" + "".join(f"{g:>10}" for g in gaps)]
    for label, key in (("ZeroMQ send of 200 bytes (TCP)", "zmq_send_cpu_us"),
                       (f"Python loop of {SPIN} steps", "python_spin_cpu_us")):
        row = res[key]
        base = row[gaps[0]]
        lines.append(f"{label:42}" + "".join(f"{row[g]:>10.1f}" for g in gaps)
                     + (f"   ({row[gaps[-1]] / base:.1f}x after {gaps[-1]})" if base else ""))
    rt = res["round_trip"]
    lines.append(f"ZeroMQ round trip (1 KiB echo, one at a time): p50 {rt['p50_us']:.0f} µs, p99 {rt['p99_us']:.0f} µs, "
                 f"{rt['per_s']:,}/s")
    return "\n".join(lines)
