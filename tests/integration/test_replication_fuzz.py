"""Issue #20: random frames from a keyed peer (it holds the partition-server key pair, as every partition
server does) to the replication endpoints never crash a server nor corrupt a replica — not even a ``repl``
that names the real primary, its epoch and the next sequence number with a well-formed batch: without
the configuration's token (which only the coordinator's load command carries) it is refused."""

from __future__ import annotations

import os
import random
import re
import time
from typing import Any

import msgpack
import zmq

from partition_server.store.feed import FAMILY as FEED_FAMILY
from partition_server.store.replica_log import encode_ops
from rangetable import TableServiceClient, curve
from rangetable.kernel.storage import open_range_db
from rangetable.keys import encode_key
from tests.cluster import Cluster

SERVERS = ("ps-1", "ps-2", "ps-3")


def _repl_endpoint(c: Cluster, sid: str) -> str:
    text = open(os.path.join(c.data_dir, "logs", f"{sid}.log"), errors="replace").read()
    found = re.findall(r"replication endpoint (tcp://\S+)", text)
    assert found, f"no replication endpoint in {sid}'s log"
    return found[-1]


def _dump(c: Cluster, sid: str, rec: dict) -> dict[bytes, bytes]:
    """Every key of ``sid``'s copy of the range, the change feed's records included (opened read-only while the
    server runs)."""
    db = open_range_db(os.path.join(c.data_dir, "servers", sid, "ranges", rec["id"]), create=False, read_only=True)
    try:
        keys = dict(db.items())
        keys.update(db.get_column_family(FEED_FAMILY).items())  # its keys keep their prefix: none is an entity's
        return keys
    finally:
        db.close()


def _messages(rng: random.Random, rec: dict, n: int) -> list[list[bytes]]:
    rid, epoch, primary = rec["id"], rec["epoch"], rec["primary"]
    followers = [s for s in rec["replicas"] if s != primary]
    forged = encode_ops([(encode_key("fz", f"forged-{i}"), msgpack.packb([1, {}])) for i in range(3)])

    def body() -> Any:
        k = rng.randrange(12)
        seq = rng.choice([0, 1, 2, 50, 10**6, 2**63 - 1, 2**64 - 1, -1, "x", None, [1]])
        ep = rng.choice([epoch, epoch, epoch + 1, epoch - 1, 0, 2**63, "e", None])
        frm = rng.choice([primary, primary, *followers, "ps-9", "", None, 7])
        tok = rng.choice([None, "", "0" * 32, "tok"])
        base: dict[str, Any] = {"op": "repl", "range": rng.choice([rid, rid, "nope", 3]), "epoch": ep, "from": frm}
        if tok is not None:
            base["token"] = tok
        if k == 0:
            return rng.randbytes(rng.randrange(0, 300))
        if k == 1:
            return {"op": rng.choice(["ack", "repl", "hello", "", None, 1]), "x": rng.random()}
        if k in (2, 3, 4):  # plausible batches: forged writes at plausible positions
            base["batches"] = [[s, forged] for s in range(1, rng.randrange(2, 200), rng.randrange(1, 20))]
            return base
        if k == 5:
            base["batches"] = [[seq, rng.choice([rng.randbytes(20), b"", b"\x90", b"\xc1", 5, None])]]
            return base
        if k == 6:
            base["batches"] = rng.choice([None, {}, "x", [[1]], [[1, 2, 3]], [None], 5])
            return base
        if k in (7, 8, 9):  # acknowledgements from anyone of anything
            return {**base, "op": "ack", "from": rng.choice([*followers, primary, "ps-9", None]), "seq": seq}
        if k == 10:
            return [1, 2, 3]
        return {**base, "op": "ack", "seq": seq, "extra": rng.randbytes(5)}

    out = []
    for _ in range(n):
        b = body()
        payload = b if isinstance(b, bytes) else msgpack.packb(b, use_bin_type=True)
        out.append(rng.choice([[payload], [payload], [payload], [b"", payload], [payload, payload]]))
    return out


def test_random_frames_to_replication_endpoints(cluster_factory: Any) -> None:
    with cluster_factory(extra=["--no-dashboard"]) as c:
        c.admin({"op": "create_table", "table": "fuzzed"})
        client = TableServiceClient.from_cluster(c.data_dir).get_table_client("fuzzed")
        for i in range(100):
            client.upsert_entity({"PartitionKey": f"p{i % 5}", "RowKey": f"before-{i:04d}", "n": i})
        (rec,) = [r for r in c.status()["ranges"] if r["table"] == "fuzzed"]
        assert sorted(rec["insync"]) == list(SERVERS)
        pids = {s: c.pid(s) for s in SERVERS}
        keys = curve.KeyRing.load(curve.keys_dir(c.data_dir))
        ctx = zmq.Context()
        rng = random.Random(20)
        socks = []
        try:
            for sid in SERVERS:
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.SNDHWM, 100_000)
                curve.secure_client(s, keys.pair("partition-server"), keys.public("partition-server"))
                s.connect(_repl_endpoint(c, sid))
                socks.append(s)
            time.sleep(0.5)  # the CURVE handshakes
            sent = 0
            for round_ in range(3):
                for s in socks:
                    for frames in _messages(rng, rec, 1000):
                        s.send_multipart(frames)
                        sent += 1
                # writes go on while the fuzz lands
                for i in range(30):
                    client.upsert_entity({"PartitionKey": f"p{i % 5}", "RowKey": f"during-{round_}-{i:03d}", "n": i})
        finally:
            for s in socks:
                s.close(0)
            ctx.term()
        assert sent == 9000
        time.sleep(1)
        for i in range(100):
            client.upsert_entity({"PartitionKey": f"p{i % 5}", "RowKey": f"after-{i:04d}", "n": i})

        assert {s: c.pid(s) for s in SERVERS} == pids, "a server restarted:\n" + c.logs()
        st = c.status()
        assert all(s["alive"] for s in st["servers"]), st["servers"]
        (now,) = [r for r in st["ranges"] if r["table"] == "fuzzed"]
        assert now["epoch"] == rec["epoch"] and now["primary"] == rec["primary"], now
        assert sorted(now["insync"]) == list(SERVERS), now
        rows = {e["RowKey"] for e in client.list_entities()}
        want = ({f"before-{i:04d}" for i in range(100)} | {f"after-{i:04d}" for i in range(100)}
                | {f"during-{r}-{i:03d}" for r in range(3) for i in range(30)})
        assert rows == want
        # every replica holds the same keys and values, and no forged one
        c.wait(lambda: len({frozenset(_dump(c, s, rec).items()) for s in SERVERS}) == 1, timeout=10,
               what="identical replicas")
        dump = _dump(c, rec["primary"], rec)
        assert not [k for k in dump if b"forged" in k]
        text = open(os.path.join(c.data_dir, "logs", f"{rec['primary']}.log"), errors="replace").read()
        assert "replication message refused" in text
