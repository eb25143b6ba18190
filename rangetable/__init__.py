"""rangetable: a self-hosted, horizontally scalable table store with Azure Table Storage's semantics.

The public API mirrors ``azure-data-tables``; names are imported lazily, so ``import rangetable``
(which every server module triggers) loads neither ZeroMQ nor the client::

    from rangetable import TableServiceClient, UpdateMode, TableTransactionError
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "TableServiceClient": "rangetable.client",
    "TableClient": "rangetable.client",
    "EntityProperty": "rangetable.values",
    "TableEntity": "rangetable.values",
    "EdmType": "rangetable.edm",
    "UpdateMode": "rangetable.client.models",
    "TransactionOperation": "rangetable.client.models",
    "MatchConditions": "rangetable.client.models",
    "TableItem": "rangetable.client.models",
    "TableTransactionError": "rangetable.client.models",
    "ResourceNotFoundError": "rangetable.client.models",
    "ResourceExistsError": "rangetable.client.models",
    "ResourceModifiedError": "rangetable.client.models",
    "ConditionCheckFailedError": "rangetable.client.models",
    "TableError": "rangetable.errors",
    "NoRetry": "rangetable.client.retry",
    "FixedRetry": "rangetable.client.retry",
    "ExponentialRetry": "rangetable.client.retry",
}

__all__ = [
    "ConditionCheckFailedError",
    "EdmType",
    "EntityProperty",
    "ExponentialRetry",
    "FixedRetry",
    "MatchConditions",
    "NoRetry",
    "ResourceExistsError",
    "ResourceModifiedError",
    "ResourceNotFoundError",
    "TableClient",
    "TableEntity",
    "TableError",
    "TableItem",
    "TableServiceClient",
    "TableTransactionError",
    "TransactionOperation",
    "UpdateMode",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from rangetable.client import TableClient, TableServiceClient
    from rangetable.client.models import (
        ConditionCheckFailedError,
        MatchConditions,
        ResourceExistsError,
        ResourceModifiedError,
        ResourceNotFoundError,
        TableItem,
        TableTransactionError,
        TransactionOperation,
        UpdateMode,
    )
    from rangetable.client.retry import ExponentialRetry, FixedRetry, NoRetry
    from rangetable.edm import EdmType
    from rangetable.errors import TableError
    from rangetable.values import EntityProperty, TableEntity


def __getattr__(name: str) -> Any:
    """Import a public name on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rangetable' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
