"""Coordinator ops for the registry of native clients' CURVE keys (``rangetable keys add|list|revoke``).

* ``keys_add {name, account, public}`` → the record; ``public`` is the client's CURVE public key
  (Z85, 40 characters; the secret never leaves the client). Names are 1-64 characters of letters,
  digits, ``-``, ``_``, ``.``; a name or key already registered → 409 ``EntityAlreadyExists``.
* ``keys_revoke {name}`` → ``None``; an unknown name → 404 ``ResourceNotFound``.
* ``keys_list {}`` → ``{"version": int, "keys": [record…]}``.

A record is ``{"name", "account", "public", "created"}``, stored under ``clientkey/<name>``; the
version (``meta/keys_version``) grows on every change and rides on every ``hugz`` (one is sent at
once after a change), so frontends fetch the list again within milliseconds (the Clone pattern, as
for the map). Only the admin key may
add or revoke (``rangetable.curve.may``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rangetable.curve import valid_public_key
from rangetable.errors import TableError

if TYPE_CHECKING:
    from coordinator.state.cluster import Cluster
    from coordinator.state.maps import MapService

OPS = frozenset({"keys_add", "keys_revoke", "keys_list"})
PREFIX = b"clientkey/"
VERSION_KEY = b"meta/keys_version"
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
ACCOUNT = re.compile(r"[a-z0-9]{3,24}")


def load(maps: MapService) -> tuple[int, dict[str, dict]]:
    """The stored version and records (name → record)."""
    version = 0
    for k, v in maps.meta_store().items(VERSION_KEY):
        if k == VERSION_KEY:
            version = int(v)
        break
    return version, {k[len(PREFIX):].decode(): v for k, v in maps.meta_store().items(PREFIX)}


def validate(req: dict, records: dict[str, dict], reserved: set[str]) -> dict:
    """Check a ``keys_add`` request against the registry; returns the record to store."""
    name, account, public = req.get("name"), req.get("account"), req.get("public")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise TableError("InvalidInput", "name must be 1-64 letters, digits, '-', '_' or '.'")
    if not isinstance(account, str) or not ACCOUNT.fullmatch(account):
        raise TableError("InvalidInput", "account must be 3-24 lower-case letters and digits")
    if not isinstance(public, str) or not valid_public_key(public):
        raise TableError("InvalidInput", "public must be a Z85-encoded CURVE public key (40 characters)")
    if name in records:
        raise TableError("EntityAlreadyExists", f"a client key named {name!r} is already registered")
    if public in reserved or any(r["public"] == public for r in records.values()):
        raise TableError("EntityAlreadyExists", "this public key is already registered")
    return {"name": name, "account": account, "public": public, "created": time.time()}


def handle(cl: Cluster, changed: Callable[[int], None], op: str, req: dict) -> Any:
    """Run one of :data:`OPS` (a change is durable when this returns, and ``changed`` is told the new version
    before its event is recorded: the coordinator sends it on a ``hugz`` at once)."""
    maps = cl.map
    with maps.lock:
        version, records = load(maps)
        if op == "keys_list":
            return {"version": version, "keys": sorted(records.values(), key=lambda r: r["name"])}
        if op == "keys_add":
            rec = validate(req, records, {p.user_id for p in cl.keys.pairs.values()})
            maps.meta_store().commit({PREFIX + rec["name"].encode(): rec, VERSION_KEY: version + 1})
            changed(version + 1)
            cl.events.record("key_added", name=rec["name"], account=rec["account"], public=rec["public"])
            return rec
        name = req.get("name")
        if not isinstance(name, str) or name not in records:
            raise TableError("ResourceNotFound", f"no client key named {name!r}")
        maps.meta_store().commit({VERSION_KEY: version + 1}, [PREFIX + name.encode()])
        changed(version + 1)
        cl.events.record("key_revoked", name=name, account=records[name]["account"])
        return None
