"""The coordinator's state, as objects that own it: the partition map and its commits (:mod:`.maps`), the
registered partition servers (:mod:`.registry`), the event log (:mod:`.events`), and :class:`.cluster.Cluster`,
the three with the configuration and keys, as every multi-step change takes them."""
