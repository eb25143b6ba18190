"""Where a table's stored access policies live in the meta store (``acl/<table lower>``): written by the
ACL ops (:mod:`coordinator.acl`), deleted with the table in the same commit
(:func:`coordinator.control.operations.delete_table`)."""

from __future__ import annotations


def acl_key(table: str) -> bytes:
    """Meta-store key of a table's ACL (case-insensitive)."""
    return b"acl/" + table.lower().encode()
