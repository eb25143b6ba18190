"""A network link a test can cut: a TCP forwarder on 127.0.0.1 to one endpoint (``tcp://host:port``). Cut, it
drops every connection through it and holds new ones open without a byte through (a dead link looks so to
the peers: no reset, no answer), until it is healed; the held ones are then closed, and their peers
reconnect."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class Link:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (``tcp://host:port``) until :meth:`close`."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up = True
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every connection; hold new ones without a byte through."""
        with self._lock:
            self.up = False
            self._drop()

    def heal(self) -> None:
        """Forward again (the connections held while cut are closed: their peers connect anew)."""
        with self._lock:
            self.up = True
            self._drop()

    def close(self) -> None:
        """Stop forwarding and close everything."""
        with self._lock:
            self._closed = True
            self._drop()
        self.listener.close()

    def _drop(self) -> None:
        for s in self._open:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._open = []

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(conn)
                if not self.up:
                    continue  # held: nothing through until healed
            try:
                peer = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._open.append(peer)
            threading.Thread(target=self._pump, args=(conn, peer), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        pair = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
