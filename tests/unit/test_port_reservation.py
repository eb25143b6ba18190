"""Ports for a planned cluster: distinct, bindable, and out of the way of outgoing connections."""
from __future__ import annotations

import socket

from cli.cluster.port_reservation import FIRST_DRAWN, PortReservation, ephemeral_range
from cli.cluster.supervisor import ClusterSpec, Supervisor


def test_reserved_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    ports = PortReservation()
    taken = [ports.take() for _ in range(300)]
    ports.release()
    assert len(set(taken)) == 300
    assert max(taken) < ephemeral_range()[0]
    assert min(taken) >= FIRST_DRAWN  # never a default port of another cluster (10002, 10012, 10081)


def test_released_ports_can_be_bound_again() -> None:
    ports = PortReservation()
    taken = [ports.take() for _ in range(5)]
    ports.release()
    for port in taken:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_planned_cluster_uses_every_port_once(tmp_path) -> None:
    sup = Supervisor(ClusterSpec(data_dir=str(tmp_path), servers=4, frontends=3, native_port=0, http_port=0,
                                 dashboard_port=0))
    sup.plan()
    endpoints = [sup.coordinator, sup.pub, *sup.natives, sup.https[0], sup.dashboard]
    endpoints += [c.extra["endpoint"] for c in sup.children if c.role == "partition-server"]
    endpoints += [c.extra["metrics"] for c in sup.children]  # one Prometheus endpoint per process
    ports = [e.rsplit(":", 1)[1].split("/")[0] for e in endpoints]
    assert len(ports) == 2 + 4 + 3 + 1 + 1 + (1 + 4 + 3 + 3 + 1)
    assert len(set(ports)) == len(ports)


def test_a_port_handed_out_is_not_handed_out_again_by_another_reservation_meanwhile(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from cli.cluster import port_reservation as pr

    monkeypatch.setattr(pr, "RECENT_FILE", str(tmp_path / "ports.json"))
    first = pr.PortReservation()
    taken = {first.take() for _ in range(20)}
    first.release()  # unbound: the cluster's processes are starting and will bind them
    second = pr.PortReservation()
    again = {second.take() for _ in range(20)}
    second.release()
    assert not taken & again  # another cluster planned meanwhile draws none of them
    monkeypatch.setattr(pr, "RECENT_S", 0.0)  # once they are old, they are free to draw again
    with pr._recent() as recent:
        assert recent == {}
