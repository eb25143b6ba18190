"""Hypothesis state machine: range stores (split, merged, reopened) against a plain dict model."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partition_server.store.range_store import RangeStore, wall_ticks
from rangetable.edm import INT32, STRING, etag_from_ticks
from rangetable.errors import TableError

# A tmpfs keeps the many opens, checkpoints and fsyncs of this logic test off a busy disk.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
PKS = ["a", "b", "c", "d", "e"]
RKS = ["1", "2", "3"]
OPS = ["insert", "replace", "merge", "delete", "insert_or_replace", "insert_or_merge"]
NEVER_ETAG = etag_from_ticks(630000000000000000)

props_st = st.dictionaries(
    st.sampled_from(["x", "y", "z"]),
    st.one_of(
        st.integers(-5, 5).map(lambda v: [INT32, v]), st.text("ab", max_size=3).map(lambda v: [STRING, v])
    ),
    max_size=3,
)
if_match_st = st.sampled_from(["none", "star", "right", "wrong"])


class RangeStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="rt-stateful-", dir=SCRATCH))
        self.gen = 0
        self.n_req = 0
        # (low pk inclusive or None, high pk exclusive or None, store, last ts seen in its lineage)
        self.ranges: list[list] = [[None, None, RangeStore.open(self._path()), 0]]
        self.model: dict[tuple[str, str], tuple[int, dict]] = {}
        self.last_req: tuple | None = None  # (method, pk, request id, argument, result) to retry

    def _rid(self) -> str:
        self.n_req += 1
        return f"req-{self.n_req}"

    def _path(self) -> Path:
        self.gen += 1
        return self.root / f"s{self.gen}"

    def _range_of(self, pk: str) -> list:
        for r in self.ranges:
            if (r[0] is None or pk >= r[0]) and (r[1] is None or pk < r[1]):
                return r
        raise AssertionError(pk)

    def _if_match(self, kind: str, key: tuple[str, str]) -> str | None:
        cur = self.model.get(key)
        return {
            "none": None,
            "star": "*",
            "right": etag_from_ticks(cur[0]) if cur else NEVER_ETAG,
            "wrong": NEVER_ETAG,
        }[kind]

    def _expect(self, op: dict) -> tuple[str | None, dict | None]:
        """(expected error, new props or None for a delete) per the model."""
        cur = self.model.get((op["pk"], op["rk"]))
        kind, im = op["op"], op.get("if_match")
        if kind == "insert" and cur:
            return "EntityAlreadyExists", None
        if kind in ("replace", "merge", "delete"):
            if cur is None:
                return "ResourceNotFound", None
            if im not in (None, "*") and im != etag_from_ticks(cur[0]):
                return "UpdateConditionNotSatisfied", None
        if kind == "delete":
            return None, None
        if kind in ("merge", "insert_or_merge") and cur:
            return None, {**cur[1], **op["props"]}
        return None, dict(op["props"])

    def _ts_check(self, r: list, ts: int) -> None:
        assert ts > r[3]
        r[3] = ts

    @rule(
        kind=st.sampled_from(OPS),
        pk=st.sampled_from(PKS),
        rk=st.sampled_from(RKS),
        props=props_st,
        im=if_match_st,
    )
    def write(self, kind, pk, rk, props, im):
        op = {"op": kind, "pk": pk, "rk": rk, "if_match": self._if_match(im, (pk, rk))}
        if kind != "delete":
            op["props"] = props
        want, new = self._expect(op)
        r = self._range_of(pk)
        rid = self._rid()
        try:
            res = r[2].write(op, request_id=rid)
        except TableError as e:
            assert e.error_code == want
            self.last_req = ("write", pk, rid, op, e)  # a refusal is recorded: its retry is refused again
            return
        assert want is None
        self.last_req = ("write", pk, rid, op, res)
        if kind == "delete":
            assert res is None
            del self.model[(pk, rk)]
        else:
            assert res.props == new
            self._ts_check(r, res.ts)
            self.model[(pk, rk)] = (res.ts, new)

    @rule(
        pk=st.sampled_from(PKS),
        items=st.lists(
            st.tuples(st.sampled_from(RKS), st.sampled_from(OPS), props_st, if_match_st),
            min_size=1,
            max_size=3,
            unique_by=lambda t: t[0],
        ),
    )
    def batch(self, pk, items):
        ops = []
        for rk, kind, props, im in items:
            op = {"op": kind, "pk": pk, "rk": rk, "if_match": self._if_match(im, (pk, rk))}
            if kind != "delete":
                op["props"] = props
            ops.append(op)
        expected = [self._expect(op) for op in ops]
        fail = next((i for i, (e, _) in enumerate(expected) if e), None)
        r = self._range_of(pk)
        rid = self._rid()
        try:
            res = r[2].batch(ops, request_id=rid)
        except TableError as e:
            assert (e.error_code, e.index) == (expected[fail][0], fail)  # no entity changed: the model checks
            self.last_req = ("batch", pk, rid, ops, e)
            return
        assert fail is None
        self.last_req = ("batch", pk, rid, ops, res)
        for op, (_, new), ent in zip(ops, expected, res, strict=True):
            key = (pk, op["rk"])
            if new is None:
                assert ent is None
                del self.model[key]
            else:
                assert ent.props == new
                self.model[key] = (ent.ts, new)
        stamps = {e.ts for e in res if e is not None}
        assert len(stamps) <= 1  # one Timestamp for the whole batch
        if stamps:
            self._ts_check(r, stamps.pop())

    @precondition(lambda self: len(self.ranges) == 1)
    @rule(spk=st.sampled_from(PKS[1:]), compact=st.booleans())
    def split(self, spk, compact):
        _, _, s, last = self.ranges[0]
        left, right = self._path(), self._path()
        s.split(spk, left, right, compact=compact)
        s.close()
        shutil.rmtree(s.path)
        self.ranges = [[None, spk, RangeStore.open(left), last], [spk, None, RangeStore.open(right), last]]

    @precondition(lambda self: len(self.ranges) == 2)
    @rule()
    def merge(self):
        (_, _, ls, lt), (_, _, rs, rt) = self.ranges
        ls.close()
        rs.close()
        out = self._path()
        RangeStore.merge(ls.path, rs.path, out)
        m = RangeStore.open(out)
        assert m.last_ts == max(ls.last_ts, rs.last_ts)
        self.ranges = [[None, None, m, max(lt, rt)]]

    @precondition(lambda self: self.last_req is not None)
    @rule()
    def retry_last_request(self):
        method, pk, rid, arg, res = self.last_req
        r = self._range_of(pk)
        before = r[2].last_ts
        if isinstance(res, TableError):  # refused the first time: refused the same way, not decided again
            try:
                getattr(r[2], method)(arg, request_id=rid)
            except TableError as e:
                assert (e.error_code, e.index) == (res.error_code, res.index)
            else:
                raise AssertionError(f"a retry of a request refused with {res.error_code} was applied")
        else:
            assert getattr(r[2], method)(arg, request_id=rid) == res
        assert r[2].last_ts == before  # nothing applied again

    @rule()
    def compact_pending(self):
        for r in self.ranges:
            r[2].compact_pending()
            assert not r[2].compaction_pending

    @rule()
    def reopen(self):
        for r in self.ranges:
            r[2].close()
            r[2] = RangeStore.open(r[2].path)

    @rule(back=st.integers(1, 10**9))
    def clock_goes_back(self, back):
        # Up to 100 s behind the wall clock (request records stay inside their 600 s window).
        for r in self.ranges:
            r[2].clock = lambda b=back: wall_ticks() - b

    @invariant()
    def contents_match_model(self):
        seen = {}
        for lo, hi, s, _ in self.ranges:
            for e in s.scan(b"", None)[0]:
                assert (lo is None or e.pk >= lo) and (hi is None or e.pk < hi)
                seen[(e.pk, e.rk)] = (e.ts, e.props)
        assert seen == self.model

    def teardown(self):
        for r in self.ranges:
            r[2].close()
        shutil.rmtree(self.root, ignore_errors=True)


RangeStoreMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRangeStoreMachine = RangeStoreMachine.TestCase
