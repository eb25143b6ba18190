"""Benchmarks (``rangetable bench ...``, ``rangetable stress``): the native and REST paths, the range
store, RocksDB options, soak, scale, frontends, control plane and takeover. Tools, not product: no
product module imports this package."""
