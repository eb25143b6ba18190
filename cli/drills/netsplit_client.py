"""The netsplit drill's client process, run inside its own namespace by cli/drills/netsplit.py.

``python -m cli.drills.netsplit_client DATA_DIR TABLE SEED THREADS OUT HISTORY_DIR`` runs the verifying
:class:`~cli.workload.generator.Workload` through every native frontend of the cluster.json in
DATA_DIR (thread i through frontend i mod n), writes ``OUT.started`` once it runs, and on SIGTERM
stops, verifies the history (acknowledged writes lost, duplicates, linearizability) and writes the
verdict, its counters and every acknowledged write's (monotonic time, frontend, PartitionKey) to OUT;
a failed history is kept in HISTORY_DIR.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from rangetable.files import write_json_atomic


def main(argv: list[str]) -> int:
    """Run the workload until SIGTERM, then verify and write the result file."""
    from cli.cluster_file import read_cluster
    from cli.workload.generator import Workload

    data_dir, table, seed, threads, out, history_dir = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4], argv[5]
    rate = float(argv[6]) or None  # 0: unpaced
    doc = read_cluster(data_dir)
    if doc is None:
        print(f"no cluster.json in {data_dir}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wl = Workload(doc["frontends"][0], table, threads=threads, seed=seed, endpoints=doc["frontends"],
                  history_dir=history_dir, rate=rate)
    wl.start()
    with open(out + ".started", "w") as f:
        f.write(str(os.getpid()))
    stop.wait()
    wl.stop()
    result = {**wl.verify(), "client": wl.stats.to_dict(), "acks": [list(a) for a in wl.acks]}
    write_json_atomic(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
