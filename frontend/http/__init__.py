"""The Azure Table REST API of a frontend: a framework-free ASGI app (see ``docs/http.md``).

Modules: :mod:`~frontend.http.parse` (the request, its verb, its URL shape and version),
:mod:`~frontend.http.odata` (JSON payloads, edit links,
tokens, error bodies), :mod:`~frontend.http.batch` (multipart), :mod:`~frontend.http.xmldocs` (ACL,
service properties), :mod:`~frontend.http.security` (authentication), :mod:`~frontend.http.entity_ops`,
:mod:`~frontend.http.table_ops`, :mod:`~frontend.http.cors` and :mod:`~frontend.http.batch_ops` (the
operations), :mod:`~frontend.http.routes` (which operation), :mod:`~frontend.http.render` (headers,
error bodies), :mod:`~frontend.http.app` (the pipeline: parse → authenticate → plan → send → render,
and the ASGI callable), :mod:`~frontend.http.fastpath` (the process's marked fast paths),
:mod:`~frontend.http.listener` (the built-in HTTP/1.1 server) and
:mod:`~frontend.http.serve` (the process). The stages never import :mod:`~frontend.http.app`.
"""
