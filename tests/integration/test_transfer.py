"""rangetable export / import: the file formats (pure), and round trips through a real cluster — all
eight EDM types equal entity by entity, an export resumed from its continuation token, an import
stopped by a bad record and resumed from its last chunk."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from cli.coordinator_client import call
from tests.cluster import ROOT, Cluster, ClusterFactory
from tests.typed_samples import dump, same_props
from tests.unit.test_transfer import N, sample

# --- formats (pure) ----------------------------------------------------------------------------


# --- through a real cluster ----------------------------------------------------------------------


def rangetable(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        call(c.native, {"op": "create_table", "table": "Source"})
        ents = sample()
        for i in range(0, N, 25):
            call(c.native, {"op": "batch", "table": "Source", "ops": [
                {"op": "insert_or_replace", "pk": pk, "rk": rk, "props": props, "if_match": None}
                for pk, rk, _ts, props in ents[i:i + 25]]})
        rid = next(r["id"] for r in c.status()["ranges"] if r["table"] == "Source")
        right = c.admin({"op": "split", "range": rid, "key": "p05"}, busy_retry_s=30)["right"]
        c.admin({"op": "move", "range": right, "server": "ps-2"})
        yield c


def assert_equal_tables(c: Cluster, a: str, b: str) -> None:
    src, dst = dump(c.native, a), dump(c.native, b)
    assert len(src) == N and src.keys() == dst.keys()
    for key, (_ts, props) in src.items():
        assert same_props(dst[key][1], props), (key, dst[key][1], props)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_export_resumed_then_import_round_trip(cluster: Cluster, tmp_path, fmt: str) -> None:
    d = str(cluster.data_dir)
    path = str(tmp_path / f"source.{fmt}")
    out = rangetable("export", "Source", "--to", path, "--page-size", "40", "--max-pages", "3", "--data-dir", d)
    assert out.returncode == 0, out.stderr
    assert "stopped after 3 pages" in out.stdout
    state = json.load(open(path + ".export-resume.json"))
    assert state["entities"] == 120 and state["next"] is not None
    with open(path, "ab") as f:
        f.write(b"torn half of a page that was never recorded")  # an export killed mid-page
    again = rangetable("export", "Source", "--to", path, "--data-dir", d)
    assert again.returncode != 0 and "--resume" in again.stderr
    out = rangetable("export", "Source", "--to", path, "--resume", "--page-size", "40", "--data-dir", d, "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["complete"] and res["entities"] == N and res["resumed_from"] == 120
    one_shot = str(tmp_path / f"one-shot.{fmt}")
    assert rangetable("export", "Source", "--to", one_shot, "--data-dir", d).returncode == 0
    assert open(path, "rb").read() == open(one_shot, "rb").read()

    out = rangetable("import", f"Copy{fmt}", "--from", path, "--data-dir", d, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["entities"] == N
    assert_equal_tables(cluster, "Source", f"Copy{fmt}")


def test_import_stops_at_a_bad_record_and_resumes(cluster: Cluster, tmp_path) -> None:
    d = str(cluster.data_dir)
    path = tmp_path / "source.jsonl"
    assert rangetable("export", "Source", "--to", str(path), "--data-dir", d).returncode == 0
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    good = lines[179]
    lines[179] = re.sub(r'"i32":-?[0-9]+', '"i32@odata.type":"Edm.Int32","i32":"x"', good, count=1)
    assert lines[179] != good
    path.write_text("".join(lines), encoding="utf-8")
    out = rangetable("import", "Partial", "--from", str(path), "--chunk", "50", "--data-dir", d)
    assert out.returncode != 0
    assert "line 180: InvalidInput: The value of 'i32' is not a valid Edm.Int32." in out.stderr, out.stderr
    assert len(dump(cluster.native, "Partial")) == 150  # three chunks done, nothing of the fourth
    assert json.load(open(str(path) + ".import-resume.json"))["records"] == 150
    lines[179] = good
    path.write_text("".join(lines), encoding="utf-8")
    out = rangetable("import", "Partial", "--from", str(path), "--chunk", "50", "--resume", "--data-dir", d)
    assert out.returncode == 0, out.stderr
    assert "imported 150 entities" in out.stdout and "after record 150" in out.stdout
    assert_equal_tables(cluster, "Source", "Partial")
    assert not (tmp_path / "source.jsonl.import-resume.json").exists()


def test_export_of_a_missing_table(cluster: Cluster, tmp_path) -> None:
    out = rangetable("export", "Nowhere", "--to", str(tmp_path / "x.jsonl"), "--data-dir", str(cluster.data_dir))
    assert out.returncode != 0 and "TableNotFound" in out.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_import_skips_the_first_records(cluster: Cluster, tmp_path, fmt: str) -> None:
    d = str(cluster.data_dir)
    path = str(tmp_path / f"source.{fmt}")
    assert rangetable("export", "Source", "--to", path, "--data-dir", d).returncode == 0
    out = rangetable("import", f"Skip{fmt}", "--from", path, "--skip", "100", "--data-dir", d, "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["entities"] == N - 100 and res["resumed_from"] == 100 and res["records"] == N
    src, dst = dump(cluster.native, "Source"), dump(cluster.native, f"Skip{fmt}")
    assert sorted(dst) == sorted(src)[100:]
    assert all(same_props(dst[k][1], src[k][1]) for k in dst)
