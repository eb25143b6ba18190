"""rangetable's asyncio native client, with the API of ``azure.data.tables.aio``::

    from rangetable import UpdateMode
    from rangetable.aio import TableServiceClient

    async with TableServiceClient.from_cluster() as service:   # $RANGETABLE_DATA_DIR, else ./rangetable-data
        table = await service.create_table_if_not_exists("orders")
        await table.upsert_entity({"PartitionKey": "p", "RowKey": "1", "Total": 9.5})
        async for entity in table.query_entities("Total gt @t", parameters={"t": 5.0}):
            print(entity)

The models, errors and retry policies are the blocking client's (``from rangetable import ...``).
"""

from rangetable.client.aio.clients import TableClient, TableServiceClient
from rangetable.client.aio.paging import AsyncItemPaged, AsyncPage, AsyncPageIterator

__all__ = ["AsyncItemPaged", "AsyncPage", "AsyncPageIterator", "TableClient", "TableServiceClient"]
