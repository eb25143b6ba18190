"""The one table of error codes, used by every layer.

Each code has Azure's name, the HTTP status Azure answers with, a canonical message, and whether a
client may retry it. Layers raise :class:`TableError`; the HTTP frontend turns it into an
``odata.error`` body, the native protocol into an error reply, the native client back into an
exception with ``.error_code`` and ``.status_code``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rangetable.messages import WireError


@dataclass(frozen=True)
class ErrorCode:
    """One row of the error table."""

    name: str
    status: int
    message: str
    retriable: bool = False


_CODES = [
    ErrorCode("TableNotFound", 404, "The table specified does not exist."),
    ErrorCode("ResourceNotFound", 404, "The specified resource does not exist."),
    ErrorCode("EntityNotFound", 404, "The specified entity does not exist."),
    ErrorCode("TableAlreadyExists", 409, "The table specified already exists."),
    ErrorCode("EntityAlreadyExists", 409, "The specified entity already exists."),
    ErrorCode("TableBeingDeleted", 409, "The specified table is being deleted. Try operation later."),
    ErrorCode("UpdateConditionNotSatisfied", 412, "The update condition specified in the request was not satisfied."),
    # rangetable's own (no Azure service has conditions on column values or counters; docs/http.md)
    ErrorCode("ConditionCheckFailed", 412, "The condition on the entity's properties was not met."),
    ErrorCode("CounterOverflow", 400, "A counter would leave the range of its type."),
    ErrorCode("InvalidInput", 400, "One of the request inputs is not valid."),
    ErrorCode("OutOfRangeInput", 400, "One of the request inputs is out of range."),
    ErrorCode("InvalidResourceName", 400, "The specifed resource name contains invalid characters."),
    ErrorCode("PropertiesNeedValue", 400, "The values are not specified for all properties in the entity."),
    ErrorCode("PropertyNameInvalid", 400, "The property name is invalid."),
    ErrorCode("PropertyNameTooLong", 400, "The property name exceeds the maximum allowed length."),
    ErrorCode("TooManyProperties", 400, "The entity contains more properties than allowed."),
    ErrorCode("PropertyValueTooLarge", 400, "The property value exceeds the maximum allowed size (64KB)."),
    ErrorCode("EntityTooLarge", 400, "The entity is larger than the maximum allowed size (1MB)."),
    ErrorCode("DuplicatePropertiesSpecified", 400, "A property is specified more than one time."),
    ErrorCode("InvalidDuplicateRow", 400, "The batch request contains multiple changes with same row key."),
    ErrorCode("InvalidValueType", 400, "The value specified is invalid."),
    ErrorCode(
        "CommandsInBatchActOnDifferentPartitions",
        400,
        "All commands in a batch must operate on same entity group.",
    ),
    ErrorCode("NotImplemented", 501, "The requested operation is not implemented on the specified resource."),
    ErrorCode("MethodNotAllowed", 405, "The requested method is not allowed on the specified resource."),
    ErrorCode("JsonFormatNotSupported", 415, "JSON format is not supported."),
    ErrorCode("AtomFormatNotSupported", 415, "Atom format is not supported."),
    ErrorCode("XMethodNotUsingPost", 400, "The request uses X-HTTP-Method with an HTTP verb other than POST."),
    ErrorCode("XMethodIncorrectValue", 400, "The specified X-HTTP-Method is invalid."),
    ErrorCode("XMethodIncorrectCount", 400, "More than one X-HTTP-Method is specified."),
    ErrorCode("HostInformationNotPresent", 400, "The request does not provide host information."),
    ErrorCode(
        "AuthenticationFailed",
        403,
        "Server failed to authenticate the request. Make sure the value of the Authorization header is "
        "formed correctly including the signature.",
    ),
    ErrorCode("AuthorizationFailure", 403, "This request is not authorized to perform this operation."),
    ErrorCode(
        "AuthorizationPermissionMismatch",
        403,
        "This request is not authorized to perform this operation using this permission.",
    ),
    ErrorCode(
        "AuthorizationResourceTypeMismatch",
        403,
        "This request is not authorized to perform this operation using this resource type.",
    ),
    ErrorCode(
        "AuthorizationServiceMismatch", 403, "This request is not authorized to perform this operation using this service."
    ),
    ErrorCode(
        "AuthorizationProtocolMismatch", 403, "This request is not authorized to perform this operation using this protocol."
    ),
    ErrorCode("AuthorizationSourceIPMismatch", 403, "This request is not authorized to perform this operation using this source IP."),
    ErrorCode("InsufficientAccountPermissions", 403, "Write operations are not allowed."),
    ErrorCode("CorsPreflightFailure", 403, "CORS not enabled or no matching rule found for this request."),
    ErrorCode("InvalidAuthenticationInfo", 400, "Authentication information is not given in the correct format."),
    ErrorCode("NoAuthenticationInformation", 401, "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."),
    ErrorCode("InvalidHeaderValue", 400, "The value for one of the HTTP headers is not in the correct format."),
    ErrorCode("MissingRequiredHeader", 400, "An HTTP header that's mandatory for this request is not specified."),
    ErrorCode("InvalidQueryParameterValue", 400, "An invalid value was specified for one of the query parameters in the request URI."),
    ErrorCode("InvalidXmlDocument", 400, "XML specified is not syntactically valid."),
    ErrorCode("RequestBodyTooLarge", 413, "The request body is too large and exceeds the maximum permissible limit."),
    ErrorCode("Md5Mismatch", 400, "The MD5 value specified in the request did not match with the MD5 value calculated by the server."),
    ErrorCode("InvalidUri", 400, "The requested URI does not represent any resource on the server."),
    ErrorCode("ResourceTypeMismatch", 400, "The specified resource type does not match the type of the existing resource."),
    ErrorCode("ServerBusy", 503, "The server is currently unable to receive requests. Please retry your request.", True),
    ErrorCode("OperationTimedOut", 500, "The operation could not be completed within the permitted time.", True),
    ErrorCode("InternalError", 500, "The server encountered an internal error. Please retry the request.", True),
    # The change feed (rangetable's own; Azure Tables has none).
    ErrorCode("FeedTrimmed", 410, "The change feed no longer holds changes from this position: retention trimmed them."),
    ErrorCode("FeedDisabled", 409, "The table's change feed is off."),
    # Secondary indexes (rangetable's own; docs/indexes.md).
    ErrorCode("IndexNotFound", 404, "The specified index does not exist."),
    ErrorCode("IndexAlreadyExists", 409, "The table already has an index of this name."),
    ErrorCode("IndexFenced", 409, "A newer applier of this index has written to the range: this one stops."),
    # A secondary cluster (rangetable's own; issue 35).
    ErrorCode("SourceFenced", 409, "A newer applier of the source cluster's feed has written to the range: this one stops."),
    # Internal routing answers between frontends and partition servers; never shown to clients.
    ErrorCode("NotPrimary", 503, "The partition server does not serve this range at this epoch.", True),
    ErrorCode("RangeBusy", 503, "The range is offline for a move, split or merge.", True),
    ErrorCode("NotLeader", 503, "This coordinator is a standby or was deposed; ask the leader.", True),
]

CODES: dict[str, ErrorCode] = {c.name: c for c in _CODES}


def code(name: str) -> ErrorCode:
    """Look up an error code by Azure's name; unknown names map to InternalError."""
    return CODES.get(name, CODES["InternalError"])


class TableError(Exception):
    """An error with one of Azure's codes.

    ``index`` names the failing operation of an entity group transaction (0-based), when there is one.
    """

    def __init__(self, name: str, message: str | None = None, *, index: int | None = None) -> None:
        self.code = code(name) if name in CODES else ErrorCode(name, 500, message or name)
        self.error_code = name
        self.status_code = self.code.status
        self.message = message or self.code.message
        self.index = index
        super().__init__(f"{name}: {self.message}" + (f" (operation {index})" if index is not None else ""))

    @property
    def retriable(self) -> bool:
        """True when a client may retry the request unchanged."""
        return self.code.retriable

    def to_wire(self) -> WireError:
        """The error as a plain dict for the native protocol."""
        d: WireError = {"code": self.error_code, "message": self.message}
        if self.index is not None:
            d["index"] = self.index
        return d

    @classmethod
    def from_wire(cls, d: WireError) -> TableError:
        """Rebuild an error from :meth:`to_wire` output."""
        return cls(d.get("code", "InternalError"), d.get("message"), index=d.get("index"))
