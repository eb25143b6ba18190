"""A local cluster and the processes of any cluster: the process entry points (:mod:`~cli.cluster.processes`,
``rangetable coordinator``, ``partition-server``, ``frontend``, ``http-frontend``), ``rangetable up`` and ``down``
(:mod:`~cli.cluster.local_cluster`), the supervisor that starts, watches and restarts the processes
(:mod:`~cli.cluster.supervisor`), the fork server it starts them from (:mod:`~cli.cluster.prefork`), its port
reservations (:mod:`~cli.cluster.port_reservation`) and log rotation (:mod:`~cli.cluster.log_rotation`)."""
