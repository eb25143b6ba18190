"""Table ACLs and service properties on a real coordinator (coordinator.acl).

One cluster (one partition server) for the module; requests go to the coordinator with
cli.coordinator_client.call, and once through the frontend, which relays them.
"""

from __future__ import annotations

from typing import Any

import pytest

from cli.coordinator_client import call
from coordinator.acl import validate_properties
from rangetable.errors import TableError
from tests.cluster import Cluster, ClusterFactory


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory):
    with cluster_factory() as c:
        yield c


def admin(c: Cluster, **body: Any) -> Any:
    return call(c.coordinator, body, timeout=10)


def error_of(c: Cluster, **body: Any) -> str:
    with pytest.raises(TableError) as e:
        admin(c, **body)
    return e.value.error_code


POLICIES = {
    "reader": {"start": "2020-01-01T00:00:00Z", "expiry": "2030-01-01T00:00:00.1234567Z", "permission": "r"},
    "writer": {"expiry": "2031-05-06", "permission": "raud"},
    "bare": None,
}
STORED = {
    "reader": {"start": "2020-01-01T00:00:00.0000000Z", "expiry": "2030-01-01T00:00:00.1234567Z", "permission": "r"},
    "writer": {"start": None, "expiry": "2031-05-06T00:00:00.0000000Z", "permission": "raud"},
    "bare": {"start": None, "expiry": None, "permission": None},
}


def test_acl_round_trip(cluster: Cluster) -> None:
    admin(cluster, op="create_table", table="AclOne")
    assert admin(cluster, op="get_acl", table="AclOne") == {"policies": {}}
    assert admin(cluster, op="set_acl", table="AclOne", policies=POLICIES) is None
    got = admin(cluster, op="get_acl", table="aclone")  # table names are case-insensitive
    assert got == {"policies": STORED} and list(got["policies"]) == list(STORED)  # order kept
    admin(cluster, op="set_acl", table="ACLONE", policies={"only": {"permission": "d"}})  # replaces all
    assert admin(cluster, op="get_acl", table="AclOne")["policies"] == {
        "only": {"start": None, "expiry": None, "permission": "d"}}
    admin(cluster, op="set_acl", table="AclOne", policies={})  # clears
    assert admin(cluster, op="get_acl", table="AclOne") == {"policies": {}}


def test_acl_through_the_frontend(cluster: Cluster) -> None:
    admin(cluster, op="create_table", table="AclRelay")
    call(cluster.native, {"op": "set_acl", "table": "AclRelay", "policies": {"x": {"permission": "r"}}}, timeout=10)
    got = call(cluster.native, {"op": "get_acl", "table": "AclRelay"}, timeout=10)
    assert got["policies"]["x"]["permission"] == "r"


@pytest.mark.parametrize("policies, code", [
    ({f"p{i}": {"permission": "r"} for i in range(6)}, "InvalidXmlDocument"),
    ({"x" * 65: {"permission": "r"}}, "InvalidXmlDocument"),
    ({"": {"permission": "r"}}, "InvalidXmlDocument"),
    ({"p": {"permission": "rw"}}, "InvalidXmlDocument"),
    ({"p": {"permission": "rr"}}, "InvalidXmlDocument"),
    ({"p": {"start": "yesterday"}}, "InvalidXmlDocument"),
    ({"p": {"expiry": 12}}, "InvalidXmlDocument"),
    ({"p": {"colour": "red"}}, "InvalidXmlDocument"),
    (["p"], "InvalidInput"),
])
def test_acl_limits(cluster: Cluster, policies: Any, code: str) -> None:
    if "AclLimits" not in admin(cluster, op="list_tables")["tables"]:
        admin(cluster, op="create_table", table="AclLimits")
    assert error_of(cluster, op="set_acl", table="AclLimits", policies=policies) == code
    assert admin(cluster, op="get_acl", table="AclLimits") == {"policies": {}}  # nothing half-written


def test_acl_missing_table(cluster: Cluster) -> None:
    assert error_of(cluster, op="get_acl", table="NoSuchTable") == "TableNotFound"
    assert error_of(cluster, op="set_acl", table="NoSuchTable", policies={}) == "TableNotFound"
    assert error_of(cluster, op="get_acl") == "InvalidInput"


def test_deleting_a_table_deletes_its_acl(cluster: Cluster) -> None:
    admin(cluster, op="create_table", table="AclGone")
    admin(cluster, op="set_acl", table="AclGone", policies={"p": {"permission": "r"}})
    admin(cluster, op="delete_table", table="AclGone")
    assert error_of(cluster, op="get_acl", table="AclGone") == "TableNotFound"
    admin(cluster, op="create_table", table="aclgone")
    assert admin(cluster, op="get_acl", table="AclGone") == {"policies": {}}


PROPS = {
    "logging": {"version": "1.0", "delete": False, "read": True, "write": True,
                "retention_policy": {"enabled": True, "days": 7}},
    "hour_metrics": {"version": "1.0", "enabled": True, "include_apis": True,
                     "retention_policy": {"enabled": False, "days": None}},
    "cors": [{"allowed_origins": ["*"], "allowed_methods": ["GET", "PUT"], "max_age_in_seconds": 60,
              "exposed_headers": [], "allowed_headers": ["x-ms-*"]}],
}


def test_service_properties_round_trip(cluster: Cluster) -> None:
    assert admin(cluster, op="get_service_properties") == {"properties": {}}
    assert admin(cluster, op="set_service_properties", properties=PROPS) is None
    assert admin(cluster, op="get_service_properties") == {"properties": PROPS}
    minute = {"version": "1.0", "enabled": False}
    admin(cluster, op="set_service_properties", properties={"minute_metrics": minute, "cors": []})
    assert admin(cluster, op="get_service_properties")["properties"] == {**PROPS, "minute_metrics": minute, "cors": []}
    admin(cluster, op="set_service_properties", properties=PROPS)


@pytest.mark.parametrize("props, code", [
    ({"cors": [{}] * 6}, "InvalidXmlDocument"),
    ({"cors": "*"}, "InvalidXmlDocument"),
    ({"cors": ["GET"]}, "InvalidXmlDocument"),
    ({"logging": "x" * 70_000}, "InvalidXmlDocument"),
    ("props", "InvalidInput"),
])
def test_service_properties_validation(cluster: Cluster, props: Any, code: str) -> None:
    assert error_of(cluster, op="set_service_properties", properties=props) == code
    validate_properties({"cors": [{}] * 5})


def test_persisted_across_coordinator_restart(cluster: Cluster) -> None:
    admin(cluster, op="create_table", table="AclDurable")
    admin(cluster, op="set_acl", table="AclDurable", policies=POLICIES)
    admin(cluster, op="set_service_properties", properties=PROPS)
    props = admin(cluster, op="get_service_properties")
    old = cluster.kill("coordinator")
    cluster.wait(lambda: cluster.pid("coordinator") != old, timeout=20, what="the coordinator to be restarted")
    got = cluster.wait(lambda: admin(cluster, op="get_acl", table="AclDurable"), timeout=20, what="get_acl")
    assert got == {"policies": STORED}
    assert admin(cluster, op="get_service_properties") == props
    assert admin(cluster, op="get_acl", table="AclOne") == {"policies": {}}


def test_stored_policy_drives_sas_verification(cluster: Cluster) -> None:
    """A SAS naming a policy set here verifies through frontend.auth.authenticate, and stops when it is removed."""
    from datetime import UTC, datetime, timedelta
    from urllib.parse import parse_qs

    from azure.core.credentials import AzureNamedKeyCredential
    from azure.data.tables import generate_table_sas

    from frontend.auth.authenticate import DEV_ACCOUNT, DEV_KEY, Accounts, AuthError, authenticate

    admin(cluster, op="create_table", table="AclSas")
    expiry = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    admin(cluster, op="set_acl", table="AclSas", policies={"p1": {"expiry": expiry, "permission": "ra"}})
    token = generate_table_sas(AzureNamedKeyCredential(DEV_ACCOUNT, DEV_KEY), "AclSas", policy_id="p1")
    query = parse_qs(token)

    def lookup(table: str) -> dict:
        return admin(cluster, op="get_acl", table=table)["policies"]

    def run() -> Any:
        return authenticate(Accounts.from_specs([]), "POST", "/devstoreaccount1/AclSas", query, {}, lookup)

    run().sas.check("a", "AclSas", "pk", "rk")
    admin(cluster, op="set_acl", table="AclSas", policies={})
    with pytest.raises(AuthError) as e:
        run()
    assert e.value.error_code == "AuthenticationFailed"
