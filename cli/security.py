"""``rangetable cert`` (a development certificate for HTTPS) and ``rangetable keys`` (CURVE keys)."""

from __future__ import annotations

import json
import os

import click

from cli.main import json_option, main


@main.group("cert")
def cert_group() -> None:
    """TLS certificates for the REST endpoint (rangetable up --cert PEM --key PEM)."""


@cert_group.command("create")
@click.option("--dir", "directory", default=lambda: os.path.join(os.environ.get("RANGETABLE_DATA_DIR", "./rangetable-data"),
                                                                  "tls"),
              show_default="<data-dir>/tls", help="Where to write cert.pem and key.pem.")
@click.option("--days", default=825, show_default=True, help="Validity in days.")
@click.option("--force", is_flag=True, help="Replace an existing certificate.")
@json_option
def cert_create(directory: str, days: int, force: bool, as_json: bool) -> None:
    """Make a self-signed development certificate for localhost and 127.0.0.1 (key file mode 0600)."""
    from rangetable.tls import create_dev_cert, describe

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


