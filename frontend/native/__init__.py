"""The frontend's native protocol: the request logic and the drivers that run it.

:mod:`~frontend.native.handler` (routing by the partition map, retries on NotPrimary/RangeBusy, query stitching,
table ops relayed to the coordinator), :mod:`~frontend.native.driver` (what every driver shares: sub-requests,
back-off, answers, map updates), and its two drivers: :mod:`~frontend.native.server` (the blocking ZeroMQ loop of
the native frontend process) and :mod:`~frontend.native.asyncio_driver` (the same inside an asyncio loop, under
the REST app of :mod:`frontend.http`).
"""
