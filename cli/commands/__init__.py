"""The commands that use and administer a running cluster, each module a group of click commands that
:mod:`cli.main` registers: tables and entities (:mod:`~cli.commands.tables`), export and import
(:mod:`~cli.commands.transfer`), the partition map (:mod:`~cli.commands.map_admin`: ranges, servers, status, events,
split, move, merge), replicas (:mod:`~cli.commands.replicas`), the balancer and ``top``
(:mod:`~cli.commands.balance`), backup and restore (:mod:`~cli.commands.backup`, with
:mod:`~cli.commands.backup_pull` and :mod:`~cli.commands.restore`), ``metrics`` (:mod:`~cli.commands.observe`),
``cert`` and ``keys`` (:mod:`~cli.commands.security`). They import their shared options from :mod:`cli.options`."""
