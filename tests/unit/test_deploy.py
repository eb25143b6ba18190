"""deploy/: what can be checked without a Docker engine or a Kubernetes cluster (deploy/README.md says what).

The tests that start no process; those that do are in tests/integration/test_deploy.py.
"""
from __future__ import annotations

import configparser
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
from tests.three_hosts import HOSTS, expand, read_env_file

DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
HOSTS_DIR = DEPLOY / "systemd" / "hosts"
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


def _unit_commands(host: str = "a") -> Iterator[tuple[str, str, list[str]]]:
    """Every Exec line of the units, as systemd runs them on ``host`` (``%i``, its env files' ``${VAR}``)."""
    env = {**read_env_file(HOSTS_DIR / f"host-{host}" / "rangetable.env"),
           **read_env_file(HOSTS_DIR / f"host-{host}" / "etcd.env")}
    for unit in UNITS:
        for line in unit.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key in ("ExecStart", "ExecStartPre", "ExecStop", "ExecStartPost"):
                yield unit.name, key, expand(value, f"ps-{host}", env)


def test_every_yaml_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert {f.name for f in files} >= {"compose.yaml", "kustomization.yaml", "coordinator.yaml",
                                        "partition-servers.yaml", "frontends.yaml", "etcd.yaml"}
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
        if name == "etcd":
            continue  # etcd's own flags: tests/integration/test_deploy.py checks them against `etcd --help`
        ctx = parse_rangetable(command)
        seen.add(command[0])
        if command[0] in ROLES - {"coordinator"}:
            assert ctx.params["coordinator"] == "tcp://coordinator-1:10010,tcp://coordinator-2:10010", name
    assert seen >= ROLES | {"keys", "cert"}


def test_compose_has_a_volume_per_partition_server_and_coordinators_on_etcd() -> None:
    doc = _docs(DEPLOY / "compose.yaml")[0]
    svcs = doc["services"]
    roles = [s["command"][0] for name, s in svcs.items() if name != "etcd"]
    assert roles.count("partition-server") == 3 and roles.count("coordinator") == 2
    data_volumes = {}
    for name, svc in svcs.items():
        if name == "etcd":
            continue
        cmd = svc["command"]
        ctx = parse_rangetable(cmd)
        mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
        if cmd[0] in ROLES:  # every role reads the keys, read-only, made once by the init service
            assert svc["volumes"][0] == "keys:/keys:ro" and "keys" in svc["depends_on"], name
            assert svc["depends_on"]["keys"]["condition"] == "service_completed_successfully", name
        if cmd[0] == "coordinator":  # its state in etcd: no volume of its own; bind all, advertise its name
            assert ctx.params["meta"] == "etcd://etcd:2379/rangetable" and ctx.params["data_dir"] not in mounts
            assert ctx.params["bind"].startswith("tcp://0.0.0.0:") and ctx.params["advertise"] == f"tcp://{name}"
            assert ctx.params["replicas"] == 3 and ctx.params["min_insync"] == 2
        if cmd[0] == "partition-server":  # its own volume at its data dir, its own replication endpoint
            assert ctx.params["server_id"] == name and ctx.params["advertise"] == f"tcp://{name}"
            assert ctx.params["advertise_replication"] == f"tcp://{name}" and ctx.params["replication"]
            data_volumes[name] = mounts[ctx.params["data_dir"]]
            assert svc["healthcheck"]["test"][1:4] == ["python", "-m", "rangetable.kernel.watchdog"]
            assert svc["healthcheck"]["test"][5] == ctx.params["alive_file"]
    assert sorted(data_volumes.values()) == sorted(data_volumes) == ["ps-1", "ps-2", "ps-3"]  # one each
    assert set(doc["volumes"]) == {"keys", "tls", "etcd", "ps-1", "ps-2", "ps-3"}  # none shared by servers
    assert svcs["keys"]["restart"] == "no" and svcs["keys"]["volumes"] == ["keys:/keys"]
    etcd = svcs["etcd"]["command"]
    assert etcd[etcd.index("--advertise-client-urls") + 1] == "http://etcd:2379"


def test_unit_commands_use_only_flags_the_cli_accepts() -> None:
    for host, ip in HOSTS.items():
        roles = set()
        for unit, key, words in _unit_commands(host):
            if unit == "rangetable-etcd.service":
                assert words == ["/usr/bin/etcd"]  # every setting in etcd.env
                continue
            assert words[0] == "/opt/rangetable/bin/rangetable", (unit, key)
            ctx = parse_rangetable(words[1:])
            if key == "ExecStart":
                roles.add(words[1])
                assert unit == f"rangetable-{words[1]}@.service"
                for flag in ("bind", "pub_bind", "replication", "native", "http"):  # the host's own address
                    source = ctx.get_parameter_source(flag) if flag in ctx.params else None
                    if source is not None and source.name == "COMMANDLINE":
                        assert ip in ctx.params[flag], (unit, flag)
                if words[1] in ("coordinator", "partition-server"):
                    assert ctx.params["data_dir"].startswith("/var/lib/rangetable/")
        assert roles == ROLES


def test_units_read_the_host_env_and_fence_partition_servers() -> None:
    assert {u.name for u in UNITS} == {f"rangetable-{r}@.service" for r in ROLES} | {"rangetable-etcd.service"}
    dirs = set()
    for unit in UNITS:
        ini = configparser.ConfigParser(strict=False, interpolation=None)  # EnvironmentFile= repeats
        ini.optionxform = str  # type: ignore[assignment,method-assign]
        ini.read_string(unit.read_text())
        assert ini.sections() == ["Unit", "Service", "Install"], unit.name
        svc = ini["Service"]
        assert svc["Restart"] == "always" and svc["User"] == "rangetable", unit.name
        assert ini["Install"]["WantedBy"] == "multi-user.target"
        env_files = [ln.removeprefix("EnvironmentFile=") for ln in unit.read_text().splitlines()
                     if ln.startswith("EnvironmentFile=")]
        wanted = "/etc/rangetable/etcd.env" if "etcd" in unit.name else "/etc/rangetable/rangetable.env"
        assert env_files[0] == wanted, unit.name  # required (no "-"): the host's settings must be there
        dirs.update(re.findall(r"--data-dir (\S+)", svc["ExecStart"]))
    assert dirs == {"/var/lib/rangetable/coordinator", "/var/lib/rangetable/server"}  # never one directory
    ps = (DEPLOY / "systemd" / "rangetable-partition-server@.service").read_text()
    # the watchdog the server pings on every lease renewal (rangetable/kernel/watchdog.py) kills a frozen one
    assert "\nWatchdogSec=3\n" in ps and "\nWatchdogSignal=SIGKILL\n" in ps and "\nNotifyAccess=main\n" in ps
    assert "ExecStartPre" not in (DEPLOY / "systemd" / "rangetable-coordinator@.service").read_text()  # keys: once


def test_host_env_files_describe_three_hosts() -> None:
    envs = {h: read_env_file(HOSTS_DIR / f"host-{h}" / "rangetable.env") for h in HOSTS}
    etcds = {h: read_env_file(HOSTS_DIR / f"host-{h}" / "etcd.env") for h in HOSTS}
    assert sorted(p.name for p in HOSTS_DIR.iterdir()) == [f"host-{h}" for h in HOSTS]
    coordinators = {f"tcp://{ip}:10010" for ip in HOSTS.values()}
    known = set().union(*(_envvars(r) for r in ROLES))
    for h, ip in HOSTS.items():
        env, etcd = envs[h], etcds[h]
        assert env["HOST_ADDRESS"] == ip
        assert set(env["RANGETABLE_COORDINATOR"].split(",")) == coordinators  # all three, on every host
        assert env["RANGETABLE_META"] == f"etcd://{ip}:2379/rangetable"  # through this host's own member
        assert env["RANGETABLE_REPLICAS"] == "3" and env["RANGETABLE_MIN_INSYNC"] == "2"
        assert {k for k in env if k.startswith("RANGETABLE_")} <= known  # every one is some role's flag
        assert etcd["ETCD_NAME"] == f"host-{h}" and etcd["ETCD_LISTEN_PEER_URLS"] == f"http://{ip}:2380"
        assert etcd["ETCD_ADVERTISE_CLIENT_URLS"] == f"http://{ip}:2379"
        assert etcd["ETCD_INITIAL_CLUSTER"] == ",".join(f"host-{x}=http://{y}:2380" for x, y in HOSTS.items())
        assert etcd["ETCD_DATA_DIR"].startswith("/var/lib/rangetable/")
    assert len({e["RANGETABLE_ZONE"] for e in envs.values()}) == 3  # a zone each


def _envvars(role: str) -> set[str]:
    """The RANGETABLE_* variables a role's command reads (its options' help names them: ``[env NAME; …]``)."""
    ctx = parse_rangetable([role])
    return {m for p in ctx.command.params for m in re.findall(r"\[env (RANGETABLE_\w+);", getattr(p, "help", "") or "")}


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


def test_readme_shows_what_the_units_run_on_host_b() -> None:
    """deploy/README.md's "without systemd" block is exactly the units' ExecStart lines on host-b."""
    env = read_env_file(HOSTS_DIR / "host-b" / "rangetable.env")
    readme = (DEPLOY / "README.md").read_text()
    for role, instance in (("coordinator", "b"), ("partition-server", "ps-b"), ("frontend", "fe-b"),
                           ("http-frontend", "http-b")):
        line = next(ln for ln in (DEPLOY / "systemd" / f"rangetable-{role}@.service").read_text().splitlines()
                    if ln.startswith("ExecStart="))
        words = expand(line.removeprefix("ExecStart="), instance, env)
        assert "\n" + shlex.join(["rangetable", *words[1:]]) + "\n" in readme, role
