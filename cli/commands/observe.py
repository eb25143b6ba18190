"""``rangetable metrics``: scrape every process's Prometheus endpoint (the URLs in cluster.json) and
print the ``rangetable_*`` samples, so a script or a person can compare them with `top` and `status`."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import click

from cli.options import cluster_doc, data_dir_option, json_option


def scrape(url: str, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """The ``rangetable_*`` samples of one endpoint as (name, labels, value); raises OSError if it is down."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode("utf-8")
    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name.startswith("rangetable_") and not s.name.startswith("rangetable_process_")]


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


@click.command("metrics")
@click.argument("prefix", required=False, default="rangetable_")
@data_dir_option
@json_option
def metrics_cmd(prefix: str, data_dir: str, as_json: bool) -> None:
    """Print the metrics of every process of the local cluster whose name starts with PREFIX
    (histogram buckets left out; each process's /metrics URL is in cluster.json)."""
    doc = cluster_doc(data_dir, instead=None)
    if not doc.get("metrics"):
        raise click.ClickException("this cluster serves no metrics (started with --no-metrics)")
    out: dict[str, Any] = {}
    for p in doc["processes"]:
        url = p.get("metrics")
        if not url:
            continue
        try:
            samples = [s for s in scrape(url) if s[0].startswith(prefix) and not s[0].endswith("_bucket")]
        except OSError as exc:
            out[p["id"]] = {"url": url, "error": str(exc)}
            continue
        out[p["id"]] = {"url": url, "samples": [{"name": n, "labels": lab, "value": v} for n, lab, v in samples]}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for pid, res in out.items():
        click.echo(f"== {pid} {res['url']}" + (f"  DOWN: {res['error']}" if "error" in res else ""))
        for s in res.get("samples", []):
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["labels"].items()))
            click.echo(f"{s['name']}{{{labels}}} {s['value']:g}")
