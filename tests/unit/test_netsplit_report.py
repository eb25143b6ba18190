"""The netsplit drill's pure policy: gaps, range membership, the fence probe's summary, verdicts."""

from __future__ import annotations

import copy

from cli.drills.netsplit_report import (
    ack_times,
    fault_problems,
    fence_summary,
    first_after,
    format_report,
    in_ranges,
    longest_gap,
    verdict,
)

BASE = {"lost_writes": 0, "lost_detail": [], "duplicate_applications": 0, "linearizable": True,
        "linearizability_detail": "", "history_ops": 100, "converged_after_heal_s": 0.5, "gap_s": 0.2, "cut_s": 4.0, "address": "10.77.1.3",
        "client": {"ops": 100, "ok": 99, "unknown": 0}}
PS = {**BASE, "fault": "partition-server", "target": "ps-1", "ranges_on_target": 2, "lease_s": 2.0,
      "fence": {"lease_lapsed_after_cut_s": 1.9, "answered_after_lease": 0, "probe_rounds": 40},
      "acked_by_cut_server": 0, "served_after_cut_s": 2.7, "served_after_lease_s": 0.7,
      "target_ranges_gap_s": 3.0, "rejoined_after_heal_s": 1.5}
SHORT = {**BASE, "fault": "coordinator-short", "target": "coordinator"}
LONG = {**BASE, "fault": "coordinator-long", "target": "coordinator", "gap_s": 6.0, "writes_resumed_after_heal_s": 2.0}
FE = {**BASE, "fault": "frontend", "target": "fe-2", "other_frontend_gap_s": 0.2, "target_gap_s": 4.3,
      "writes_resumed_after_heal_s": 0.3}


def test_longest_gap_counts_the_window_edges() -> None:
    assert longest_gap([1.0, 2.0, 2.5], 0.0, 3.0) == 1.0
    assert longest_gap([0.5, 4.0], 0.0, 5.0) == 3.5
    assert longest_gap([], 1.0, 3.5) == 2.5  # nothing acknowledged: the whole window
    assert longest_gap([10.0, 11.0], 0.0, 2.0) == 2.0  # times outside the window do not count
    assert longest_gap([1.0], 2.0, 2.0) == 0.0


def test_in_ranges_low_inclusive_high_exclusive_open_ends() -> None:
    ranges = [{"low": None, "high": "p02"}, {"low": "p06", "high": None}]
    assert in_ranges("p00", ranges) and in_ranges("fresh1", ranges) and in_ranges("p06", ranges)
    assert in_ranges("p07", ranges)
    assert not in_ranges("p02", ranges) and not in_ranges("p05", ranges)


def test_ack_times_filters_by_endpoint_and_ranges() -> None:
    acks = [[1.0, "a", "p00"], [2.0, "b", "p03"], [3.0, "a", "p05"]]
    assert ack_times(acks) == [1.0, 2.0, 3.0]
    assert ack_times(acks, endpoint="a") == [1.0, 3.0]
    assert ack_times(acks, ranges=[{"low": "p02", "high": "p04"}]) == [2.0]
    assert first_after([1.0, 2.0, 3.0], 1.5) == 0.5 and first_after([1.0], 2.0) is None


def test_fence_summary_finds_the_lapse_and_answers_after_the_lease() -> None:
    rounds = [[9.0, True, "ok"], [10.5, True, "ok"], [11.9, False, "NotOwner"], [12.5, None, "silence"]]
    assert fence_summary(rounds, t_cut=10.0, lease_s=2.0) == {
        "lease_lapsed_after_cut_s": 1.9, "answered_after_lease": 0, "probe_rounds": 4}
    late = [*rounds, [12.2, True, "ok"]]  # a server that kept serving past its lease
    assert fence_summary(late, 10.0, 2.0)["answered_after_lease"] == 1
    assert fence_summary([[10.5, True, "ok"]], 10.0, 2.0)["lease_lapsed_after_cut_s"] is None


def test_good_faults_pass_and_report_ends_with_pass() -> None:
    faults = [PS, SHORT, LONG, FE]
    assert all(fault_problems(f) == [] for f in faults)
    assert verdict(faults) and not verdict([])
    text = format_report({"hosts": 7, "subnet": "10.77.1.0/24", "lease_s": 2.0, "fault_seconds": 4.0,
                          "seed": 1, "faults": faults, "passed": True})
    assert text.splitlines()[-1] == "PASS"
    assert "fenced itself 1.9 s after the cut" in text


def test_each_broken_promise_fails_its_fault() -> None:
    cases = [
        ({**PS, "lost_writes": 2}, "acknowledged writes lost"),
        ({**PS, "linearizable": False}, "not linearizable"),
        ({**PS, "duplicate_applications": 1}, "duplicate"),
        ({**PS, "acked_by_cut_server": 1}, "after its lease"),
        ({**PS, "served_after_lease_s": 3.5}, "not served elsewhere"),
        ({**PS, "served_after_lease_s": None}, "not served elsewhere"),
        ({**PS, "rejoined_after_heal_s": None}, "did not rejoin"),
        ({**FE, "converged_after_heal_s": None}, "did not converge"),
        ({**SHORT, "gap_s": 1.5}, "writes stopped"),
        ({**LONG, "writes_resumed_after_heal_s": None}, "did not resume"),
        ({**FE, "other_frontend_gap_s": 2.0}, "other frontend"),
        ({"fault": "?", "target": "?", "error": "boom"}, "boom"),
    ]
    for fault, words in cases:
        problems = fault_problems(fault)
        assert any(words in p for p in problems), (fault, problems)
        assert not verdict([PS, fault])
    never = copy.deepcopy(PS)
    never["fence"]["lease_lapsed_after_cut_s"] = None
    assert any("never said" in p for p in fault_problems(never))
    slow = copy.deepcopy(PS)
    slow["fence"]["lease_lapsed_after_cut_s"] = 2.6
    assert any("lapsed only 2.6 s" in p for p in fault_problems(slow))
    kept = copy.deepcopy(PS)
    kept["fence"]["answered_after_lease"] = 3
    assert any("answered 3 data requests" in p for p in fault_problems(kept))
    text = format_report({"hosts": 7, "subnet": "x", "lease_s": 2.0, "fault_seconds": 4.0, "seed": 1,
                          "faults": [PS, {**SHORT, "gap_s": 1.5}], "passed": False})
    assert text.splitlines()[-1] == "FAIL" and "FAILED: writes stopped" in text


def test_a_failed_fault_explains_its_violation_with_the_cut_in_the_window() -> None:
    bad = {**PS, "linearizable": False, "linearizability": "violation", "linearizability_key": ("p03", "k1"),
           "linearizability_detail": "key ('p03', 'k1'): not linearizable\n  #7 read -> 'a' ok [5.0, 5.1]",
           "linearizability_window": [5.0, 5.1], "history_file": "/tmp/rangetable-histories/history-x.jsonl",
           "injected": [{"t": 3.0, "until": 7.0, "what": "cut ps-1"},
                        {"t": 5.2, "until": None, "what": "supervisor: ps-1 (pid 9) lost its lease: killed it"}]}
    text = format_report({"hosts": 7, "subnet": "10.77.1.0/24", "lease_s": 2.0, "fault_seconds": 4.0,
                          "seed": 1, "faults": [bad], "passed": False})
    assert "FAILED: history not linearizable" in text
    assert "linearizability: VIOLATION on key ('p03', 'k1')" in text and "#7 read -> 'a' ok" in text
    assert "t=3.00-7.00 s  cut ps-1" in text and "lost its lease" not in text  # after the window
    assert "rangetable verify history /tmp/rangetable-histories/history-x.jsonl" in text
    assert text.splitlines()[-1] == "FAIL"
