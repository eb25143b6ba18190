"""The dashboard process: a poller thread and a small stdlib HTTP server.

``GET /`` is the page (one self-contained HTML file, ``page.html``, with the current state and
heatmap inlined so it paints without a round trip), ``GET /api/state`` the servers, ranges and
events, ``GET /api/heatmap?window=S&width=N&height=size|even`` the key-space heatmap, and
``GET /api/health`` a liveness check. Bad parameters get a 400 with Azure's error code.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cli.dashboard.heatmap import HEIGHT_MODES
from cli.dashboard.state import Watch
from rangetable.errors import TableError

log = logging.getLogger("rangetable.dashboard")
PAGE = Path(__file__).with_name("page.html")
MAX_WIDTH = 2000  # heatmap buckets per answer
DEFAULT_WINDOW_S = 900.0


def heatmap_params(query: str, history_s: float) -> tuple[float, int, str]:
    """Parse ``window``, ``width`` and ``height`` of a heatmap request; raises InvalidQueryParameterValue."""
    q = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    try:
        window = float(q.get("window", min(DEFAULT_WINDOW_S, history_s)))
        width = int(q.get("width", 600))
    except ValueError:
        raise TableError("InvalidQueryParameterValue", "window must be a number of seconds and width an integer") \
            from None
    if not 0 < window <= history_s:
        raise TableError("InvalidQueryParameterValue", f"window must be in (0, {history_s:g}] seconds")
    if not 1 <= width <= MAX_WIDTH:
        raise TableError("InvalidQueryParameterValue", f"width must be in [1, {MAX_WIDTH}]")
    mode = q.get("height", "size")
    if mode not in HEIGHT_MODES:
        raise TableError("InvalidQueryParameterValue", f"height must be one of {', '.join(HEIGHT_MODES)}")
    return window, width, mode


def render_page(state: dict[str, Any], heat: dict[str, Any]) -> bytes:
    """The page with the current state and heatmap inlined (``</`` escaped so JSON cannot close the script)."""
    boot = json.dumps({"state": state, "heatmap": heat}).replace("</", "<\\/")
    return PAGE.read_text(encoding="utf-8").replace("/*BOOT*/null", boot).encode("utf-8")


class Dashboard:
    """A running dashboard: the watch, its poller thread and the HTTP server."""

    def __init__(self, watch: Watch, host: str, port: int, history_s: float) -> None:
        self.watch = watch
        self.history_s = history_s
        self.stop_event = threading.Event()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.poller = threading.Thread(target=watch.run, args=(self.stop_event,), name="poller", daemon=True)

    @property
    def url(self) -> str:
        """The page's URL."""
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # a bound socket's getsockname() names its host as a str
        return f"http://{host}:{port}/"

    def serve_forever(self) -> None:
        """Start polling and serve until :meth:`shutdown`."""
        self.poller.start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.stop_event.set()
            self.httpd.server_close()

    def shutdown(self) -> None:
        """Stop serving (from another thread or a signal handler's thread)."""
        self.stop_event.set()
        self.httpd.shutdown()


def _handler(dash: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "rangetable-dashboard"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request is noise here
            log.debug(fmt, *args)

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode("utf-8"), "application/json")

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            try:
                if url.path in ("/", "/index.html"):
                    window, width, mode = heatmap_params(url.query, dash.history_s)
                    page = render_page(dash.watch.state(), dash.watch.heatmap(window, width, mode))
                    self._send(200, page, "text/html; charset=utf-8")
                elif url.path == "/api/state":
                    self._json(200, dash.watch.state())
                elif url.path == "/api/heatmap":
                    window, width, mode = heatmap_params(url.query, dash.history_s)
                    self._json(200, dash.watch.heatmap(window, width, mode))
                elif url.path == "/api/health":
                    self._json(200, {"ok": True, "polls": dash.watch.polls, "error": dash.watch.error})
                else:
                    raise TableError("InvalidUri", f"no such page: {url.path}")
            except TableError as exc:
                self._json(exc.status_code, {"error": exc.to_wire()})

        def _refuse(self) -> None:
            self._json(405, {"error": {"code": "UnsupportedHttpVerb",
                                       "message": f"{self.command} is not allowed; the dashboard is read-only"}})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    return Handler
