"""Every user command takes ``--json`` (README: "--json on every command"). The process commands run one
process of a cluster in the foreground and print logs, not a result: they are the named exception."""

from __future__ import annotations

import click

from cli.main import COMMANDS, main

PROCESSES = {"coordinator", "partition-server", "frontend", "http-frontend", "dashboard"}


def commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    out: list[tuple[str, click.Command]] = []

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"{path} {name}"
                walk(sub, f"{path} {name}".strip())
        else:
            out.append((path, cmd))

    walk(main, "")
    return out


def test_every_user_command_takes_json():
    missing = [path for path, cmd in commands()
               if path not in PROCESSES and not any(p.name == "as_json" for p in cmd.params)]
    assert missing == []


def test_every_named_command_loads_under_its_name():
    ctx = click.Context(main)
    for name in COMMANDS:
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.name == name, name
    assert len(commands()) > 50
