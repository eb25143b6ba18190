"""The controller and the changes it carries out: :mod:`.controller` (the worker thread that runs multi-step
changes one at a time and sends partition servers their commands), :mod:`.operations` (create and delete
tables, move, split, merge, failover, reconcile, garbage collection, recovery), :mod:`.replica_ops` (the
replica-set jobs), :mod:`.replica_move` (moving one replica between servers) and :mod:`.balancer_loop` (the
balancer's process side, which hands its actions to the controller). They take the state objects of
:mod:`coordinator.state`, never the coordinator process."""
