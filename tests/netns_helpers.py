"""What the drills' tests share about network namespaces: the tokens of the networks a run made, and what of
them is left after it (cli/drills/netns.py names every namespace, bridge and veth after its network's token)."""

from __future__ import annotations

import subprocess

import pytest

from cli.drills import netns


def record_networks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens of the networks created from now on (a list filled as they are)."""
    tokens: list[str] = []
    real = netns.Network.create

    def create(self: netns.Network) -> None:
        tokens.append(self.token)
        real(self)

    monkeypatch.setattr(netns.Network, "create", create)
    return tokens


def leftovers(token: str) -> list[str]:
    """The links and namespaces of network ``token`` still present (the bridge ``rtb…``, the namespaces
    ``rt-…-``, the veth ends ``rth…``)."""
    names = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in (names + spaces).splitlines()
            if any(t in line for t in (f"rt-{token}-", f"rtb{token}", f"rth{token}"))]
