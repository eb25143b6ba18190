"""The Azure Table REST API of a frontend: a framework-free ASGI app (see ``docs/http.md``).

Modules: :mod:`~frontend.http.urls` (URL shapes), :mod:`~frontend.http.odata` (JSON payloads,
tokens, error bodies), :mod:`~frontend.http.batch` (multipart), :mod:`~frontend.http.xmldocs` (ACL,
service properties), :mod:`~frontend.http.security` (authentication), :mod:`~frontend.http.ops` and
:mod:`~frontend.http.batch_ops` (the operations), :mod:`~frontend.http.app` (the ASGI callable) and
:mod:`~frontend.http.serve` (the process).
"""
