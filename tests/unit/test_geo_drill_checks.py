"""The geo drill's checks (cli/drills/geo_workload.py): pure functions of the writer's history."""

from __future__ import annotations

from cli.drills.geo_workload import Write, ledger_check, prefix_violation, state_after


def _h(*ns: int, cluster: str = "a") -> list[Write]:
    return [Write(cluster, f"r{n % 100:03d}", n, 1000 + n) for n in ns]


def test_the_state_after_a_prefix_is_each_rows_last_write_up_to_it() -> None:
    h = _h(1, 2, 101, 102, 201)
    assert state_after(h) == {"r001": 201, "r002": 102}
    assert state_after(h, 101) == {"r001": 101, "r002": 2}
    assert state_after(h, 0) == {}


def test_a_read_is_judged_against_the_prefix_its_latest_write_ends() -> None:
    h = _h(1, 2, 101, 102, 201)
    assert prefix_violation({}, h, set()) is None
    assert prefix_violation({"r001": 101, "r002": 2}, h, set()) is None  # the state after n=101
    assert prefix_violation({"r001": 201, "r002": 102}, h, set()) is None
    why = prefix_violation({"r001": 201, "r002": 2}, h, set())  # n=201 seen without n=102 before it
    assert why is not None and "r002 holds n=2" in why and "says n=102" in why
    assert prefix_violation({"r001": 101}, h, set()) is not None  # r002's n=2 is missing
    assert prefix_violation({"r001": 201, "r002": 2}, _h(1, 2, 101, 201), {102}) is None  # n=102 unanswered: not done
    assert prefix_violation({"r001": 201, "r002": 102}, _h(1, 2, 101, 201), {102}) is None  # … or done


def test_the_ledger_must_be_exactly_the_writes_acknowledged_after_the_cut_in_order() -> None:
    after = _h(5, 6, 7)
    assert ledger_check([("r005", 5), ("r006", 6), ("r007", 7)], after) is None
    why = ledger_check([("r005", 5)], after)
    assert why is not None and "2 acknowledged there are missing" in why and "row r006 n=6" in why
    why = ledger_check([("r005", 5), ("r006", 6), ("r007", 7), ("r009", 9)], after)
    assert why is not None and "1 in it were never acknowledged there" in why
    assert "out of their order" in (ledger_check([("r006", 6), ("r005", 5), ("r007", 7)], after) or "")
