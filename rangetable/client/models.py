"""Enums, result types and exceptions of the native client, named as in ``azure-data-tables``.

The exceptions subclass :class:`rangetable.errors.TableError` (``.error_code``, ``.status_code``,
``.message``, ``.retriable``) and carry the names of ``azure.core.exceptions``, so code written as
``except ResourceExistsError`` keeps working after switching the import.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Any

from rangetable.errors import TableError


class _CaseInsensitiveStrEnum(StrEnum):
    """A str enum whose lookup by value also accepts any case, like azure-core's enum metaclass."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None


class UpdateMode(_CaseInsensitiveStrEnum):
    """How an update treats properties the entity does not mention: replace drops them, merge keeps them."""

    REPLACE = "replace"
    MERGE = "merge"


class TransactionOperation(_CaseInsensitiveStrEnum):
    """The operation names accepted by :meth:`TableClient.submit_transaction`."""

    CREATE = "create"
    UPSERT = "upsert"
    UPDATE = "update"
    DELETE = "delete"


class MatchConditions(Enum):
    """Conditions on the stored ETag, with the member names of ``azure.core.MatchConditions``.

    ``azure.core.MatchConditions`` members are accepted too (matched by name).
    """

    Unconditionally = 1
    IfNotModified = 2
    IfModified = 3
    IfPresent = 4
    IfMissing = 5


class TableItem:
    """A table returned by ``list_tables`` / ``query_tables``."""

    name: str

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableItem) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"TableItem(name={self.name})"


# --- exceptions --------------------------------------------------------------------------------


class ResourceNotFoundError(TableError):
    """A 404: the table or entity does not exist."""


class ResourceExistsError(TableError):
    """A 409: the table or entity already exists (or the table is being deleted)."""


class ResourceModifiedError(TableError):
    """A 412: the ETag condition was not met."""


class ConditionCheckFailedError(ResourceModifiedError):
    """A 412 of rangetable's extension: a write's expectation or condition on column values failed
    (``error_code`` ConditionCheckFailed; the message names the condition)."""


class TableTransactionError(TableError):
    """An operation of an entity group transaction failed; ``.index`` names it (0 when unknown)."""

    def __init__(self, name: str, message: str | None = None, *, index: int | None = None) -> None:
        super().__init__(name, message, index=index)
        self.index: int = index or 0


_BY_STATUS: dict[int, type[TableError]] = {
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    412: ResourceModifiedError,
}


def specific_error(exc: TableError) -> TableError:
    """Re-type a plain TableError by status: 404/409/412 become the azure-core-named subclasses."""
    cls = ConditionCheckFailedError if exc.error_code == "ConditionCheckFailed" else _BY_STATUS.get(exc.status_code)
    if cls is None or isinstance(exc, cls):
        return exc
    return cls(exc.error_code, exc.message, index=exc.index)


def transaction_error(exc: TableError) -> TableError:
    """The error a failed transaction raises: TableTransactionError when an operation is named."""
    if exc.index is None or isinstance(exc, TableTransactionError):
        return exc
    return TableTransactionError(exc.error_code, exc.message, index=exc.index)


# --- ETag conditions ---------------------------------------------------------------------------


def condition_name(match_condition: Any) -> str | None:
    """The member name of our or azure-core's MatchConditions (``None`` passes through)."""
    if match_condition is None:
        return None
    name = getattr(match_condition, "name", match_condition)
    if name not in MatchConditions.__members__:
        raise ValueError(f"Unsupported match condition: {match_condition}")
    return name


def if_match(etag: str | None, match_condition: Any, entity: Any = None) -> str:
    """The ``if_match`` of an update or delete, as the SDK's ``_get_match_condition`` decides it.

    ``IfNotModified`` needs an ETag (taken from ``entity.metadata`` when not given) and sends it;
    ``Unconditionally`` (the default) sends ``"*"``: the entity must exist. Anything else is a
    ValueError, as in the SDK.
    """
    name = condition_name(match_condition)
    if name and not etag and entity is not None:
        metadata = getattr(entity, "metadata", None)
        if isinstance(metadata, dict):
            etag = metadata.get("etag")
    name = name or "Unconditionally"
    if name == "IfNotModified":
        if not etag:
            raise ValueError("IfNotModified must be specified with etag.")
        return etag
    if name == "Unconditionally":
        if etag:
            raise ValueError("Etag is not supported for an Unconditional operation.")
        return "*"
    raise ValueError(f"Unsupported match condition: {match_condition}")
