"""The native client: ``TableServiceClient`` and ``TableClient`` with azure-data-tables' API, over ZeroMQ.

``from rangetable.client import TableServiceClient`` (or ``from rangetable import ...``). The blocking client is
:mod:`rangetable.client.blocking`; the asyncio one :mod:`rangetable.client.aio` (imported as ``rangetable.aio``).
What both share: each method's request and the reading of its answer (``calls``), the socket (``transport``),
the arguments' conversion (``wire``), paging (``paging``), models and errors (``models``), retry policies
(``retry``), bulk upserts (``bulk``), and ``rangetable export`` / ``import`` (``transfer``, ``transfer_format``).

It imports the core (``rangetable``'s top-level modules), never ``rangetable.kernel`` (``tests/unit/test_layers.py``).
"""

from rangetable.client.blocking import TableClient, TableServiceClient

__all__ = ["TableServiceClient", "TableClient"]
