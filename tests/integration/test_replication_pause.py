"""Issue #20 item 6: a primary paused (SIGSTOP) past its lease under a write load. A follower is promoted,
writes go on, every acknowledged write is there afterwards, and no read answers a value older than one
whose write was acknowledged before the read began (the old primary serves nothing stale after its
lease: the coordinator waits the lease out before it promotes)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from rangetable import TableServiceClient
from tests.integration.test_replication import Writer


class Register(threading.Thread):
    """One writer overwriting a register with 1, 2, 3 …, and one reader of it; both timed."""

    def __init__(self, data_dir: str, table: str) -> None:
        super().__init__(daemon=True)
        self.w = TableServiceClient.from_cluster(data_dir).get_table_client(table)
        self.r = TableServiceClient.from_cluster(data_dir).get_table_client(table)
        self.acked: list[tuple[float, int]] = []  # (when acknowledged, value)
        self.reads: list[tuple[float, int]] = []  # (when the read began, value read)
        self.stop = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)

    def run(self) -> None:
        self.reader.start()
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                self.w.upsert_entity({"PartitionKey": "reg", "RowKey": "x", "v": n})
                self.acked.append((time.monotonic(), n))
            except Exception:  # outcome unknown: not counted
                pass

    def _read(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                self.reads.append((t, int(self.r.get_entity("reg", "x")["v"])))
            except Exception:
                pass


def test_a_paused_primary_past_its_lease_is_replaced_without_losing_or_serving_stale(cluster_factory: Any) -> None:
    # no split or transfer of the balancer's may move the primary back
    with cluster_factory(extra=["--no-dashboard"], balancer=False) as c:
        c.admin({"op": "create_table", "table": "pausedp"})
        (rec,) = [r for r in c.status()["ranges"] if r["table"] == "pausedp"]
        victim = rec["primary"]
        writers = [Writer(c.data_dir, "pausedp", f"w{i}") for i in range(2)]
        reg = Register(c.data_dir, "pausedp")
        for t in [*writers, reg]:
            t.start()
        time.sleep(2)
        pid = c.kill(victim, signal.SIGSTOP)
        time.sleep(6)  # lease 2 s + grace 0.5 s, well past
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # declared dead and killed by the supervisor: expected
            pass
        c.wait(lambda: [r for r in c.status()["ranges"] if r["table"] == "pausedp"][0]["primary"] != victim,
               timeout=20, what="a follower promoted")
        n = sum(len(w.acked) for w in writers)
        time.sleep(3)
        assert sum(len(w.acked) for w in writers) > n + 20, "writes did not go on after the promotion"
        for t in [*writers, reg]:
            t.stop.set()
        for t in [*writers, reg]:
            t.join(30)
        reg.reader.join(30)

        (now,) = [r for r in c.status()["ranges"] if r["table"] == "pausedp"]
        assert now["primary"] != victim and now["epoch"] > rec["epoch"]
        client = TableServiceClient.from_cluster(c.data_dir).get_table_client("pausedp")
        rows = {e["RowKey"] for e in client.list_entities()}
        acked = {rk for w in writers for rk in w.acked}
        assert len(acked) > 100
        assert acked - rows == set(), f"{len(acked - rows)} acknowledged writes lost"
        final = int(client.get_entity("reg", "x")["v"])
        assert reg.acked and final >= reg.acked[-1][1], "an acknowledged register write was lost"
        # no read saw a value older than one acknowledged before the read began
        stale = []
        i, best = 0, 0
        for t, v in sorted(reg.reads):
            while i < len(reg.acked) and reg.acked[i][0] < t:
                best = max(best, reg.acked[i][1])
                i += 1
            if v < best:
                stale.append((t, v, best))
        assert not stale, f"{len(stale)} stale reads, first {stale[:3]}"
        assert len(reg.reads) > 50
