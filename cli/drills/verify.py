"""``rangetable verify history FILE``: re-run the checkers on a history a failed drill kept on disk.

A drill whose history fails a check writes it as JSON lines (one operation per line, see
:func:`cli.workload.verify.history.dump_history`) and prints the path. This command loads it and
runs the linearizability checker again, offline, with a budget of your choosing, and prints the
same explanation the drill printed: a violation with its key and the operations around it, or the
keys the checker could not decide in time.
"""

from __future__ import annotations

import json
import time

import click

from cli.options import json_option
from cli.workload.verify import check, load_history
from cli.workload.verify.explain import failure_lines, lin_verdict
from cli.workload.verify.history import by_key


@click.group("verify")
def verify_group() -> None:
    """Re-check what a drill recorded."""


@verify_group.command("history")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--timeout", "timeout_s", default=300.0, show_default=True,
              help="Seconds the linearizability checker may spend in all.")
@click.option("--key-timeout", "key_timeout_s", default=60.0, show_default=True,
              help="Seconds it may spend on one key.")
@json_option
def verify_history(path: str, timeout_s: float, key_timeout_s: float, as_json: bool) -> None:
    """Check a kept history (JSON lines) for linearizability; exit 1 when it is not proven linearizable."""
    try:
        history = load_history(path)
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(f"{path} is not a history file: {exc}") from None
    t0 = time.monotonic()
    result = check(history, timeout_s=timeout_s, key_timeout_s=key_timeout_s)
    per_key = by_key(history)
    verdict = {**lin_verdict(history, result), "history_ops": len(history), "keys": len(per_key),
               "elapsed_s": round(time.monotonic() - t0, 3)}
    if as_json:
        click.echo(json.dumps({**verdict, "result": result.to_dict()}, indent=2, default=repr))
    else:
        click.echo(f"{path}: {len(history)} ops on {len(per_key)} keys, checked in {verdict['elapsed_s']} s")
        click.echo("linearizable" if result.ok else "\n".join(failure_lines(verdict)))
    if not result.ok:
        raise SystemExit(1)
