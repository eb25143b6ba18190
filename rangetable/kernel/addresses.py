"""Bound and advertised addresses: where a process listens versus what others use to reach it.

A process binds ``--bind`` (``tcp://0.0.0.0:10020`` listens on every interface) and tells the
cluster ``--advertise`` (``tcp://10.0.0.2:10020``, the address other hosts reach it at): partition
servers put it in their heartbeats, the coordinator publishes it in the partition map (and its PUB
endpoint as the map's ``pub``), frontends connect to what the map says.
"""

from __future__ import annotations

import socket

WILDCARDS = frozenset({"0.0.0.0", "*", "::", "[::]", ""})


def split_endpoint(endpoint: str) -> tuple[str, str, str]:
    """``tcp://host:port`` → ``("tcp", host, port)``; port is ``""`` when absent; a missing scheme is tcp."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        scheme, rest = "tcp", endpoint
    if scheme != "tcp":
        return scheme, rest, ""
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        return scheme, f"[{host}]", tail.lstrip(":")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return scheme, rest, ""
    return scheme, host, port


def advertised(bound: str, advertise: str = "", hostname: str | None = None) -> str:
    """The endpoint to publish for a socket bound at ``bound`` (its ``LAST_ENDPOINT``, real port).

    * ``advertise`` empty: ``bound``, with a wildcard host (``0.0.0.0``, ``*``, ``::``) replaced by
      this host's name (``hostname``, default ``socket.gethostname()``);
    * ``advertise`` without a port (``tcp://10.0.0.2`` or ``10.0.0.2``): that host with the bound port;
    * ``advertise`` with a port: as given (a NAT or container port mapping).

    Raises ValueError for an advertised address that is not tcp, or a port that is not a number.
    """
    scheme, host, port = split_endpoint(bound)
    if scheme != "tcp":
        return advertise or bound  # ipc:// and inproc:// are reached by the path itself
    if not advertise:
        if host in WILDCARDS:
            host = hostname or socket.gethostname()
        return f"tcp://{host}:{port}"
    a_scheme, a_host, a_port = split_endpoint(advertise)
    bare_v6 = ":" in a_host and not a_host.startswith("[")  # "tcp://a:b:c": which part is the port?
    if a_scheme != "tcp" or not a_host or bare_v6:
        raise ValueError(f"--advertise must look like tcp://HOST[:PORT], not {advertise!r}")
    if a_host in WILDCARDS:
        raise ValueError(f"--advertise {advertise!r} is a wildcard: give an address other hosts can reach")
    return f"tcp://{a_host}:{a_port or port}"
