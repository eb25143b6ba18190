"""Authentication of Azure Table REST requests, pure functions: :mod:`~frontend.auth.authenticate.authenticate` (accounts,
SharedKey and SharedKeyLite, and the one entry point that picks the scheme), :mod:`~frontend.auth.authenticate.sas` (service and
account SAS, stored access policies) and :mod:`~frontend.auth.authenticate.bearer` (OAuth bearer tokens)."""
