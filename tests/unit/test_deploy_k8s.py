"""deploy/k8s/ without a cluster: the objects hang together, no claim is ReadWriteMany, every partition server
and etcd member has a claim of its own, the disruption budgets keep quorums, and every ``rangetable`` argv
parses with the CLI's own parser. ``kubectl kustomize`` rendering is in tests/integration/test_deploy.py.
"""
from __future__ import annotations

import shlex
from collections.abc import Iterator

from tests.unit.test_deploy import DEPLOY, ROLES, _docs, parse_rangetable

K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
APP = "app.kubernetes.io/name"
COORDINATORS = ",".join(f"tcp://rangetable-coordinator-{i}.rangetable-coordinator:10010" for i in range(3))
ZONE_WRAPPER = ["/bin/sh", "-c", 'exec rangetable "$@" --zone "$(cat /topology/zone)"', "rangetable"]


def _objects() -> list[dict]:
    return [d for p in K8S if p.name != "kustomization.yaml" for d in _docs(p)]


def _by_kind(kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in _objects() if o["kind"] == kind}


def _workloads() -> list[dict]:
    return [o for o in _objects() if o["kind"] in ("Deployment", "StatefulSet")]


def _containers() -> Iterator[tuple[str, dict]]:
    for w in _workloads():
        for c in w["spec"]["template"]["spec"]["containers"]:
            yield w["metadata"]["name"], c


def _argv(c: dict) -> list[str]:
    """The rangetable argv a container runs: its args under the image's ENTRYPOINT, plus what a wrapper adds."""
    if c.get("command") == ZONE_WRAPPER:
        return [*c["args"], "--zone", "zone-a"]  # the initContainer's file, as the wrapper appends it
    assert "command" not in c, c["name"]  # otherwise the image's ENTRYPOINT: rangetable
    return list(c["args"])


def _every_volume_spec() -> Iterator[tuple[str, dict]]:
    """(where, spec) of every claim: PersistentVolumeClaims and StatefulSets' volumeClaimTemplates."""
    for name, pvc in _by_kind("PersistentVolumeClaim").items():
        yield name, pvc["spec"]
    for name, sts in _by_kind("StatefulSet").items():
        for t in sts["spec"].get("volumeClaimTemplates", []):
            yield f"{name}/{t['metadata']['name']}", t["spec"]


def test_k8s_commands_use_only_flags_the_cli_accepts() -> None:
    roles = set()
    for where, c in _containers():
        if c["image"] == "etcd":
            continue  # etcd's flags: tests/integration/test_deploy.py checks them against `etcd --help`
        assert c["image"] == "rangetable", where
        argv = _argv(c)
        ctx = parse_rangetable(argv)
        roles.add(argv[0])
        if argv[0] != "coordinator":
            assert ctx.params["coordinator"] == COORDINATORS, where  # all three: it finds the leader itself
        for kind in ("livenessProbe", "readinessProbe"):
            probe = (c.get(kind) or {}).get("exec")
            if probe:
                assert probe["command"][:3] == ["python", "-m", "rangetable.kernel.watchdog"]
                assert probe["command"][4] == ctx.params["alive_file"]
    assert roles == ROLES


def test_no_claim_is_read_write_many() -> None:
    claims = dict(_every_volume_spec())
    assert claims and all(spec["accessModes"] == ["ReadWriteOnce"] for spec in claims.values()), claims
    assert not _by_kind("PersistentVolumeClaim")  # no claim shared by several pods: templates only
    for w in _workloads():  # and no pod mounts a claim by name
        for v in w["spec"]["template"]["spec"].get("volumes", []):
            assert "persistentVolumeClaim" not in v and "nfs" not in v, (w["metadata"]["name"], v)


def test_every_partition_server_has_its_own_claim_and_endpoints() -> None:
    sts = _by_kind("StatefulSet")["rangetable-ps"]
    pod = sts["spec"]["template"]["spec"]
    (tmpl,) = sts["spec"]["volumeClaimTemplates"]
    c = next(c for c in pod["containers"] if c["name"] == "partition-server")
    ctx = parse_rangetable(_argv(c))
    mount = next(m for m in c["volumeMounts"] if m["name"] == tmpl["metadata"]["name"])
    assert mount["mountPath"] == ctx.params["data_dir"]  # the claim is the server's data directory
    assert ctx.params["server_id"] == "$(POD_NAME)" and ctx.params["bind"] == "tcp://0.0.0.0:10020"
    assert ctx.params["advertise"] == ctx.params["advertise_replication"] == "tcp://$(POD_NAME).rangetable-ps"
    assert ctx.params["replication"] == "tcp://0.0.0.0:10021"
    headless = _by_kind("Service")[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None" and {p["port"] for p in headless["spec"]["ports"]} == {10020, 10021}
    coord = _by_kind("StatefulSet")["rangetable-coordinator"]
    cctx = parse_rangetable(_argv(coord["spec"]["template"]["spec"]["containers"][0]))
    assert sts["spec"]["replicas"] >= cctx.params["replicas"] == 3 and cctx.params["min_insync"] == 2


def test_zone_comes_from_the_node_label_through_the_init_container() -> None:
    pod = _by_kind("StatefulSet")["rangetable-ps"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["python", "-m", "rangetable.kernel.node_zone"] and init["image"] == "rangetable"
    assert init["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    out = init["command"][4]
    c = pod["containers"][0]
    assert c["command"] == ZONE_WRAPPER and shlex.split(ZONE_WRAPPER[2])[-1] == f"$(cat {out})"
    shared = {m["name"] for m in init["volumeMounts"]} & {m["name"] for m in c["volumeMounts"]}
    assert shared == {"topology"} and {"name": "topology", "emptyDir": {}} in pod["volumes"]
    # the token to read the Node: mounted only in the initContainer; the ServiceAccount may only get nodes
    token = next(v for v in pod["volumes"] if v["name"] == "node-reader-token")
    assert any("serviceAccountToken" in s for s in token["projected"]["sources"])
    assert all(m["name"] != "node-reader-token" for m in c["volumeMounts"])
    sa = _by_kind("ServiceAccount")[pod["serviceAccountName"]]
    assert sa["automountServiceAccountToken"] is False
    role = _by_kind("ClusterRole")["rangetable-node-reader"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = _by_kind("ClusterRoleBinding")["rangetable-node-reader"]
    assert binding["roleRef"]["name"] == "rangetable-node-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "rangetable"}]


def test_coordinators_keep_their_state_in_etcd_and_etcd_has_three_members() -> None:
    coord = _by_kind("StatefulSet")["rangetable-coordinator"]
    pod = coord["spec"]["template"]["spec"]
    ctx = parse_rangetable(_argv(pod["containers"][0]))
    assert ctx.params["meta"] == "etcd://rangetable-etcd-client:2379/rangetable"
    assert "volumeClaimTemplates" not in coord["spec"] and coord["spec"]["replicas"] == 3
    assert COORDINATORS.count("tcp://") == coord["spec"]["replicas"]
    assert ctx.params["advertise"] == "tcp://$(POD_NAME).rangetable-coordinator"
    assert {"name": "scratch", "emptyDir": {}} in pod["volumes"]
    etcd = _by_kind("StatefulSet")["rangetable-etcd"]
    args = etcd["spec"]["template"]["spec"]["containers"][0]["args"]
    members = args[args.index("--initial-cluster") + 1].split(",")
    assert len(members) == etcd["spec"]["replicas"] == 3
    assert members == [f"rangetable-etcd-{i}=http://rangetable-etcd-{i}.rangetable-etcd:2380" for i in range(3)]
    client = _by_kind("Service")["rangetable-etcd-client"]
    assert client["spec"]["selector"] == etcd["spec"]["selector"]["matchLabels"]
    policy = _by_kind("NetworkPolicy")["rangetable-etcd"]  # only coordinators (and members) reach etcd
    froms = [f[APP] for rule in policy["spec"]["ingress"] for p in rule["from"] for f in [p["podSelector"]["matchLabels"]]]
    assert sorted(froms) == ["rangetable-coordinator", "rangetable-etcd"]


def test_disruption_budgets_keep_quorums() -> None:
    budgets = {b["spec"]["selector"]["matchLabels"][APP]: b["spec"] for b in _by_kind("PodDisruptionBudget").values()}
    replicas = {w["spec"]["selector"]["matchLabels"][APP]: w["spec"]["replicas"] for w in _workloads()}
    assert set(budgets) == set(replicas)  # every workload has one

    def may_lose(app: str) -> int:
        spec = budgets[app]
        return spec["maxUnavailable"] if "maxUnavailable" in spec else replicas[app] - spec["minAvailable"]

    assert may_lose("rangetable-partition-server") == 1  # --replicas 3 keeps --min-insync 2
    assert replicas["rangetable-etcd"] - may_lose("rangetable-etcd") > replicas["rangetable-etcd"] // 2  # a quorum
    assert may_lose("rangetable-coordinator") < replicas["rangetable-coordinator"]
    assert all(0 < may_lose(app) < replicas[app] for app in budgets)  # drains can proceed, never all at once


def test_k8s_objects_hang_together() -> None:
    objs = _objects()
    kust = _docs(DEPLOY / "k8s" / "kustomization.yaml")[0]
    assert sorted(kust["resources"]) == sorted(p.name for p in K8S if p.name != "kustomization.yaml")
    assert {i["name"] for i in kust["images"]} == {c["image"] for _, c in _containers()}
    secrets = {g["name"]: {f.split("=")[0].split("/")[-1] for f in g["files"]} for g in kust["secretGenerator"]}
    services = [o for o in objs if o["kind"] == "Service"]
    for w in _workloads():
        name, spec = w["metadata"]["name"], w["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
        names = {v["name"] for v in pod.get("volumes", [])} | {t["metadata"]["name"]
                                                              for t in spec.get("volumeClaimTemplates", [])}
        for c in pod["containers"] + pod.get("initContainers", []):
            assert {m["name"] for m in c.get("volumeMounts", [])} <= names, (name, c["name"])
        for v in pod.get("volumes", []):
            if "secret" in v:
                for item in v["secret"].get("items", []):
                    assert item["key"] in secrets[v["secret"]["secretName"]], (name, item)
        if pod["containers"][0]["image"] != "rangetable":
            continue
        role = pod["containers"][0]["args"][0]
        own = "frontend" if role == "http-frontend" else role  # its own secret key, nobody else's
        mounted = {i["key"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "rangetable-keys"
                   for i in v["secret"]["items"]}
        assert {k for k in mounted if k.endswith("_secret")} == {f"{own}.key_secret"}, name
    workloads = _workloads()
    for s in services:  # every Service selects one workload and targets ports its containers name
        sel = s["spec"]["selector"]
        targets = [w for w in workloads if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(targets) == 1, s["metadata"]["name"]
        ports = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in s["spec"]["ports"]} <= ports, s["metadata"]["name"]
    for sts in _by_kind("StatefulSet").values():  # stable names through a headless Service
        assert _by_kind("Service")[sts["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
