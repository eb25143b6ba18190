"""The shared kernel of the server processes: what the coordinator, the partition servers and the frontends
(and the CLI that runs them) share and a client never needs: the RocksDB opener and checkpoints, a process's
signal handling, collector tuning, watchdog and ``malloc_trim``, crash points, metrics, leader tracking,
addresses, TLS contexts, file chunks, percentiles, the Kubernetes zone lookup.

It imports the core (``rangetable``'s top-level modules) and nothing of ``rangetable.client``; the client
imports nothing of it (``tests/unit/test_layers.py``).
"""
