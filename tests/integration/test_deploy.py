"""deploy/: what can be checked without a Docker engine or a Kubernetes cluster (deploy/README.md says what).

* every YAML file parses;
* every ``rangetable …`` command line in the compose file, the systemd units and the Kubernetes
  manifests parses with click's parser of that very command (unknown flags, missing values and bad
  types fail), and every health/liveness probe runs a module that exists;
* ``systemd-analyze verify`` on the units (skipped when systemd-analyze is missing);
* the Dockerfile: its stages, the pinned base, the non-root USER, an install constrained by
  requirements.lock whose dry-run resolves to exactly the lock's pins, a wheel with every package, and
  that install in a fresh virtualenv running a cluster;
* the Kubernetes manifests hang together (claims, Secret keys, Service selectors and ports), and
  ``kubectl kustomize`` renders them (skipped when kubectl is missing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from cli.bench.etcd_server import etcd_missing
from tests.cluster import ROOT
from tests.three_hosts import read_env_file
from tests.unit.test_deploy import DEPLOY, UNITS

# --- YAML --------------------------------------------------------------------------------------------------


# --- command lines -----------------------------------------------------------------------------------------


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    # verify wants instances (not templates) and executables that exist: the venv's rangetable stands in
    # for /opt/rangetable/bin/rangetable, the image's path
    bindir = os.path.dirname(sys.executable)
    for unit in UNITS:
        text = unit.read_text().replace("/opt/rangetable/bin/", bindir + "/")
        (tmp_path / unit.name.replace("@.service", "@x1.service")).write_text(text)
    out = subprocess.run([tool, "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr  # warnings (unknown keys …) fail too


def test_etcd_settings_are_flags_of_the_installed_etcd() -> None:
    """Every flag the manifests and compose give etcd, and every ETCD_* of the hosts' etcd.env, is one of
    `etcd --help` (etcd 3.4 here; the image is 3.5, whose flags are a superset of these)."""
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip(str(etcd_missing()))
    out = subprocess.run([etcd, "--help"], capture_output=True, text=True, timeout=30)
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", out.stdout + out.stderr, flags=re.M))
    assert "--max-txn-ops" in known and "--initial-cluster" in known
    given = []
    for doc in yaml.safe_load_all((DEPLOY / "k8s" / "etcd.yaml").read_text()):
        for c in (doc or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            given += [a for a in c["args"] if a.startswith("--")]
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    given += [a for a in compose["services"]["etcd"]["command"] if a.startswith("--")]
    for env in sorted((DEPLOY / "systemd" / "hosts").glob("*/etcd.env")):
        given += ["--" + k.removeprefix("ETCD_").lower().replace("_", "-") for k in read_env_file(env)]
    assert given and set(given) <= known, set(given) - known


def test_probes_run_the_watchdog_module(tmp_path: Path) -> None:
    """The compose healthcheck's and the liveness probe's command line runs here (exit 1: no lease file)."""
    alive = str(tmp_path / "lease-ok")
    out = subprocess.run([sys.executable, "-m", "rangetable.kernel.watchdog", "check", alive, "--max-age", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "no lease" in out.stderr


# --- Kubernetes manifests -----------------------------------------------------------------------------------


def test_kubectl_kustomize_renders_the_manifests(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed on this machine")
    k8s = tmp_path / "k8s"
    shutil.copytree(DEPLOY / "k8s", k8s)
    for argv in (["keys", "init", "--data-dir", str(tmp_path), "--keys-dir", str(k8s / "keys")],
                 ["cert", "create", "--dir", str(k8s / "tls")]):  # the two steps kustomization.yaml asks for
        out = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
    out = subprocess.run([kubectl, "kustomize", str(k8s)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    assert all(o["metadata"].get("namespace") == "rangetable" for o in objs if o["kind"] not in cluster_scoped)
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "rangetable"  # the node reader's ServiceAccount, namespaced
    assert "ReadWriteMany" not in out.stdout and "PersistentVolumeClaim" not in {o["kind"] for o in objs}
    images = {c["image"] for o in objs for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])}
    assert images == {"rangetable:0.1.0", "quay.io/coreos/etcd:v3.5.17"}
    secret = next(o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"].startswith("rangetable-keys-"))
    assert "admin.key_secret" not in secret["data"]  # the admin secret stays with the operator
    names = {o["metadata"]["name"] for o in objs if o["kind"] == "Secret"}
    for o in objs:  # the generated (hashed) Secret names are what the pods mount
        for v in (o.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", [])):
            if "secret" in v:
                assert v["secret"]["secretName"] in names


# --- the Dockerfile ----------------------------------------------------------------------------------------


def _installs_exactly_the_lock(report: Path) -> None:
    """What pip's ``--report`` says it installed: exactly the lock's pins, and no test tool."""
    lock = dict(line.split("==") for line in (ROOT / "requirements.lock").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    lock = {_canonical(k): v.strip() for k, v in lock.items()}
    resolved = {_canonical(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    assert resolved.pop("rangetable") == "0.1.0"
    assert {"pyzmq", "rocksdict", "msgpack", "click", "granian"} <= resolved.keys()
    assert {k: v for k, v in resolved.items() if lock.get(k) != v} == {}  # nothing unpinned or off the lock
    assert "pytest" not in resolved  # test tools stay out of the image


def test_wheel_holds_every_package(tmp_path: Path) -> None:
    """The image installs the project as a wheel: every package and sub-package must be in it."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path), "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("rangetable-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(p.relative_to(ROOT)) for p in ROOT.glob("*/**/__init__.py")
              if p.parts[len(ROOT.parts)] not in ("tests", ".venv", "build")}
    assert wanted <= names, wanted - names
    assert "frontend/http/serve.py" in names and "rangetable/kernel/watchdog.py" in names


@pytest.mark.slow
def test_image_install_runs_a_cluster(tmp_path: Path) -> None:
    """The image's build stage without Docker: a fresh venv, the Dockerfile's pip line (which must install exactly
    the lock's pins), then a cluster from it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # --no-compile: the image's .pyc files are written when its modules are first imported, not here
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    report = tmp_path / "report.json"
    out = subprocess.run([*pip, "--report", str(report), "--constraint", "requirements.lock", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert out.returncode == 0, out.stderr
    _installs_exactly_the_lock(report)
    rt = str(venv / "bin" / "rangetable")
    data = str(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = dict(cwd=tmp_path, capture_output=True, text=True, timeout=90, env=env)  # not the checkout: the install
    try:
        out = subprocess.run([rt, "up", "--detach", "--data-dir", data,
                              "--http-port", "0", "--native-port", "0", "--dashboard-port", "0"], **run)
        assert out.returncode == 0, out.stdout + out.stderr
        assert subprocess.run([rt, "table", "create", "Img", "--data-dir", data], **run).returncode == 0
        out = subprocess.run([rt, "entity", "put", "Img", '{"PartitionKey":"p","RowKey":"r","n":1}',
                              "--data-dir", data], **run)
        assert out.returncode == 0, out.stderr
        out = subprocess.run([rt, "entity", "get", "Img", "p", "r", "--data-dir", data], **run)
        assert out.returncode == 0 and json.loads(out.stdout)["n"] == 1, out.stdout + out.stderr
    finally:
        subprocess.run([rt, "down", "--data-dir", data], **run)


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (prometheus_client == prometheus-client)."""
    return re.sub(r"[-_.]+", "-", name).lower()
