"""The ``x-ms-version`` values the REST API serves (pure).

Azure answers 400 ``InvalidHeaderValue`` for a version it does not know (Azurite does the same with
its list). The table is Azure Storage's published service versions, 2009-04-14 up to 2025-11-05;
the operations and payloads rangetable serves are the same under every one of them (JSON payloads
need 2013-08-15 or later, which every current client sends). A request without the header is served
as :data:`DEFAULT_VERSION`, the version the SDKs send.
"""

from __future__ import annotations

from rangetable.errors import TableError

DEFAULT_VERSION = "2019-02-02"

SUPPORTED_VERSIONS: frozenset[str] = frozenset((
    "2009-04-14", "2009-07-17", "2009-09-19", "2011-08-18", "2012-02-12", "2013-08-15", "2014-02-14",
    "2015-02-21", "2015-04-05", "2015-07-08", "2015-12-11", "2016-05-31", "2017-04-17", "2017-07-29",
    "2017-11-09", "2018-03-28", "2018-11-09", "2019-02-02", "2019-07-07", "2019-10-10", "2019-12-12",
    "2020-02-10", "2020-04-08", "2020-06-12", "2020-08-04", "2020-10-02", "2020-12-06", "2021-02-12",
    "2021-04-10", "2021-06-08", "2021-08-06", "2021-10-04", "2021-12-02", "2022-11-02", "2023-01-03",
    "2023-05-03", "2023-08-03", "2023-11-03", "2024-02-04", "2024-05-04", "2024-08-04", "2024-11-04",
    "2025-01-05", "2025-05-05", "2025-07-05", "2025-11-05",
))

VERSION_HEADERS: dict[str, bytes] = {v: v.encode() for v in SUPPORTED_VERSIONS}  # the echoed header's bytes


def check_version(value: str | None) -> str:
    """The service version a request asks for; 400 InvalidHeaderValue for one not in the table."""
    if value is None:
        return DEFAULT_VERSION
    if value in SUPPORTED_VERSIONS:
        return value
    raise TableError("InvalidHeaderValue",
                     f"The value for one of the HTTP headers is not in the correct format. x-ms-version: {value[:64]!r} "
                     "is not a supported service version.")
