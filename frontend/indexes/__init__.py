"""Secondary indexes in the frontend: the applier that keeps an index from its base table's change feed
(:mod:`frontend.indexes.applier`), the write of its entries to the ranges of the index's table
(:mod:`frontend.indexes.write`) and the queries answered through it (:mod:`frontend.indexes.query`)."""
