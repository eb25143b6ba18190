"""CURVE on every ZeroMQ socket: key files, who may say what, and the helpers every process uses.

A cluster has one key pair per role (``coordinator``, ``partition-server``, ``frontend``) plus an
``admin`` pair for the local tools, kept in ``<data-dir>/keys/`` as ZeroMQ certificate files
(``<role>.key`` public, ``<role>.key_secret`` both halves; mode 0600), made by ``rangetable up`` on
first start or ``rangetable keys init``. Native clients carry a key registered to an account
(``rangetable keys add``; the registry lives in the coordinator's meta store).

* A server socket (:func:`secure_server`) is a CURVE server in a ZAP domain named after its role;
  the process's :class:`Guard` thread answers ZAP requests from that domain's allow-list
  (:data:`ALLOWED_PEERS` plus, on a frontend's native endpoint, the registered client keys) and logs
  refused peers — a wrong key, or no CURVE at all — at most once per 10 s per kind.
* A client socket (:func:`secure_client`) authenticates with its own pair and checks the server's
  public key. Tools and the native client find keys by endpoint (:func:`connect`), from the
  connection info (``cluster.json``) registered with :func:`remember_cluster`.
* What an authenticated peer may ask for is :func:`may`: only the coordinator sends control
  commands to a partition server, only frontends (and the coordinator) data requests, only
  partition servers heartbeat, only the admin key manages client keys and takes backups.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth
from zmq.utils.monitor import parse_monitor_message

from rangetable import protocol
from rangetable.data_dir import default_data_dir

log = logging.getLogger("rangetable.curve")

ROLES = ("coordinator", "partition-server", "frontend", "admin")
SERVER_ROLES = ("coordinator", "partition-server", "frontend")
KEYS_DIR = "keys"
REFUSAL_LOG_EVERY_S = 10.0

# Which authenticated roles may connect to a server of each role (the ZAP allow-lists). A frontend's
# native endpoint also admits every registered client key.
ALLOWED_PEERS: dict[str, frozenset[str]] = {
    "coordinator": frozenset({"partition-server", "frontend", "admin"}),
    "partition-server": frozenset({"coordinator", "frontend"}),
    "frontend": frozenset({"admin"}),
}
# What each of them may ask for: (server role, kind of request) -> roles allowed. "client" is a
# registered client key.
_MAY: dict[tuple[str, str], frozenset[str]] = {
    ("partition-server", "data"): frozenset({"frontend", "coordinator"}),
    ("partition-server", "control"): frozenset({"coordinator"}),
    ("partition-server", "ping"): frozenset({"frontend", "coordinator"}),
    ("coordinator", "heartbeat"): frozenset({"partition-server"}),
    ("coordinator", "keys_admin"): frozenset({"admin"}),
    ("coordinator", "keys_list"): frozenset({"admin", "frontend"}),
    ("coordinator", "admin"): frozenset({"admin", "frontend"}),
    ("coordinator", "backup"): frozenset({"admin"}),  # a backup reads every table: the operator's key only
    ("coordinator", "geo"): frozenset({"admin"}),  # a cluster's geo role (failover): the operator's key only
    ("frontend", "request"): frozenset({"admin", "client"}),
}


def may(server: str, kind: str, peer: str | None) -> bool:
    """True when a peer of role ``peer`` may send a request of ``kind`` to a server of role ``server``."""
    return peer is not None and peer in _MAY.get((server, kind), frozenset())


# --- key files --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair, Z85-encoded (40 bytes each); ``secret`` is None for a public key alone."""

    public: bytes
    secret: bytes | None = None

    @classmethod
    def generate(cls) -> KeyPair:
        """A fresh key pair."""
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @property
    def user_id(self) -> str:
        """How ZAP names this key (the ``User-Id`` of every message its holder sends)."""
        return self.public.decode("ascii")


def valid_public_key(text: str) -> bool:
    """True for a Z85-encoded 32-byte key."""
    if not isinstance(text, str) or len(text) != 40:
        return False
    try:
        zmq.utils.z85.decode(text.encode("ascii"))
    except (ValueError, KeyError, UnicodeEncodeError):
        return False
    return True


def _write_private(path: str, text: str) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def write_key_files(directory: str, name: str, pair: KeyPair) -> None:
    """Write ``name.key`` (public) and, with a secret, ``name.key_secret`` — ZeroMQ certificate
    files (``zmq.auth.load_certificate`` reads them), mode 0600."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    head = f"#   ZeroMQ CURVE certificate of rangetable's {name!r}\nmetadata\ncurve\n"
    public = f'    public-key = "{pair.public.decode()}"\n'
    if pair.secret is not None:
        _write_private(os.path.join(directory, name + ".key_secret"),
                       head + public + f'    secret-key = "{pair.secret.decode()}"\n')
    _write_private(os.path.join(directory, name + ".key"), head + public)


def read_key_file(path: str) -> KeyPair:
    """A key pair (or public key) from a ZeroMQ certificate file; raises ValueError when unusable."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read CURVE key {path}: {exc}") from None
    if public is None or not valid_public_key(public.decode("ascii", "replace")):
        raise ValueError(f"{path} holds no CURVE public key")
    return KeyPair(public, secret)


class KeyRing:
    """The cluster's role keys: every role's public key, and the secret of the roles this host holds."""

    def __init__(self, directory: str, pairs: dict[str, KeyPair]) -> None:
        self.directory = directory
        self.pairs = pairs
        self._roles = {p.user_id: role for role, p in pairs.items()}

    @classmethod
    def create(cls, directory: str) -> KeyRing:
        """Make the key pairs that do not exist yet (directory 0700, files 0600), then load them all."""
        for role in ROLES:
            if not os.path.exists(os.path.join(directory, role + ".key_secret")):
                write_key_files(directory, role, KeyPair.generate())
        return cls.load(directory)

    @classmethod
    def load(cls, directory: str, own: str | None = None) -> KeyRing:
        """Read the keys in ``directory``; ``own`` names the role whose secret must be there."""
        if not os.path.isdir(directory):
            raise ValueError(f"no CURVE keys in {directory}: run `rangetable keys init --keys-dir {directory}` "
                             "(or start the cluster once with `rangetable up`)")
        pairs = {}
        for role in ROLES:
            secret, public = os.path.join(directory, role + ".key_secret"), os.path.join(directory, role + ".key")
            if os.path.exists(secret):
                pairs[role] = read_key_file(secret)
            elif os.path.exists(public):
                pairs[role] = read_key_file(public)
        missing = [r for r in SERVER_ROLES if r not in pairs]
        if missing:
            raise ValueError(f"{directory} lacks the public keys of {', '.join(missing)}")
        if own is not None and (own not in pairs or pairs[own].secret is None):
            raise ValueError(f"{directory} lacks {own}.key_secret, the secret key of this process")
        return cls(directory, pairs)

    def pair(self, role: str) -> KeyPair:
        """The pair of a role (with its secret)."""
        p = self.pairs.get(role)
        if p is None or p.secret is None:
            raise ValueError(f"{self.directory} lacks {role}.key_secret")
        return p

    def public(self, role: str) -> bytes:
        """The public key of a role."""
        return self.pairs[role].public

    def role_of(self, user_id: str | None) -> str | None:
        """The role whose key ZAP names ``user_id``, or None (a client key, or nobody)."""
        return self._roles.get(user_id) if user_id else None

    def allowed(self, server_role: str) -> frozenset[str]:
        """The ``User-Id``s (Z85 public keys) a server of this role admits."""
        return frozenset(self.pairs[r].user_id for r in ALLOWED_PEERS[server_role] if r in self.pairs)

    def connection_info(self, client: str = "admin") -> dict[str, Any]:
        """The ``curve`` section of ``cluster.json``: the servers' public keys and a client pair."""
        pair = self.pair(client)
        assert pair.secret is not None  # pair() refuses a role without its secret
        return {"servers": {r: self.public(r).decode() for r in SERVER_ROLES},
                "client": {"public": pair.public.decode(), "secret": pair.secret.decode(), "role": client}}


def keys_dir(data_dir: str, configured: str = "") -> str:
    """The keys directory of a process: ``--keys-dir`` when given, else ``<data-dir>/keys``."""
    return configured or os.path.join(data_dir, KEYS_DIR)


# --- sockets ----------------------------------------------------------------------------------------


def secure_server(sock: zmq.Socket, pair: KeyPair, domain: str) -> zmq.Socket:
    """Make ``sock`` a CURVE server authenticated by the ZAP domain ``domain`` (call before bind)."""
    sock.curve_secretkey = pair.secret
    sock.curve_publickey = pair.public
    sock.curve_server = True
    sock.zap_domain = domain.encode()
    return sock


def secure_client(sock: zmq.Socket, pair: KeyPair, server_public: bytes) -> zmq.Socket:
    """Make ``sock`` a CURVE client holding ``pair`` that only talks to ``server_public`` (before connect)."""
    sock.curve_serverkey = server_public
    sock.curve_publickey = pair.public
    sock.curve_secretkey = pair.secret
    return sock


_endpoints: dict[str, tuple[bytes, KeyPair]] = {}
_lock = threading.Lock()


def remember(endpoint: str, server_public: bytes, client: KeyPair) -> None:
    """Use ``client`` and ``server_public`` for every later :func:`connect` to ``endpoint``."""
    with _lock:
        _endpoints[endpoint] = (server_public, client)


def remember_cluster(doc: dict) -> None:
    """Register the keys of a ``cluster.json`` (or a connection file of ``rangetable keys add``) for
    its endpoints: native endpoints, coordinator and PUB."""
    info = doc.get("curve") if isinstance(doc, dict) else None
    if not isinstance(info, dict):
        return
    c = info["client"]
    client = KeyPair(c["public"].encode(), c["secret"].encode())
    servers = info["servers"]
    for ep in [doc.get("native"), *doc.get("frontends", [])]:
        if ep and "frontend" in servers:
            remember(ep, servers["frontend"].encode(), client)
    for name in ("coordinator", "pub"):
        if doc.get(name) and "coordinator" in servers:
            for ep in doc[name].split(","):  # several coordinators: one key, every endpoint
                remember(ep, servers["coordinator"].encode(), client)


def read_cluster_doc(path: str) -> dict[str, Any]:
    """A cluster's connection file (its ``cluster.json``, a ``rangetable keys add`` file, or the copy of a
    secondary's source that ``up --secondary-of`` kept); ValueError unless it holds curve keys."""
    import json

    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("curve"), dict):
        raise ValueError(f"{path} is not a cluster's connection file (it has no curve keys)")
    return doc


def keys_for(endpoint: str) -> tuple[bytes, KeyPair] | None:
    """The (server public key, client pair) remembered for an endpoint; tries the default data
    dir's ``cluster.json`` (``$RANGETABLE_DATA_DIR`` or ``./rangetable-data``) when none is."""
    with _lock:
        found = _endpoints.get(endpoint)
    if found is None:
        import json

        path = os.path.join(default_data_dir(), "cluster.json")
        try:
            with open(path) as f:
                remember_cluster(json.load(f))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        with _lock:
            found = _endpoints.get(endpoint)
    return found


def connect(sock: zmq.Socket, endpoint: str) -> zmq.Socket:
    """Connect a client socket with the keys remembered for ``endpoint``; raises ValueError when none
    are known (a cluster answers no peer without a key)."""
    found = keys_for(endpoint)
    if found is None:
        raise ValueError(f"no CURVE key known for {endpoint}: use the cluster's connection info "
                         "(TableServiceClient.from_cluster(DATA_DIR or FILE), or --data-dir)")
    secure_client(sock, found[1], found[0])
    sock.connect(endpoint)
    return sock


# --- the ZAP handler and refusal log ------------------------------------------------------------


class RefusalLog:
    """Logs refused peers, at most one line per kind every ``every_s`` (with how many were held back)."""

    def __init__(self, every_s: float = REFUSAL_LOG_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 emit: Callable[[str], None] | None = None) -> None:
        self.every_s = every_s
        self.clock = clock
        self.emit = emit or (lambda line: log.warning("%s", line))
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def refused(self, kind: str, detail: str) -> bool:
        """Record one refusal; returns True when it was logged."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        self.emit(f"refused {detail}" + (f" ({held} more refusals of this kind held back)" if held else ""))
        return True


_FAILED: dict[int, str] = {  # handshake failure events, as monitor messages carry them (int)
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "a peer that does not speak CURVE (or a malformed handshake)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "a peer whose handshake failed",
}


class Guard:
    """The ZAP handler of one process's ZeroMQ context, in a thread of its own (it only works when a
    peer connects), plus the monitor of every server socket so refused handshakes are logged."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.ctx = ctx
        self.refusals = RefusalLog()
        self._domains: dict[str, Callable[[], Collection[str]]] = {}
        self._monitors: list[tuple[zmq.Socket, str]] = []
        self._new: list[tuple[zmq.Socket, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Bound here, before any server socket binds: libzmq lets every CURVE client in while no
        # ZAP handler is bound.
        self.auth = zmq.auth.Authenticator(ctx, log=logging.getLogger("rangetable.curve.zap"))
        self.auth.start()
        self._thread = threading.Thread(target=self._run, name="curve-guard", daemon=True)
        self._thread.start()

    def allow(self, domain: str, keys: Callable[[], Collection[str]]) -> None:
        """Admit, on sockets of ZAP domain ``domain``, the peers whose ``User-Id`` is in ``keys()``
        (called at each handshake, so the set may change while the process runs)."""
        self._domains[domain] = keys
        self.auth.configure_curve_callback(domain, credentials_provider=self)

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP's question for one handshake: may this public key connect to this domain?"""
        allowed = self._domains.get(domain)
        user = key.decode("ascii", "replace")
        if allowed is not None and user in allowed():
            return True
        self.refusals.refused(f"key:{domain}", f"CURVE key {user} on the {domain} endpoint: not on its allow-list")
        return False

    def watch(self, sock: zmq.Socket, what: str) -> None:
        """Log refused handshakes on a server socket (call before bind)."""
        mon = protocol.monitor_socket(sock, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        with self._lock:
            self._new.append((mon, what))

    def _run(self) -> None:
        loop = asyncio.new_event_loop()  # pyzmq's handle_zap_message is a coroutine (ours never waits)
        poller = zmq.Poller()
        zap = self.auth.zap_socket
        poller.register(zap, zmq.POLLIN)
        while not self._stop.is_set():
            with self._lock:
                new, self._new = self._new, []
            for mon, what in new:
                poller.register(mon, zmq.POLLIN)
                self._monitors.append((mon, what))
            try:
                ready = dict(poller.poll(200))
            except zmq.ZMQError:
                break
            if zap in ready:
                try:
                    loop.run_until_complete(self.auth.handle_zap_message(zap.recv_multipart()))
                except zmq.ZMQError:
                    break
            for mon, what in self._monitors:
                if mon in ready:
                    try:
                        ev = parse_monitor_message(mon.recv_multipart(zmq.NOBLOCK))
                    except zmq.ZMQError:
                        continue
                    self.refusals.refused(f"handshake:{what}:{ev['event']}",
                                          f"{_FAILED.get(ev['event'], 'a handshake')} on {what} "
                                          f"{ev['endpoint'].decode(errors='replace')}")
        for mon, _ in self._monitors:
            mon.close(0)
        self.auth.stop()
        loop.close()

    def stop(self) -> None:
        """Stop the thread and unbind the ZAP endpoint."""
        self._stop.set()
        self._thread.join(timeout=2)
        with _lock:
            if _guards.get(id(self.ctx)) is self:
                del _guards[id(self.ctx)]


_guards: dict[int, Guard] = {}


def guard(ctx: zmq.Context) -> Guard:
    """The :class:`Guard` of a context (started on first use; one ZAP handler per context)."""
    with _lock:
        g = _guards.get(id(ctx))
        if g is None:
            g = _guards[id(ctx)] = Guard(ctx)
        return g


def serve_secured(sock: zmq.Socket, ring: KeyRing, role: str, what: str,
                  extra: Callable[[], Collection[str]] | None = None) -> zmq.Socket:
    """Make ``sock`` a CURVE server of ``role`` whose allow-list is :data:`ALLOWED_PEERS` (plus
    ``extra()``, e.g. registered client keys), with refused handshakes logged (call before bind)."""
    g = guard(sock.context)
    base = ring.allowed(role)
    g.allow(role, (lambda: base | frozenset(extra())) if extra else (lambda: base))
    g.watch(sock, what)
    return secure_server(sock, ring.pair(role), role)
