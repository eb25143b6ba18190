"""The one place that opens a RocksDB directory.

Every range store (and anything else holding a RocksDB) must open it through :func:`open_range_db`:

* it forces ``Options(raw_mode=True)`` — rocksdict's default mode pickles values, prefixes keys and
  uses a private comparator, a different on-disk format (stack notes §1, gotcha 1);
* it repairs a ``rocksdict-config.json`` that a stray non-raw open (``Rdict(path)`` in a debug shell)
  rewrote to ``raw_mode:false``, which would otherwise make every later raw open fail with
  ``does not match existing comparator leveldb.BytewiseComparator`` (gotcha 2);
* it sizes each DB for many DBs per process: 8 MiB memtables, one block cache and one write-buffer
  manager shared by every store of the process, bloom filters for point reads, few open files — also
  when it reopens an existing DB (rocksdict would otherwise reload the column family's options from the
  OPTIONS file and drop the table factory);
* every store of the process opens with one of two Options objects (:func:`default_options`), so they share
  one RocksDB Statistics: :func:`rocksdb_tickers` reads the process's counters (keys skipped by iterators,
  block cache hits and misses, write stalls, compaction bytes), which never go back when a store closes;
* it opens every column family the directory holds (RocksDB refuses an open that leaves one out), each with
  the same Options; :func:`column_family` gives a store's view of one, made on first use.

A test checks that no other module calls ``Rdict(`` directly.
"""

from __future__ import annotations

import glob
import json
import os
import re
import threading

import rocksdict

CONFIG_FILE = "rocksdict-config.json"
RAW_CONFIG = {"raw_mode": True, "prefix_extractors": {}}

WRITE_BUFFER_SIZE = 8 << 20  # per memtable
MAX_WRITE_BUFFERS = 3
# L0 files that start a compaction into L1 (RocksDB's default). 16 MiB memtables and 8 L0 files cut a hot
# range's compaction CPU further (docs/scale.md) but made the mixed soak's reads decline over 20 minutes.
L0_COMPACTION_TRIGGER = 4
SHARED_CACHE_BYTES = 128 << 20  # one LRU block cache per process (--block-cache-mb)
SHARED_WRITE_BUFFER_BYTES = 256 << 20  # memtable budget across every DB of the process (--memtable-budget-mb)
MAX_OPEN_FILES = 256  # per DB; many DBs share the process's descriptor limit
# An SST holding DELETION_TRIGGER tombstones within any DELETION_WINDOW consecutive entries is compacted
# soon: deletes in key order (a queue of entities) then stop costing scans. 75 %, not 50 %: the request
# records' purge interleaves a delete with every put in their region, and at 50 % about every second SST
# was marked and rewritten again and again (compaction CPU per write doubled; docs/scale.md).
DELETION_WINDOW = 16384
DELETION_TRIGGER = 12288

_shared_lock = threading.Lock()
_shared: tuple[rocksdict.Cache, rocksdict.WriteBufferManager] | None = None
_defaults_lock = threading.Lock()
_defaults: dict[bool, rocksdict.Options] = {}  # create_if_missing -> the Options every store opens with

# RocksDB's tickers the process reports (rangetable_server_rocksdb_events_total{event}): its name -> ours
TICKERS = {
    "rocksdb.number.db.seek": "seeks",
    "rocksdb.number.db.next": "nexts",
    "rocksdb.number.iter.skip": "iter_skips",  # internal keys an iterator stepped over: tombstones, old versions
    "rocksdb.block.cache.hit": "block_cache_hits",
    "rocksdb.block.cache.miss": "block_cache_misses",
    "rocksdb.stall.micros": "stall_micros",
    "rocksdb.compact.read.bytes": "compaction_read_bytes",
    "rocksdb.compact.write.bytes": "compaction_write_bytes",
    "rocksdb.flush.write.bytes": "flush_write_bytes",
    "rocksdb.number.keys.written": "keys_written",
}
_TICKER_RE = re.compile(r"^(rocksdb\.[a-z.]+) COUNT : (\d+)$", re.M)


class StorageConfigError(Exception):
    """The directory holds a RocksDB that was not created in raw mode (not one of ours)."""


_sizes = [SHARED_CACHE_BYTES, SHARED_WRITE_BUFFER_BYTES]


def configure(block_cache_bytes: int, memtable_budget_bytes: int) -> None:
    """Size the process-wide block cache and memtable budget; call before the first store opens.

    Raises RuntimeError once a store has opened (the shared objects exist then) and ValueError for a
    size under 1 MiB.
    """
    if min(block_cache_bytes, memtable_budget_bytes) < 1 << 20:
        raise ValueError("the block cache and the memtable budget need at least 1 MiB each")
    with _shared_lock:
        if _shared is not None and _sizes != [block_cache_bytes, memtable_budget_bytes]:
            raise RuntimeError("storage is already in use: configure it before opening any store")
        _sizes[:] = [block_cache_bytes, memtable_budget_bytes]


def _shared_resources() -> tuple[rocksdict.Cache, rocksdict.WriteBufferManager]:
    """The process-wide block cache and write-buffer manager, created on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            cache = rocksdict.Cache(_sizes[0])
            wbm = rocksdict.WriteBufferManager(_sizes[1], False)
            _shared = (cache, wbm)
        return _shared


def memory_usage() -> dict[str, int]:
    """RocksDB's memory in this process: ``block_cache`` (the shared cache's charge, pinned index and
    filter blocks included), ``block_cache_pinned`` and ``memtables`` (every store's memtables, as the
    shared write-buffer manager counts them). All 0 before the first store opens."""
    with _shared_lock:
        shared = _shared
    if shared is None:
        return {"block_cache": 0, "block_cache_pinned": 0, "memtables": 0}
    cache, wbm = shared
    return {"block_cache": cache.get_usage(), "block_cache_pinned": cache.get_pinned_usage(),
            "memtables": wbm.get_usage()}


def db_options(*, create: bool = True, bloom_bits: int = 10, block_cache_bytes: int | None = None,
               write_buffer_size: int = WRITE_BUFFER_SIZE, compact_deletions: bool = True,
               deletion_trigger: int = DELETION_TRIGGER, l0_trigger: int = L0_COMPACTION_TRIGGER) -> rocksdict.Options:
    """Raw-mode Options tuned for many small DBs in one process (shared cache and memtable budget).

    The keywords exist to measure alternatives (``rangetable bench store --options``): ``bloom_bits``
    0 turns bloom filters off, ``block_cache_bytes`` gives the DB a private cache of that size,
    ``compact_deletions`` False leaves out the compact-on-deletion collector, ``deletion_trigger`` is its
    threshold, ``l0_trigger`` the number of L0 files that starts a compaction.
    """
    cache, wbm = _shared_resources()
    if block_cache_bytes is not None:
        cache = rocksdict.Cache(block_cache_bytes)
    o = rocksdict.Options(raw_mode=True)
    o.create_if_missing(create)
    o.set_write_buffer_size(write_buffer_size)
    o.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
    o.set_write_buffer_manager(wbm)
    o.set_max_open_files(MAX_OPEN_FILES)
    o.set_keep_log_file_num(2)
    o.set_max_log_file_size(4 << 20)
    o.set_level_zero_file_num_compaction_trigger(l0_trigger)
    o.set_target_file_size_base(16 << 20)
    o.set_max_bytes_for_level_base(64 << 20)
    if compact_deletions:
        o.add_compact_on_deletion_collector_factory(DELETION_WINDOW, deletion_trigger, 0.5)
    bb = rocksdict.BlockBasedOptions()
    bb.set_block_cache(cache)
    if bloom_bits:
        bb.set_bloom_filter(bloom_bits, False)
    bb.set_cache_index_and_filter_blocks(True)
    bb.set_pin_l0_filter_and_index_blocks_in_cache(True)
    o.set_block_based_table_factory(bb)
    return o


def default_options(create: bool) -> rocksdict.Options:
    """The Options a store opens with unless told otherwise: :func:`db_options` with RocksDB statistics on,
    made once per ``create`` for the process, so every store shares one Statistics object (what a store
    counted stays counted after it closes). Statistics cost no measurable time per operation here
    (150,000 writes, gets and scans of a store, with and without: within the runs' noise)."""
    with _defaults_lock:
        opts = _defaults.get(create)
        if opts is None:
            opts = _defaults[create] = db_options(create=create)
            opts.enable_statistics()
        return opts


def rocksdb_tickers() -> dict[str, int]:
    """RocksDB's counters summed over every store this process opened (:data:`TICKERS`, by our names); all 0
    before the first store opens."""
    with _defaults_lock:
        stats = [o.get_statistics() or "" for o in _defaults.values()]
    out = dict.fromkeys(TICKERS.values(), 0)
    for text in stats:
        for name, count in _TICKER_RE.findall(text):
            ours = TICKERS.get(name)
            if ours is not None:
                out[ours] += int(count)
    return out


def _comparator(path: str) -> str | None:
    """The comparator named in the newest OPTIONS file of ``path`` (None if there is none)."""
    files = glob.glob(os.path.join(path, "OPTIONS-*"))
    if not files:
        return None
    newest = max(files, key=lambda f: int(f.rsplit("-", 1)[1]) if f.rsplit("-", 1)[1].isdigit() else -1)
    try:
        with open(newest, encoding="utf-8", errors="replace") as f:
            for line in f:
                s = line.strip()
                if s.startswith("comparator="):
                    return s.split("=", 1)[1]
    except OSError:
        return None
    return None


def repair_config(path: str | os.PathLike[str]) -> bool:
    """Restore ``raw_mode:true`` in ``path``'s rocksdict config if a non-raw open rewrote it.

    Returns True when the file was rewritten. Raises :class:`StorageConfigError` if the DB really
    was created in non-raw mode (its comparator is rocksdict's own), since opening it raw cannot work.
    """
    p = os.fspath(path)
    cfg_path = os.path.join(p, CONFIG_FILE)
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        cfg = None  # unreadable or torn: rewrite below if the data is ours
    if isinstance(cfg, dict) and cfg.get("raw_mode") is True:
        return False
    comp = _comparator(p)
    if comp is not None and comp != "leveldb.BytewiseComparator":
        raise StorageConfigError(
            f"{p} is a non-raw rocksdict DB (comparator {comp!r}); refusing to open it raw"
        )
    tmp = cfg_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(RAW_CONFIG, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, cfg_path)
    return True


def open_range_db(path: str | os.PathLike[str], *, create: bool = True,
                  options: rocksdict.Options | None = None, read_only: bool = False,
                  secondary: str | None = None) -> rocksdict.Rdict:
    """Open (or with ``create`` make) the raw-mode RocksDB at ``path``.

    ``options`` replaces :func:`default_options` (a test or benchmark measuring other settings). With
    ``create=False`` a missing directory raises FileNotFoundError. Lock conflicts surface as
    rocksdict's plain ``Exception('IO error: ... LOCK ...')``. ``read_only`` opens without taking
    the lock (while another process may still write the store), replaying its WAL as of now.
    ``secondary`` (a directory of its own for info files) opens a RocksDB secondary instance: no
    lock either, and it sees the writer's later writes after ``try_catch_up_with_primary()``.
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        repair_config(p)
    elif not create:
        raise FileNotFoundError(f"no range store at {p}")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    opts = options if options is not None else default_options(create)
    # Name every column family: without it rocksdict reopens an existing DB's column families with
    # options loaded from its OPTIONS file, which lose the table factory (no bloom filter, no shared block
    # cache) — every range opened again after a move, split or restart ran without them.
    families = {name: opts for name in ["default", *families_of(p)]}
    if secondary is not None:
        return rocksdict.Rdict(p, opts, column_families=families,
                               access_type=rocksdict.AccessType.secondary(secondary))
    if read_only:
        return rocksdict.Rdict(p, opts, column_families=families,
                               access_type=rocksdict.AccessType.read_only(False))
    return rocksdict.Rdict(p, opts, column_families=families)


def families_of(path: str) -> list[str]:
    """The column families of the RocksDB at ``path`` other than the default one ([] when there is no DB)."""
    if not os.path.exists(os.path.join(path, "CURRENT")):
        return []
    return [name for name in rocksdict.Rdict.list_cf(path) if name != "default"]


def column_family(db: rocksdict.Rdict, name: str) -> tuple[rocksdict.Rdict, rocksdict.ColumnFamily]:
    """``db``'s column family ``name``: a view of it (an Rdict whose reads and writes go to that family) and
    its handle (a WriteBatch's ``column_family``), the family made with :func:`default_options` when the DB
    has none yet. Both hold the DB: drop them before ``db.close()``, or its LOCK stays taken."""
    try:
        handle = db.get_column_family_handle(name)
    except Exception:  # rocksdict's plain Exception: "column name `…` does not exist"
        db.create_column_family(name, default_options(True))
        handle = db.get_column_family_handle(name)
    return db.get_column_family(name), handle
