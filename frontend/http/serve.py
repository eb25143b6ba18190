"""The ``rangetable http-frontend`` process: the REST app on granian, in one process.

granian's embedded server runs the ASGI app on *this* process's asyncio loop (its HTTP parsing and
socket work happen on a Rust thread), so the frontend's ZeroMQ sockets, the app and the server share
one loop and one pid — which keeps CPU accounting (``rangetable bench http``) and supervision simple.
``--http-server uvicorn`` is a fallback for environments without granian (and was used for the
measurement in ``docs/http.md``).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from frontend.aio import AioFrontend
from frontend.http.app import RestApp
from rangetable.config import FrontendConfig
from rangetable.gc_tuning import tune_gc

log = logging.getLogger("rangetable.http")


def split_hostport(text: str, default_port: int = 10002) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``; a bare port or host is accepted."""
    text = text.strip()
    if text.startswith("http://"):
        text = text[len("http://"):]
    host, sep, port = text.rpartition(":")
    if not sep:
        return (text or "127.0.0.1", default_port) if not text.isdigit() else ("127.0.0.1", int(text))
    return host.strip("[]") or "127.0.0.1", int(port)


def make_app(cfg: FrontendConfig, own_frontend: bool = True) -> RestApp:
    """The ASGI app with its own asyncio frontend (started by the ASGI lifespan when ``own_frontend``)."""
    specs = [s.strip() for s in cfg.accounts.split(",") if s.strip()]
    return RestApp(AioFrontend(cfg), specs, own_frontend=own_frontend)


async def serve_async(cfg: FrontendConfig, server: str = "granian") -> None:
    """Serve until SIGTERM/SIGINT."""
    host, port = split_hostport(cfg.http)
    app = make_app(cfg, own_frontend=False)
    loop = asyncio.get_running_loop()
    await app.fe.start()
    tune_gc()
    try:
        await _serve(app, host, port, loop, server)
    finally:
        await app.fe.close()


async def _serve(app: RestApp, host: str, port: int, loop: asyncio.AbstractEventLoop, server: str) -> None:
    if server == "uvicorn":
        import uvicorn

        userver = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", log_level="warning",
                                                access_log=False))
        await userver.serve()
        return
    from granian.constants import Interfaces
    from granian.server.embed import Server

    gserver = Server(app, address=host, port=port, interface=Interfaces.ASGI, log_access=False,
                     log_level="warning", backlog=1024, websockets=False)

    def stop() -> None:
        gserver.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    log.info("http frontend %s serving Azure Table REST on http://%s:%d", app.fe.id, host, port)
    await gserver.serve()


def run(cfg: FrontendConfig, server: str = "granian") -> None:
    """Entry point for ``rangetable http-frontend``."""
    logging.getLogger("granian").setLevel(logging.WARNING)
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve_async(cfg, server))
