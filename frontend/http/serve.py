"""The ``rangetable http-frontend`` process: the REST app and its HTTP server, in one process.

The default server is the built-in HTTP/1.1 listener (:mod:`frontend.http.listener`): the
connections, the app and the frontend's ZeroMQ sockets share this process's uvloop loop and one
thread. ``--http-server granian`` (embedded: its HTTP work on Rust threads, the ASGI app on this
loop) and ``--http-server uvicorn`` run the same app as ASGI; ``docs/http.md`` has the measurement
that chose between them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl

from frontend.auth.bearer import check_oauth
from frontend.geo.runner import RoleWatch
from frontend.http.app import RestApp
from frontend.indexes.applier import Appliers
from frontend.native.asyncio_driver import AioFrontend
from rangetable.config import FrontendConfig
from rangetable.kernel.gc_tuning import tune_gc
from rangetable.kernel.tls import server_context

log = logging.getLogger("rangetable.http")


def split_hostport(text: str, default_port: int = 10002) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``; a bare port or host is accepted."""
    text = text.strip()
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme):]
    host, sep, port = text.rpartition(":")
    if not sep:
        return (text or "127.0.0.1", default_port) if not text.isdigit() else ("127.0.0.1", int(text))
    return host.strip("[]") or "127.0.0.1", int(port)


def make_app(cfg: FrontendConfig, own_frontend: bool = True) -> RestApp:
    """The ASGI app with its own asyncio frontend (started by the ASGI lifespan when ``own_frontend``)."""
    specs = [s.strip() for s in cfg.accounts.split(",") if s.strip()]
    return RestApp(AioFrontend(cfg), specs, own_frontend=own_frontend, oauth=cfg.oauth)


SERVERS = ("builtin", "granian", "uvicorn")


async def serve_async(cfg: FrontendConfig) -> None:
    """Serve until SIGTERM/SIGINT with the server ``cfg.http_server`` names."""
    server = cfg.http_server
    host, port = split_hostport(cfg.http)
    app = make_app(cfg, own_frontend=False)
    loop = asyncio.get_running_loop()
    tls = server_context(cfg.cert, cfg.key) if (cfg.cert or cfg.key) else None
    await app.fe.start()
    if cfg.metrics:
        from frontend.metrics import collect_http
        from rangetable.kernel.metrics import serve_metrics

        log.info("metrics on %s", serve_metrics(cfg.metrics, lambda: collect_http(app.fe.id, app.answers)))
    tune_gc()
    appliers = asyncio.create_task(Appliers(app.fe).run())  # the indexes this process may claim
    geo = asyncio.create_task(RoleWatch(app.fe).run())  # a secondary cluster's: the tables this process may follow
    try:
        await _serve(app, host, port, loop, server, cfg.reuse_port, tls, cfg)
    finally:
        appliers.cancel()
        geo.cancel()
        await app.fe.close()


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that other processes may bind too (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def _serve(app: RestApp, host: str, port: int, loop: asyncio.AbstractEventLoop, server: str,
                 reuse_port: bool = False, tls: ssl.SSLContext | None = None,
                 cfg: FrontendConfig | None = None) -> None:
    scheme = "https" if tls else "http"
    if reuse_port and server == "granian":
        raise ValueError("--reuse-port works with --http-server builtin or uvicorn (granian binds its own socket)")
    if server == "builtin":
        from frontend.http.listener import serve

        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("http frontend %s serving Azure Table REST on %s://%s:%d", app.fe.id, scheme, host, port)
        await serve(app, host, port, stop, reuse_port, tls)
        return
    if server == "uvicorn":
        import uvicorn

        certs = {"ssl_certfile": cfg.cert, "ssl_keyfile": cfg.key} if tls and cfg else {}
        userver = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", log_level="warning",
                                                access_log=False, **certs))
        await userver.serve(sockets=[reuse_port_socket(host, port)] if reuse_port else None)
        return
    from pathlib import Path

    from granian.constants import Interfaces
    from granian.log import LogLevels
    from granian.server.embed import Server

    gserver = Server(app, address=host, port=port, interface=Interfaces.ASGI, log_access=False,
                     log_level=LogLevels.warning, backlog=1024, websockets=False,
                     ssl_cert=Path(cfg.cert) if tls and cfg else None,
                     ssl_key=Path(cfg.key) if tls and cfg else None)

    def stop_granian() -> None:
        gserver.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_granian)
    log.info("http frontend %s serving Azure Table REST on %s://%s:%d", app.fe.id, scheme, host, port)
    await gserver.serve()


def run(cfg: FrontendConfig) -> None:
    """Entry point for ``rangetable http-frontend``; raises ValueError for an unknown server."""
    if cfg.http_server not in SERVERS:
        raise ValueError(f"--http-server must be one of {', '.join(SERVERS)}, not {cfg.http_server!r}")
    if cfg.reuse_port and cfg.http_server == "granian":
        raise ValueError("--reuse-port works with --http-server builtin or uvicorn (granian binds its own socket)")
    if cfg.cert or cfg.key:
        server_context(cfg.cert, cfg.key)  # a bad certificate fails before anything starts
    check_oauth(cfg.oauth, bool(cfg.cert))
    logging.getLogger("granian").setLevel(logging.WARNING)
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve_async(cfg))
