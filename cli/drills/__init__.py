"""Failure drills run against a cluster (``rangetable drill ...``): failover, coordinator failover,
chaos, rebalance and netsplit. Tools, not product: no product module imports this package."""
