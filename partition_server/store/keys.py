"""The meta keys of a range store (see :mod:`partition_server.store.range_store` for the whole layout)."""

from __future__ import annotations

from rangetable.keys import META_PREFIX

META_TS = META_PREFIX + b"ts"  # >QQQQ: the last Timestamp and the request-record window (request_records.pack_meta)
DROP_KEY = META_PREFIX + b"drop"  # msgpack [lo, hi]: a span a split dropped but did not compact yet
META_REPL = META_PREFIX + b"repl"  # >QQ: the epoch and sequence of the last replicated batch (replica_log.py)
META_COUNT = META_PREFIX + b"count"  # >QQ: the entities the store holds and their bytes, exact (store_counts.py)
META_FEED = META_PREFIX + b"feed"  # msgpack [on, floor]: the change feed's state (feed.py)
META_INDEX = META_PREFIX + b"index"  # msgpack [claim, position]: what an index's applier wrote last (index_state.py)
META_SOURCE = META_PREFIX + b"source"  # msgpack [claim, position]: the source's feed applied so far (index_state.py)
