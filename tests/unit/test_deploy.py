"""deploy/: what can be checked without a Docker engine or a Kubernetes cluster (deploy/README.md says what).

The tests that start no process; those that do are in tests/integration/test_deploy.py.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from cli.main import main
from tests.cluster import ROOT

DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
ROLES = {"coordinator", "partition-server", "frontend", "http-frontend"}


def _docs(path: Path) -> list[Any]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def parse_rangetable(argv: list[str]) -> click.Context:
    """Parse ``argv`` (after ``rangetable``) with click, as the CLI would, without running the command."""
    cmd: click.Command = main
    words = list(argv)
    path = ["rangetable"]
    while isinstance(cmd, click.Group):
        assert words, f"{' '.join(path)} needs a subcommand"
        sub = cmd.get_command(click.Context(cmd), words[0])
        assert sub is not None, f"{' '.join(path)} has no subcommand {words[0]!r}"
        path.append(words.pop(0))
        cmd = sub
    try:
        ctx = cmd.make_context(" ".join(path), words)
    except click.UsageError as exc:
        raise AssertionError(f"{' '.join(path)} {shlex.join(words)}: {exc.format_message()}") from None
    return ctx


def _compose_commands() -> Iterator[tuple[str, list[str]]]:
    doc = _docs(DEPLOY / "compose.yaml")[0]
    for name, svc in doc["services"].items():
        yield name, svc["command"]


def _unit_commands() -> Iterator[tuple[str, str, list[str]]]:
    for unit in UNITS:
        for line in unit.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key in ("ExecStart", "ExecStartPre", "ExecStop", "ExecStartPost"):
                words = shlex.split(value.replace("%i", "ps-b"))
                yield unit.name, key, words


def _k8s_containers() -> Iterator[tuple[str, dict]]:
    for path in K8S:
        for doc in _docs(path):
            spec = (doc.get("spec") or {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                yield f"{path.name}:{doc['metadata']['name']}", c


def test_every_yaml_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert {f.name for f in files} >= {"compose.yaml", "kustomization.yaml", "coordinator.yaml",
                                        "partition-servers.yaml", "frontends.yaml", "storage.yaml"}
    for f in files:
        assert _docs(f), f"{f} is empty"


def test_parser_refuses_what_the_cli_refuses() -> None:
    with pytest.raises(AssertionError, match="No such option"):
        parse_rangetable(["partition-server", "--no-such-flag", "1"])
    with pytest.raises(AssertionError, match="not a valid float"):
        parse_rangetable(["coordinator", "--lease-s", "two"])
    with pytest.raises(AssertionError, match="requires an argument"):
        parse_rangetable(["frontend", "--native"])
    with pytest.raises(AssertionError, match="no subcommand"):
        parse_rangetable(["keys", "make"])
    assert parse_rangetable(["keys", "init", "--keys-dir", "/k"]).params["keys_dir"] == "/k"


def test_compose_commands_use_only_flags_the_cli_accepts() -> None:
    seen = set()
    for name, command in _compose_commands():
        ctx = parse_rangetable(command)
        seen.add(command[0])
        if command[0] in ROLES - {"coordinator"}:
            assert ctx.params["coordinator"] == "tcp://coordinator:10010", name
    assert seen >= ROLES | {"keys", "cert"}


def test_compose_topology() -> None:
    doc = _docs(DEPLOY / "compose.yaml")[0]
    svcs = doc["services"]
    roles = [s["command"][0] for s in svcs.values()]
    assert roles.count("partition-server") == 3 and roles.count("frontend") == 1
    assert roles.count("http-frontend") == 1 and roles.count("coordinator") == 1
    for name, svc in svcs.items():
        assert "data:/data" in svc["volumes"], name  # one shared volume
        cmd = svc["command"]
        if cmd[0] in ("coordinator", "partition-server"):  # bind every interface, advertise the service name
            ctx = parse_rangetable(cmd)
            assert ctx.params["bind"].startswith("tcp://0.0.0.0:")
            assert ctx.params["advertise"] == f"tcp://{name}"
            if cmd[0] == "partition-server":
                assert ctx.params["server_id"] == name and ctx.params["alive_file"]
                assert svc["healthcheck"]["test"][1:4] == ["python", "-m", "rangetable.watchdog"]
        if cmd[0] in ROLES:  # keys (and the certificate) first, made once by the init services
            dep = svc["depends_on"]
            assert "keys" in dep or "coordinator" in dep, name
    assert svcs["coordinator"]["depends_on"]["keys"]["condition"] == "service_completed_successfully"
    assert svcs["keys"]["restart"] == "no" and doc["volumes"] == {"data": {}}


def test_unit_commands_use_only_flags_the_cli_accepts() -> None:
    roles = set()
    for unit, key, words in _unit_commands():
        assert words[0] == "/opt/rangetable/bin/rangetable", (unit, key)
        parse_rangetable(words[1:])
        if key == "ExecStart":
            roles.add(words[1])
            assert unit == f"rangetable-{words[1]}@.service"
    assert roles == ROLES


def test_units_restart_always_and_fence_partition_servers() -> None:
    assert {u.name for u in UNITS} == {f"rangetable-{r}@.service" for r in ROLES}
    for unit in UNITS:
        text = unit.read_text()
        assert "\nRestart=always\n" in text and "\nUser=rangetable\n" in text, unit.name
    ps = (DEPLOY / "systemd" / "rangetable-partition-server@.service").read_text()
    # the watchdog the server pings on every lease renewal (rangetable/watchdog.py) kills a frozen one
    assert "\nWatchdogSec=3\n" in ps and "\nWatchdogSignal=SIGKILL\n" in ps and "\nNotifyAccess=main\n" in ps


def test_k8s_commands_use_only_flags_the_cli_accepts() -> None:
    roles = set()
    for where, c in _k8s_containers():
        assert c["image"] == "rangetable" and "command" not in c, where  # the image's ENTRYPOINT: rangetable
        ctx = parse_rangetable(c["args"])
        roles.add(c["args"][0])
        if c["args"][0] != "coordinator":
            assert ctx.params["coordinator"] == "tcp://rangetable-coordinator:10010", where
        probe = (c.get("livenessProbe") or {}).get("exec")
        if probe:
            assert probe["command"][:3] == ["python", "-m", "rangetable.watchdog"]
            assert probe["command"][4] == ctx.params["alive_file"]
    assert roles == ROLES


def _documented_command_lines() -> Iterator[tuple[str, list[str]]]:
    """Full command lines in deploy/README.md's code blocks and in the files' usage comments."""
    readme = (DEPLOY / "README.md").read_text()
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, flags=re.S)
    for path, text in [("README.md", "\n".join(blocks))] + [
            (p.name, "\n".join(line.lstrip("# ") for line in p.read_text().splitlines()
                                if re.match(r"#\s{2,}\S", line)))  # indented comment lines: the examples
            for p in [DEPLOY / "compose.yaml", DEPLOY / "k8s" / "kustomization.yaml"]]:
        text = re.sub(r"\\\n\s*", " ", text)  # continuation lines
        for line in text.splitlines():
            line = line.strip().removeprefix("$ ")
            m = re.search(r"run --rm keys (.*)", line)  # `docker compose run --rm keys ARGS` runs `rangetable ARGS`
            if m or line.startswith("rangetable "):
                yield path, shlex.split(m.group(1) if m else line.removeprefix("rangetable "), comments=True)


def test_documented_command_lines_parse() -> None:
    seen = []
    for path, words in _documented_command_lines():
        parse_rangetable(words)
        seen.append((path, words[0]))
    assert ("README.md", "partition-server") in seen and ("compose.yaml", "keys") in seen
    assert ("kustomization.yaml", "cert") in seen


def _k8s_objects() -> list[dict]:
    return [d for p in K8S if p.name != "kustomization.yaml" for d in _docs(p)]


def test_k8s_objects_hang_together() -> None:
    objs = _k8s_objects()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("StatefulSet", "rangetable-ps") in kinds and ("Deployment", "rangetable-coordinator") in kinds
    assert ("Deployment", "rangetable-frontend") in kinds and ("Deployment", "rangetable-http-frontend") in kinds
    pvcs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PersistentVolumeClaim"}
    assert pvcs["rangetable-data"]["spec"]["accessModes"] == ["ReadWriteMany"]
    kust = _docs(DEPLOY / "k8s" / "kustomization.yaml")[0]
    assert sorted(kust["resources"]) == sorted(p.name for p in K8S if p.name != "kustomization.yaml")
    secrets = {g["name"]: {f.split("=")[0].split("/")[-1] for f in g["files"]} for g in kust["secretGenerator"]}
    services = [o for o in objs if o["kind"] == "Service"]
    workloads = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    for w in workloads:
        name, spec = w["metadata"]["name"], w["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
        for v in pod["volumes"]:
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in pvcs, name
            if "secret" in v:
                keys = secrets[v["secret"]["secretName"]]
                for item in v["secret"].get("items", []):
                    assert item["key"] in keys, (name, item)
        role = pod["containers"][0]["args"][0]
        if role in ("coordinator", "partition-server", "frontend"):  # its own secret key, nobody else's
            mounted = {i["key"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "rangetable-keys"
                       for i in v["secret"]["items"]}
            own = "frontend" if role == "frontend" else role
            assert f"{own}.key_secret" in mounted and len([k for k in mounted if k.endswith("_secret")]) == 1
        if role == "http-frontend":
            mounted = {i["key"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "rangetable-keys"
                       for i in v["secret"]["items"]}
            assert {k for k in mounted if k.endswith("_secret")} == {"frontend.key_secret"}
    for s in services:  # every Service selects a workload and targets ports its containers name
        sel = s["spec"]["selector"]
        targets = [w for w in workloads if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(targets) == 1, s["metadata"]["name"]
        ports = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in s["spec"]["ports"]} <= ports, s["metadata"]["name"]
    sts = next(w for w in workloads if w["kind"] == "StatefulSet")
    headless = next(s for s in services if s["metadata"]["name"] == sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and sts["spec"]["replicas"] == 3


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instr, _, args = line.partition(" ")
            out.append((instr.upper(), args.strip()))
    return out


def test_dockerfile_stages_base_and_user() -> None:
    steps = _dockerfile()
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for i, a in steps if i == "ARG" and "=" in a}
    froms = [a for i, a in steps if i == "FROM"]
    assert [f.split()[-1] for f in froms] == ["build", "runtime"]  # multi-stage: build, then runtime
    base = args["PYTHON_IMAGE"]
    # pinned: an exact CPython release (and Debian release), or a digest
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    assert base.split(":")[1].startswith("{}.{}.{}".format(*sys.version_info[:3]))  # the interpreter we test on
    runtime = steps[[i for i, (instr, _) in enumerate(steps) if instr == "FROM"][1]:]
    users = [a for i, a in runtime if i == "USER"]
    assert users == ["10001:10001"]  # non-root, numeric (Kubernetes' runAsNonRoot can check it)
    assert [i for i, _ in runtime].index("USER") > max(k for k, (i, _) in enumerate(runtime) if i == "RUN")
    assert any(i == "COPY" and a.startswith("--from=build /opt/rangetable") for i, a in runtime)
    assert json.loads(next(a for i, a in runtime if i == "ENTRYPOINT")) == ["rangetable"]
    installs = [a for i, a in steps if i == "RUN" and "pip install" in a]
    assert any("--constraint requirements.lock ." in a for a in installs), installs


def test_dockerfile_copies_every_package() -> None:
    copied = {w.rstrip("/") for i, a in _dockerfile() if i == "COPY" and not a.startswith("--")
              for w in a.split()[:-1]}  # the sources of each COPY (the last word is the destination)
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= copied, packages - copied
    assert {"requirements.lock", "pyproject.toml", "README.md"} <= copied
