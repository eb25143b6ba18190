"""The netsplit drill's pure policy: gaps, outages, range membership, client errors, the fence probe's summary,
the coordinator's events, the verdict of each of the seven faults and the report."""

from __future__ import annotations

import copy

from cli.drills.netsplit_report import (
    PROFILES,
    ack_times,
    acked_while_primary,
    client_errors,
    coordinator_events,
    fault_problems,
    fence_summary,
    first_after,
    format_report,
    in_ranges,
    longest_gap,
    outage,
    range_gaps,
    verdict,
)

BASE = {"lost_writes": 0, "lost_detail": [], "duplicate_applications": 0, "linearizable": True,
        "linearizability_detail": "", "history_ops": 100, "converged_after_heal_s": 0.5, "gap_s": 0.2,
        "gap_began_after_cut_s": 1.0, "range_gap_s": 0.4, "client_errors": 0, "cut_s": 4.0, "address": "10.77.1.3",
        "lease_s": 3.0, "client": {"ops": 100, "ok": 99, "unknown": 0, "errors": {}}}
PS = {**BASE, "fault": "primary", "target": "ps-1", "ranges_on_target": 2,
      "fence": {"lease_lapsed_after_cut_s": 2.9, "answered_after_lease": 0, "probe_rounds": 40},
      "acked_by_cut_server": 0, "served_after_cut_s": 3.5, "served_after_lease_s": 0.5,
      "target_ranges_gap_s": 3.5, "rejoined_after_heal_s": 0.2, "caught_up_after_heal_s": 2.8}
FOLLOWER = {**BASE, "fault": "follower", "target": "ps-2", "ranges_followed": 4, "primaries_on_target": 0,
            "rejoined_after_heal_s": 0.3, "caught_up_after_heal_s": 3.2}
COORD = {**BASE, "fault": "coordinator", "target": "coord-1", "standby": "coord-2", "old_term": 1,
         "standby_led_after_s": 2.1, "range_gap_s": 1.2, "old_leader_standby_after_heal_s": 0.3}
MINORITY = {**BASE, "fault": "etcd-minority", "target": "etcd-1", "etcd_leader_cut": True, "coordinator_term": [2, 2],
            "create_table_during_cut": {"ok": True, "code": None, "after_s": 0.1}}
MAJORITY = {**BASE, "fault": "etcd-majority", "target": "etcd-1+etcd-2", "gap_s": 12.0,
            "create_table_during_cut": {"ok": False, "code": "OperationTimedOut", "after_s": 10.0},
            "create_table_after_heal_s": 4.9, "writes_went_on_s": 2.5, "writes_stopped_s": 12.0,
            "writes_resumed_after_heal_s": 4.4, "errors_seen": {}}
BOTH = {**BASE, "fault": "primary-and-etcd", "target": "ps-1+etcd-1", "ranges_on_target": 2, "served_after_cut_s": 3.4,
        "served_after_lease_s": 0.4, "others_lease_lapses": {}, "rejoined_after_heal_s": 0.4,
        "caught_up_after_heal_s": 1.7}
HOST = {**BASE, "fault": "host-lost", "target": "ps-3", "replicas": 3, "ranges_with_copy": 4,
        "rebuilt_after_cut_s": 13.1, "rereplicate_after_s": 10.0, "rebuilt_on": ["ps-2"], "rejoined_after_heal_s": 4.9}
ALL = [PS, FOLLOWER, COORD, MINORITY, MAJORITY, BOTH, HOST]
REPORT = {"hosts": 12, "subnet": "10.77.1.0/24", "lease_s": 3.0, "fault_seconds": 5.0, "seed": 1, "profile": "full"}


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


def test_writes_count_against_the_cut_server_only_while_the_map_names_it_their_range_s_primary() -> None:
    a, b = {"id": "a", "low": "", "high": "p05"}, {"id": "b", "low": "p05", "high": None}
    acks = [[3.2, "fe", "p01"], [3.4, "fe", "p07"], [3.9, "fe", "p02"], [2.0, "fe", "p03"]]
    # a moved at 3.3 s, b at 4.0 s: the ack on a at 3.9 s is its new primary's, though b still named the cut one
    assert acked_while_primary(acks, [a, b], {"a": 3.3, "b": 4.0}, since=3.0) == [3.2, 3.4]
    assert acked_while_primary(acks, [a, b], {}, since=3.0) == []  # never named after the cut: none


def test_fence_summary_finds_the_lapse_and_answers_after_the_lease() -> None:
    rounds = [[9.0, True, "ok"], [10.5, True, "ok"], [11.9, False, "NotPrimary"], [12.5, None, "silence"]]
    assert fence_summary(rounds, t_cut=10.0, lease_s=2.0) == {
        "lease_lapsed_after_cut_s": 1.9, "answered_after_lease": 0, "probe_rounds": 4}
    late = [*rounds, [12.2, True, "ok"]]  # a server that kept serving past its lease
    assert fence_summary(late, 10.0, 2.0)["answered_after_lease"] == 1
    assert fence_summary([[10.5, True, "ok"]], 10.0, 2.0)["lease_lapsed_after_cut_s"] is None


def test_good_faults_pass_and_report_ends_with_pass() -> None:
    assert all(fault_problems(f) == [] for f in ALL)
    assert verdict(ALL) and not verdict([])
    text = format_report({**REPORT, "faults": ALL, "passed": True})
    lines = text.splitlines()
    assert lines[-1] == "PASS"
    assert [line.split()[0] for line in lines[2:9]] == [f["fault"] for f in ALL]  # one table row per fault
    assert "fenced itself 2.9 s after the cut" in text and "caught up (in sync again) 2.8 s" in text
    assert "standby coord-2 led 2.1 s after the cut" in text
    assert "create table during the cut: failed with OperationTimedOut after 10.0 s" in text
    assert "writes went on 2.5 s after the cut, then stopped for 12.0 s" in text
    assert "all 3 replicas in sync again 13.1 s after the cut" in text and "on ps-2" in text
    assert ("its 2 primaries served elsewhere 3.4 s after the cut (0.4 s after its lease); other servers' leases "
            "lapsed: none") in text
    assert set(PROFILES["short"]) <= set(PROFILES["full"]) == {f["fault"] for f in ALL}


def test_a_standby_leads_within_the_lease_and_its_takeover() -> None:
    assert fault_problems({**COORD, "standby_led_after_s": 3.2}) == []  # lease 3 s + the takeover's second
    assert fault_problems({**COORD, "standby_led_after_s": 4.1}) != []


def test_each_broken_promise_fails_its_fault() -> None:
    cases = [
        ({**PS, "lost_writes": 2}, "acknowledged writes lost"),
        ({**PS, "linearizable": False}, "not linearizable"),
        ({**PS, "duplicate_applications": 1}, "duplicate"),
        ({**PS, "acked_by_cut_server": 1}, "after its lease"),
        ({**PS, "served_after_lease_s": 3.5}, "not served elsewhere"),
        ({**PS, "served_after_lease_s": None}, "not served elsewhere"),
        ({**PS, "rejoined_after_heal_s": None}, "did not rejoin"),
        ({**PS, "caught_up_after_heal_s": None}, "did not catch up"),
        ({**FOLLOWER, "converged_after_heal_s": None}, "did not converge"),
        ({**FOLLOWER, "client_errors": 2, "client": {**BASE["client"], "errors": {"ServerBusy": 2}}}, "clients saw 2"),
        ({**FOLLOWER, "primaries_on_target": 1}, "still primary"),
        ({**FOLLOWER, "caught_up_after_heal_s": None}, "did not catch up"),
        ({**COORD, "standby_led_after_s": 4.1}, "did not lead within the lease"),
        ({**COORD, "standby_led_after_s": None}, "did not lead within the lease"),
        ({**COORD, "range_gap_s": 3.1}, "went unserved for 3.1 s"),
        ({**COORD, "old_leader_standby_after_heal_s": None}, "as a standby"),
        ({**MINORITY, "gap_s": 1.5}, "writes stopped for 1.5 s"),
        ({**MINORITY, "client_errors": 1}, "clients saw 1"),
        ({**MINORITY, "create_table_during_cut": {"ok": False, "code": "ServerBusy", "after_s": 3}}, "creating a table"),
        ({**MAJORITY, "create_table_during_cut": {"ok": True, "code": None, "after_s": 0.1}}, "without an etcd quorum"),
        ({**MAJORITY, "writes_went_on_s": 0.1}, "writes stopped 0.1 s after the cut"),
        ({**MAJORITY, "writes_resumed_after_heal_s": 11.0}, "did not resume"),
        ({**MAJORITY, "writes_resumed_after_heal_s": None}, "did not resume"),
        ({**MAJORITY, "create_table_after_heal_s": None}, "after the heal"),
        ({**BOTH, "served_after_lease_s": 3.2}, "not served elsewhere within 3.0 s of its lease"),
        ({**BOTH, "served_after_lease_s": None}, "not served elsewhere"),
        ({**BOTH, "others_lease_lapses": {"ps-3": 1}}, "other partition servers lost their lease: {'ps-3': 1}"),
        ({**BOTH, "rejoined_after_heal_s": None}, "did not rejoin"),
        ({**HOST, "rebuilt_after_cut_s": None}, "not all rebuilt"),
        ({**HOST, "rejoined_after_heal_s": None}, "replacement ps-3 did not rejoin"),
        ({"fault": "primary", "target": "?", "error": "boom"}, "boom"),
    ]
    for fault, words in cases:
        problems = fault_problems(fault)
        assert any(words in p for p in problems), (fault, problems)
        assert not verdict([PS, fault])
    never = copy.deepcopy(PS)
    never["fence"]["lease_lapsed_after_cut_s"] = None
    assert any("never said" in p for p in fault_problems(never))
    slow = copy.deepcopy(PS)
    slow["fence"]["lease_lapsed_after_cut_s"] = 3.6
    assert any("lapsed only 3.6 s" in p for p in fault_problems(slow))
    kept = copy.deepcopy(PS)
    kept["fence"]["answered_after_lease"] = 3
    assert any("answered 3 data requests" in p for p in fault_problems(kept))
    bad = {**COORD, "range_gap_s": 3.9,
           "coordinator_events": coordinator_events([{"time": 102.5, "kind": "insync", "range": "r4",
                                                      "insync": ["ps-2"], "dropped": ["ps-1", "ps-3"]}], 100.0)}
    text = format_report({**REPORT, "faults": [PS, bad], "passed": False})
    assert text.splitlines()[-1] == "FAIL" and "FAILED: a range went unserved for 3.9 s" in text
    assert "+2.50 s insync r4: insync ps-2, dropped ps-1,ps-3" in text
    assert "error: boom" in format_report({**REPORT, "faults": [{"fault": "setup", "target": "cluster",
                                                                  "error": "boom"}], "passed": False})


def test_outage_range_gaps_and_client_errors() -> None:
    times = [0.5, 1.0, 1.4, 6.0, 6.1]
    assert outage(times, 0.0, 5.0) == (1.4, 4.6)  # went on 1.4 s after the cut, stopped 4.6 s (past the heal)
    assert outage([], 0.0, 5.0) == (0.0, 5.0)  # nothing after the cut: stopped at once, until the heal
    assert outage([0.5, 1.0], 0.0, 5.0) == (1.0, 4.0)  # nothing after the stop: it lasts until the heal
    acks = [[0.5, "a", "p00"], [2.5, "a", "p00"], [1.0, "b", "p05"]]
    assert range_gaps(acks, [{"id": "r1", "low": "", "high": "p04"}, {"id": "r2", "low": "p04", "high": None}],
                      0.0, 3.0) == {"r1": 2.0, "r2": 2.0}
    client = {"unknown": 2, "errors": {"ServerBusy": 3, "OperationTimedOut": 1, "UpdateConditionNotSatisfied": 9,
                                       "EntityAlreadyExists": 1, "ResourceNotFound": 4, "SomethingNew": 1}}
    assert client_errors(client) == 2 + 3 + 1 + 1  # 5xx and unknown codes count; the workload's 404/409/412 do not
    assert client_errors({"unknown": 0, "errors": {}}) == 0


def test_coordinator_events_are_relative_to_the_cut_and_bounded() -> None:
    events = [{"time": 100.0 + i, "kind": "promote", "range": f"r{i}", "source": "ps-1", "target": "ps-2",
               "reason": "ps-1 not alive", "epoch": 3} for i in range(15)]
    lines = coordinator_events(events, 99.0, limit=12)
    assert lines[0] == "+1.00 s promote r0: source ps-1, target ps-2, reason ps-1 not alive, epoch 3"
    assert len(lines) == 13 and lines[-1] == "... and 3 more"


def test_a_failed_fault_explains_its_violation_with_the_cut_in_the_window() -> None:
    bad = {**PS, "linearizable": False, "linearizability": "violation", "linearizability_key": ("p03", "k1"),
           "linearizability_detail": "key ('p03', 'k1'): not linearizable\n  #7 read -> 'a' ok [5.0, 5.1]",
           "linearizability_window": [5.0, 5.1], "history_file": "/tmp/rangetable-histories/history-x.jsonl",
           "injected": [{"t": 3.0, "until": 7.0, "what": "cut ps-1"},
                        {"t": 5.2, "until": None, "what": "supervisor: ps-1 (pid 9) lost its lease: killed it"}]}
    text = format_report({**REPORT, "faults": [bad], "passed": False})
    assert "FAILED: history not linearizable" in text
    assert "linearizability: VIOLATION on key ('p03', 'k1')" in text and "#7 read -> 'a' ok" in text
    assert "t=3.00-7.00 s  cut ps-1" in text and "lost its lease" not in text  # after the window
    assert "rangetable verify history /tmp/rangetable-histories/history-x.jsonl" in text
    assert text.splitlines()[-1] == "FAIL"
