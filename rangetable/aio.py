"""rangetable's asyncio native client, with the API of ``azure.data.tables.aio``: the public name of
:mod:`rangetable.client.aio`, as ``azure.data.tables.aio`` is the SDK's::

    from rangetable.aio import TableServiceClient
"""

from rangetable.client.aio import (
    AsyncItemPaged,
    AsyncPage,
    AsyncPageIterator,
    TableClient,
    TableServiceClient,
)

__all__ = ["AsyncItemPaged", "AsyncPage", "AsyncPageIterator", "TableClient", "TableServiceClient"]
