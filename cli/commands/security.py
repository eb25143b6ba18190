"""``rangetable cert`` (a development certificate for HTTPS) and ``rangetable keys`` (CURVE keys)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import click

from cli.options import data_dir_option, emit, json_option
from rangetable.data_dir import default_data_dir
from rangetable.files import write_json_atomic


@click.group("cert")
def cert_group() -> None:
    """TLS certificates for the REST endpoint (rangetable up --cert PEM --key PEM)."""


@cert_group.command("create")
@click.option("--dir", "directory", default=lambda: os.path.join(default_data_dir(), "tls"),
              show_default="<data-dir>/tls", help="Where to write cert.pem and key.pem.")
@click.option("--days", default=825, show_default=True, help="Validity in days.")
@click.option("--force", is_flag=True, help="Replace an existing certificate.")
@json_option
def cert_create(directory: str, days: int, force: bool, as_json: bool) -> None:
    """Make a self-signed development certificate for localhost and 127.0.0.1 (key file mode 0600)."""
    from rangetable.kernel.tls import create_dev_cert, describe

    try:
        cert, key = create_dev_cert(directory, days, force)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    info = {"cert": os.path.abspath(cert), "key": os.path.abspath(key), **describe(cert)}
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"certificate  {info['cert']}")
    click.echo(f"key          {info['key']}")
    click.echo(f"subject      {info['subject']}; subjectAltName {info['subject_alt_name']}; "
               f"valid until {info['not_after']}")
    click.echo(f"use it:      rangetable up --cert {info['cert']} --key {info['key']}")
    click.echo(f"trust it:    REQUESTS_CA_BUNDLE={info['cert']} (or the SDK's connection_verify=)")




# --- CURVE keys --------------------------------------------------------------------------------------


@click.group("keys")
def keys_group() -> None:
    """CURVE keys: the cluster's role keys and the client keys registered to accounts."""


def _cluster_doc(data_dir: str, coordinator: str | None = None, natives: tuple[str, ...] = ()) -> dict:
    """The local cluster's cluster.json, or (``--coordinator``, for clusters started role by role)
    the same built from the endpoints given and the admin key in ``<data-dir>/keys``."""
    from cli.cluster_file import read_cluster
    from rangetable import curve

    if coordinator:
        try:
            ring = curve.KeyRing.load(curve.keys_dir(data_dir), own="admin")
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        doc = {"coordinator": coordinator, "native": natives[0] if natives else None, "frontends": list(natives),
               "curve": ring.connection_info("admin")}
        curve.remember_cluster(doc)
        return doc
    found = read_cluster(data_dir)
    if found is None:
        raise click.ClickException(f"no cluster.json in {data_dir}: start one with `rangetable up`, "
                                   "pass --data-dir, or --coordinator for a cluster started role by role")
    return found


coordinator_option = click.option("--coordinator", default=None,
                                  help="Coordinator endpoint, for a cluster without cluster.json (started role "
                                       "by role); the admin key is read from <data-dir>/keys.")


@keys_group.command("init")
@data_dir_option
@click.option("--keys-dir", default=None, help="Where to write them [default: <data-dir>/keys].")
@click.option("--coordinator", default=None,
              help="For a cluster started role by role: also write <data-dir>/cluster.json naming these "
                   "coordinator endpoint(s), so every rangetable command on this (admin) machine reaches it.")
@click.option("--native", "natives", multiple=True,
              help="Native frontend endpoint(s) for that cluster.json (repeatable).")
@json_option
def keys_init(data_dir: str, keys_dir: str | None, coordinator: str | None, natives: tuple[str, ...],
              as_json: bool) -> None:
    """Create the role key pairs (coordinator, partition-server, frontend, admin) that do not exist yet.

    `rangetable up` does this on first start; run it once before starting single processes on
    several hosts, then give each host the keys directory (or only its role's .key_secret and the
    others' .key files). With --coordinator (and --native), the admin machine's cluster.json too.
    """
    from rangetable import curve

    directory = curve.keys_dir(data_dir, keys_dir or "")
    ring = curve.KeyRing.create(directory)
    publics = {r: ring.public(r).decode() for r in curve.ROLES}
    cluster_file = None
    if coordinator:
        if keys_dir and os.path.abspath(keys_dir) != os.path.abspath(curve.keys_dir(data_dir)):
            raise click.BadParameter("cluster.json reads the admin key from <data-dir>/keys: leave --keys-dir out",
                                     param_hint="--coordinator")
        cluster_file = _write_cluster_file(data_dir, _cluster_doc(data_dir, coordinator, natives))
    if as_json:
        click.echo(json.dumps({"keys_dir": os.path.abspath(directory), "public": publics,
                               "cluster_file": cluster_file}, indent=2))
        return
    click.echo(f"keys in {os.path.abspath(directory)} (files mode 0600)")
    for role, pub in publics.items():
        click.echo(f"  {role:17} {pub}")
    if cluster_file:
        click.echo(f"cluster file {cluster_file} (holds the admin secret key; mode 0600)")


def _write_cluster_file(data_dir: str, doc: dict) -> str:
    """``doc`` as ``<data-dir>/cluster.json``, mode 0600 (it holds the admin's secret key); its path."""
    from cli.cluster_file import CLUSTER_FILE

    path = os.path.abspath(os.path.join(data_dir, CLUSTER_FILE))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
    os.chmod(path, 0o600)
    return path


@keys_group.command("add")
@click.argument("name")
@click.option("--account", default="devstoreaccount1", show_default=True, help="The account the key acts for.")
@click.option("--out", "out", default=None,
              help="Write the connection file (endpoints, the frontends' public key, this client's key "
                   "pair; mode 0600) here [default: <name>.rangetable.json].")
@click.option("--native", "natives", multiple=True,
              help="Native endpoint(s) to put in the connection file [default: cluster.json's].")
@data_dir_option
@coordinator_option
@json_option
def keys_add(name: str, account: str, out: str | None, natives: tuple[str, ...], data_dir: str,
             coordinator: str | None, as_json: bool) -> None:
    """Register a new native client key NAME for an account; its secret goes only into the connection file.

    Use it from Python with TableServiceClient.from_cluster("NAME.rangetable.json").
    """
    doc = _cluster_doc(data_dir, coordinator, natives)
    natives = natives or tuple(doc.get("frontends") or [doc["native"]])
    if not natives or not natives[0]:
        raise click.ClickException("give the native endpoint(s) clients use with --native")
    rec, conn = register_client(doc, name, account, natives)
    out = out or f"{name}.rangetable.json"
    write_json_atomic(out, conn, private=True, indent=2)
    if as_json:
        click.echo(json.dumps({**rec, "connection_file": os.path.abspath(out)}, indent=2))
        return
    click.echo(f"registered {name} for account {account}: public key {rec['public']}")
    click.echo(f"connection file {os.path.abspath(out)} (holds the secret key; mode 0600)")


def register_client(doc: dict, name: str, account: str, natives: tuple[str, ...]) -> tuple[dict, dict]:
    """Register a new client key ``name`` for ``account`` at the cluster of ``doc`` (its cluster.json): the
    coordinator's record and the connection file's document (native endpoints ``natives``, the secret key)."""
    from cli.coordinator_client import call
    from rangetable import curve

    pair = curve.KeyPair.generate()
    assert pair.secret is not None  # generate() makes both keys
    rec = call(doc["coordinator"], {"op": "keys_add", "name": name, "account": account, "public": pair.user_id})
    conn = {"native": natives[0], "frontends": list(natives), "account": account,
            "curve": {"servers": {"frontend": doc["curve"]["servers"]["frontend"]},
                      "client": {"public": pair.public.decode(), "secret": pair.secret.decode(), "name": name}}}
    return rec, conn


def follower_keys(doc: dict) -> Callable[[str], dict]:
    """``name`` -> the connection document of a client key registered for the default account at the cluster of
    ``doc`` (its cluster.json): what another cluster follows it with (``rangetable geo failover``/``rejoin``)."""
    natives = tuple(doc.get("frontends") or [doc["native"]])
    return lambda name: register_client(doc, name, "devstoreaccount1", natives)[1]


@keys_group.command("list")
@data_dir_option
@coordinator_option
@json_option
def keys_list(data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """List the registered client keys."""
    import datetime as dt

    from cli.coordinator_client import call

    res = call(_cluster_doc(data_dir, coordinator)["coordinator"], {"op": "keys_list"})
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    click.echo(f"{len(res['keys'])} client keys (registry version {res['version']})")
    for r in res["keys"]:
        created = dt.datetime.fromtimestamp(r["created"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"  {r['name']:20} {r['account']:18} {r['public']}  added {created}Z")


@keys_group.command("revoke")
@click.argument("name")
@data_dir_option
@coordinator_option
@json_option
def keys_revoke(name: str, data_dir: str, coordinator: str | None, as_json: bool) -> None:
    """Revoke client key NAME: frontends refuse it within about a second, also on open connections."""
    from cli.coordinator_client import call

    call(_cluster_doc(data_dir, coordinator)["coordinator"], {"op": "keys_revoke", "name": name})
    emit({"revoked": name}, as_json, f"revoked {name}")
