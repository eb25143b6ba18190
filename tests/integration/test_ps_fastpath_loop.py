"""The partition server's loop against a fake coordinator: heartbeats on time, answers processed at
once (also while idle), lease fencing, pipelined requests drained, a clean stop."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from partition_server.server import PartitionServer
from rangetable import curve, protocol
from rangetable.config import PartitionServerConfig
from rangetable.errors import TableError

pytestmark = pytest.mark.serial  # timing of a real event loop (backlog, heartbeats): runs alone, after the parallel part

RECORD = {"id": "r1", "table": "t", "low": "", "high": None, "epoch": 1, "path": "r1"}


class FakeCoordinator:
    """A ROUTER that records heartbeats and answers them with a lease while ``answer`` is set."""

    def __init__(self, ctx: zmq.Context, keys: curve.KeyRing) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        curve.serve_secured(self.sock, keys, "coordinator", "fake coordinator")
        self.sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.beats: list[float] = []
        self.answered: list[float] = []
        self.pending: list[int] = []  # the backlog each heartbeat reported
        self.answer = threading.Event()
        self.delay_s = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, rid, body = self.sock.recv_multipart()
            beat = protocol.unpack(body)
            assert beat["op"] == "heartbeat"
            self.beats.append(time.monotonic())
            self.pending.append(beat["pending"])
            if self.answer.is_set():
                time.sleep(self.delay_s)
                self.sock.send_multipart([ident, rid, protocol.ok({"lease_s": 2.0, "geo": {"epoch": 0, "writes": "all"}})])
                self.answered.append(time.monotonic())
        self.sock.close(0)


@pytest.fixture
def cluster(tmp_path):
    ctx = zmq.Context()
    keys = curve.KeyRing.create(str(tmp_path / "keys"))
    coord = FakeCoordinator(ctx, keys)
    ps = PartitionServer(PartitionServerConfig(data_dir=str(tmp_path), coordinator=coord.endpoint), ctx)
    thread = threading.Thread(target=ps.serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not ps.endpoint and time.monotonic() < deadline:
        time.sleep(0.01)
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    curve.secure_client(client, keys.pair("coordinator"), keys.public("partition-server"))  # may send control
    client.connect(ps.endpoint)
    yield ps, coord, client, thread
    ps.stopping = True
    thread.join(5)
    assert not thread.is_alive()
    coord.stop.set()
    coord.thread.join(5)
    client.close(0)
    curve.guard(ctx).stop()
    ctx.term()


def call(client: zmq.Socket, body: dict) -> object:
    client.send_multipart([b"x", protocol.pack(body)])
    assert client.poll(5000), "no answer"
    return protocol.result(client.recv_multipart()[1])


def test_lease_fencing_heartbeats_and_pipelining(cluster):
    ps, coord, client, _ = cluster
    assert call(client, {"op": "load", "range": RECORD}) is None
    get = {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "r"}
    with pytest.raises(TableError) as ei:  # no lease yet
        call(client, get)
    assert ei.value.error_code == "NotPrimary"
    coord.delay_s = 0.2
    coord.answer.set()
    while not coord.answered:
        time.sleep(0.005)
    deadline = time.monotonic() + 0.2  # well before the next heartbeat (0.3 s later) would wake the loop
    while ps.lease_until == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert ps.lease_until > 0, "an answer that arrived while idle was not processed at once"
    coord.delay_s = 0.0
    write = {"op": "write", "range": "r1", "epoch": 1, "write": {"op": "insert", "pk": "p", "rk": "r", "props": {}}}
    assert call(client, write)[:2] == ["p", "r"]
    t0 = time.monotonic()
    # Pipelined bursts for 1.6 s: drained in batches, heartbeats stay on time. A heartbeat samples the backlog
    # only at its moment, so on a loaded machine the bursts go on (up to 8 s) until one has seen it.
    while time.monotonic() - t0 < 1.6 or (max(coord.pending, default=0) <= 1 and time.monotonic() - t0 < 8):
        for i in range(300):
            client.send_multipart([b"%d" % i, protocol.pack(get)])
        for _ in range(300):
            assert client.poll(5000)
            assert protocol.result(client.recv_multipart()[1])[:2] == ["p", "r"]
    assert max(coord.pending) > 1, coord.pending  # the backlog of the pipelined bursts was seen
    time.sleep(1.2)  # idle: heartbeats go on
    beats = [b for b in coord.beats if b >= t0]
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert len(beats) >= 5 and max(gaps) < 0.75, gaps
    assert call(client, get)[:2] == ["p", "r"]
    assert call(client, {"op": "ping"}) == {"server": ps.server_id, "lease": True}


def test_lease_lapse_closes_ranges(cluster):
    ps, coord, client, _ = cluster
    coord.answer.set()
    while ps.lease_until == 0:
        time.sleep(0.01)
    call(client, {"op": "load", "range": RECORD})
    coord.answer.clear()
    time.sleep(2.3)
    with pytest.raises(TableError) as ei:
        call(client, {"op": "get", "range": "r1", "epoch": 1, "pk": "p", "rk": "r"})
    assert ei.value.error_code == "NotPrimary" and not ps.ranges.open


def test_stop_is_prompt(cluster):
    ps, coord, client, thread = cluster
    coord.answer.set()
    time.sleep(0.3)
    t0 = time.monotonic()
    ps.stopping = True
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - t0 < 1.0
