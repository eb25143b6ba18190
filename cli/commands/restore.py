"""Restore a backup written by ``rangetable backup`` into a new data root.

Everything is checked before anything is written: the manifest (absent: an incomplete backup), and every file's
size and SHA-256 against it (a damaged backup is refused, naming the files). Then the layout the source cluster
ran is laid out:

* a replicated cluster (``--replicas N``, the default 3): the range's one copy goes to **every server of its
  replica set**, ``R/servers/<id>/ranges/<range id>`` — all copies of a range hold the same batch, as after a
  clean stop of the whole cluster, and the restored map names them all in sync. ``rangetable up --data-dir R``
  then starts like a cluster that was stopped: each range's replicas are sealed and the furthest (all equal) is
  promoted; writes need ``--min-insync`` copies at once, no copy has to be streamed. More ``--servers`` than the
  backup had start empty and the balancer moves replicas onto them; a server of the backup that never starts
  again is declared dead after its lease and its replicas are rebuilt elsewhere (``--rereplicate-after-s``);
* a ``--replicas 1`` cluster: the one-copy layout under the shared root, ``R/ranges/<range id>``.

With ``--meta etcd://HOST:PORT/PREFIX`` the meta store is written into that etcd prefix, which must be empty, in
transactions that each require that no coordinator has won a term there yet (one that fails removes what was
put), and ``R`` holds only ``servers/<id>/``: each partition server's directory, for ``rangetable up --meta`` on
one host or to copy to the server's own host.

SST files are immutable in RocksDB, so they are hard-linked from the backup (copied when the backup lies on
another filesystem); every other file is copied, because RocksDB and rocksdict may write those in place and the
backup must stay as it was. The restored meta store keeps the map, the catalog, ACLs and client keys, but
forgets the servers' endpoints: they belonged to the source cluster, and the new cluster's servers register
their own when they start (until then nothing is routed to an old address).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from typing import Any

from coordinator.backup import FORMAT, MANIFEST
from rangetable.kernel.checkpoint import SST_SUFFIX

FORMATS = (1, FORMAT)  # 1: written in place by older versions (sizes, no checksums; one-copy layout only)


class RestoreError(Exception):
    """The backup is incomplete or damaged, or the target is not an empty directory (InvalidInput)."""


def read_manifest(src: str) -> dict[str, Any]:
    """The manifest of a complete backup; raises RestoreError for a missing, torn or unknown one."""
    path = os.path.join(src, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise RestoreError(f"{src} holds no {MANIFEST}: not a backup, or an incomplete one "
                           "(the manifest is written last)") from None
    except (OSError, ValueError) as exc:
        raise RestoreError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise RestoreError(f"{path} is not a backup manifest of format {' or '.join(map(str, FORMATS))}")
    return manifest


def _component(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name or os.sep in name or name in (".", ".."):
        raise RestoreError(f"the manifest names a bad {what}: {name!r}")
    return name


def replicated(manifest: dict[str, Any]) -> bool:
    """True when the backup comes from a cluster keeping several copies of each range."""
    return any(r.get("replicas") for r in manifest["ranges"])


def stores(manifest: dict[str, Any]) -> list[tuple[str, list[dict]]]:
    """Every store of a backup as (directory relative to the backup, its files)."""
    out = [("coordinator", manifest["coordinator"]["files"])]
    out += [(os.path.join("ranges", _component(r["id"], "range id")), r["files"]) for r in manifest["ranges"]]
    return out


def placements(manifest: dict[str, Any]) -> list[tuple[str, str, list[dict]]]:
    """Where each store of the backup goes: (directory in the backup, directory in the data root, files)."""
    out = [("coordinator", "coordinator", manifest["coordinator"]["files"])]
    for r in manifest["ranges"]:
        src = os.path.join("ranges", _component(r["id"], "range id"))
        servers = [_component(s, "server id") for s in r.get("replicas") or []]
        if servers:
            out += [(src, os.path.join("servers", s, "ranges", r["id"]), r["files"]) for s in servers]
        else:
            out.append((src, src, r["files"]))
    return out


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def missing_files(src: str, manifest: dict[str, Any]) -> list[str]:
    """Files the manifest lists that are absent from ``src``, have another size or (format 2) another SHA-256
    (pure check, no writes)."""
    bad = []
    for rel, files in stores(manifest):
        for f in files:
            p = os.path.join(src, rel, _component(f["name"], "file name"))
            try:
                size = os.path.getsize(p)
            except OSError:
                bad.append(f"{p} is missing")
                continue
            if size != f["size"]:
                bad.append(f"{p} has {size} bytes, the manifest says {f['size']}")
            elif "sha256" in f and _sha256(p) != f["sha256"]:
                bad.append(f"{p} does not match its SHA-256 in the manifest (corrupted)")
    return bad


def _place(src: str, dst: str) -> bool:
    """Hard-link an SST file (True), or copy any other file, or an SST across filesystems (False)."""
    if src.endswith(SST_SUFFIX):
        try:
            os.link(src, dst)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
    shutil.copy2(src, dst)
    return False


def _fix_meta(data_dir: str, in_sync: bool) -> int:
    """In the restored meta store: blank the source cluster's server endpoints and (``in_sync``) name every
    replica of a range in sync, since every copy now holds the same batch; returns how many servers it knew."""
    from coordinator.meta.store import MetaStore

    meta = MetaStore(data_dir)
    try:
        servers = meta.items(b"server/")
        puts = {k: {**v, "endpoint": "", "pid": 0} for k, v in servers}
        if in_sync:
            for k, rec in meta.items(b"range/"):
                if rec.get("replicas"):
                    puts[k] = {**rec, "insync": list(rec["replicas"])}
        meta.commit(puts)
        return len(servers)
    finally:
        meta.close()


ETCD_BATCH = 100  # puts per etcd transaction (etcd's default --max-txn-ops is 128)


def _etcd_target(meta_url: str) -> tuple[Any, str]:
    """The etcd client and prefix of ``--meta``; RestoreError unless etcd answers and the prefix is empty."""
    from coordinator.etcd.client import EtcdClient, parse_url

    try:
        base, prefix = parse_url(meta_url)
    except ValueError as exc:
        raise RestoreError(str(exc)) from None
    client = EtcdClient(base, timeout_s=10.0)
    try:
        kvs, _ = client.scan(f"{prefix}/".encode())
    except Exception as exc:  # unreachable, refused: say so before anything is written
        raise RestoreError(f"cannot read etcd at {meta_url}: {exc}") from None
    if kvs:
        raise RestoreError(f"the etcd prefix {prefix!r} at {base} is not empty ({len(kvs)} keys): restore needs a new "
                           "prefix (a cluster's state lives there)")
    return client, prefix


def _seed_etcd(client: Any, prefix: str, data_dir: str) -> int:
    """Copy the restored meta store into ``<prefix>/meta/`` (as ``coordinator/meta/etcd_store.py`` keeps it), in
    transactions that each require that no coordinator has won a term on the prefix yet; returns the keys."""
    import msgpack

    from coordinator.etcd.client import absent, delete_op, put_op
    from coordinator.leadership.etcd_election import term_key
    from coordinator.meta.store import MetaStore

    meta = MetaStore(data_dir)
    try:
        items = meta.items(b"")
    finally:
        meta.close()
    root = f"{prefix}/meta/".encode()
    ops = [put_op(root + k, msgpack.packb(v, use_bin_type=True)) for k, v in items]
    done = 0
    try:
        for i in range(0, len(ops), ETCD_BATCH):
            ok, _ = client.txn([absent(term_key(prefix))], ops[i:i + ETCD_BATCH])
            if not ok:
                raise RestoreError(f"a coordinator won a term on the etcd prefix {prefix!r} during the restore: "
                                   "start the coordinators only once restore is done")
            done = i + ETCD_BATCH
    except BaseException:
        keys = [root + k for k, _ in items[:done]]
        for i in range(0, len(keys), ETCD_BATCH):  # nothing half-written: remove what this restore put there
            client.txn([], [delete_op(k) for k in keys[i:i + ETCD_BATCH]])
        raise
    return len(items)


def restore(src: str, data_dir: str, meta_url: str = "") -> dict[str, Any]:
    """Lay the backup at ``src`` out as the data root ``data_dir`` (absent or empty); returns a summary. With
    ``meta_url`` (``etcd://host:port/prefix``, an empty prefix) the meta store goes into etcd instead of
    ``data_dir/coordinator``, for coordinators started with ``--meta``.

    Raises RestoreError before writing anything when the backup is incomplete or damaged or ``data_dir`` (or
    the etcd prefix) is in use; a failure while writing removes what was written.
    """
    manifest = read_manifest(src)
    if os.path.lexists(data_dir) and (not os.path.isdir(data_dir) or os.listdir(data_dir)):
        raise RestoreError(f"{data_dir} exists and is not empty: restore needs a new data root")
    etcd = _etcd_target(meta_url) if meta_url else None
    t0 = time.monotonic()
    bad = missing_files(src, manifest)
    if bad:
        raise RestoreError(f"the backup in {src} is damaged, nothing was restored: " + "; ".join(bad[:5])
                           + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))
    verified_s = time.monotonic() - t0
    plan = placements(manifest)
    created = not os.path.lexists(data_dir)
    linked = copied = 0
    try:
        for src_rel, dst_rel, files in plan:
            os.makedirs(os.path.join(data_dir, dst_rel))
            for f in files:
                if _place(os.path.join(src, src_rel, f["name"]), os.path.join(data_dir, dst_rel, f["name"])):
                    linked += 1
                else:
                    copied += 1
        many = replicated(manifest)
        servers = _fix_meta(data_dir, many)
        keys = 0
        if etcd is not None:
            keys = _seed_etcd(etcd[0], etcd[1], data_dir)
            shutil.rmtree(os.path.join(data_dir, "coordinator"))  # coordinators on etcd keep nothing here
    except BaseException:
        if created:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            for name in os.listdir(data_dir):
                shutil.rmtree(os.path.join(data_dir, name), ignore_errors=True)
        raise
    replica_servers = sorted({s for r in manifest["ranges"] for s in r.get("replicas") or []})
    return {"from": src, "data_dir": data_dir, "tables": manifest["tables"], "ranges": len(manifest["ranges"]),
            "replicas": int(manifest.get("replicas", 1)) if many else 1, "servers": replica_servers,
            "copies": len(plan) - 1, "linked": linked, "copied": copied, "known_servers": servers,
            "meta": meta_url or os.path.join(data_dir, "coordinator"), "etcd_keys": keys,
            "backup_created": manifest["created"], "verified_seconds": round(verified_s, 3),
            "seconds": round(time.monotonic() - t0, 3)}
