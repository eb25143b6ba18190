"""What the benches and drills drive and check: the verifying workload (:mod:`.generator`), the
pipelined load generator (:mod:`.loadgen`), the history verifiers (:mod:`.verify`: linearizability,
acknowledged-write loss) and the simulated partition servers (:mod:`.simulated`). Tools, not
product: no product module imports this package."""
