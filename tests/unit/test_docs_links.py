"""The docs cite only what the repository has: every relative link in README.md and docs/*.md points to a
file inside the repository, every repository path quoted in backticks (``coordinator/backup.py``,
``tests/integration/test_x.py``, ``cli/drills/netsplit*.py``) exists, and every backtick-quoted module path
(``rangetable.aio``, ``partition_server.store.counts``, ``rangetable.ExponentialRetry``) names a module that
exists (and, past the module, a name it defines). ``python -m tests.unit.test_docs_links`` lists what is wrong."""

from __future__ import annotations

import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rangetable", "partition_server", "coordinator", "frontend", "cli", "tests")
PATH_ROOTS = (*PACKAGES, "deploy", "docs")
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
GENERATED = {"tests/js/node_modules"}  # made by `npm ci` (README: the JavaScript SDK's tests), not tracked
OUTSIDE = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]+|/work/[\w./-]+)")  # a file beyond the repository
_ROOTS = "|".join(PATH_ROOTS)
_PACKAGES = "|".join(PACKAGES)
PATH_TOKEN = re.compile(rf"(?<![\w<>./-])((?:{_ROOTS})/[\w./*-]*)")
MODULE_TOKEN = re.compile(rf"^(?:{_PACKAGES})(?:\.\w+)+$")


def doc_files() -> list[Path]:
    """README.md and every docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (commands and their output, not citations)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def link_problems(doc: Path, text: str) -> list[str]:
    """Relative links (and images) of ``doc`` that point outside the repository or to nothing."""
    out = []
    for m in [*LINK.finditer(text), *IMAGE.finditer(text)]:
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto:, an anchor of the page itself
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT):
            out.append(f"{doc.name}: link {target!r} leaves the repository")
        elif not path.exists():
            out.append(f"{doc.name}: link {target!r} points to nothing")
    return out


def path_problems(doc: Path, text: str) -> list[str]:
    """Repository paths quoted in backticks that do not exist (globs must match something), and files
    beyond the repository (``../shared/DESIGN.md``) cited anywhere in the prose."""
    out = []
    for token in OUTSIDE.findall(text):
        if not (doc.parent / token).resolve().is_relative_to(ROOT):
            out.append(f"{doc.name}: {token} is outside the repository")
    for code in CODE.findall(text):
        for token in PATH_TOKEN.findall(code):
            token = token.rstrip(".,;:")
            if "<" in token or token.endswith("/*") or token in GENERATED:
                continue
            hits = glob.glob(str(ROOT / token)) if "*" in token else ([token] if (ROOT / token).exists() else [])
            if not hits:
                out.append(f"{doc.name}: `{code}` names {token}, which does not exist")
    return out


def module_problems(doc: Path, text: str) -> list[str]:
    """Backtick-quoted dotted module paths that name no module (or, past the module, no name in it)."""
    out = []
    for code in CODE.findall(text):
        token = code.strip().removesuffix("()")
        if not MODULE_TOKEN.match(token):
            continue
        parts = token.split(".")
        found = None
        for i in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:i])
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    found = (i, candidate)
                    break
            if found:
                break
        if found is None:
            out.append(f"{doc.name}: `{code}` names no module")
            continue
        i, source = found
        if i < len(parts) and not re.search(rf"\b{re.escape(parts[i])}\b", source.read_text()):
            out.append(f"{doc.name}: `{code}`: {source.relative_to(ROOT)} defines no {parts[i]}")
    return out


def problems() -> list[str]:
    out = []
    for doc in doc_files():
        text = prose(doc.read_text(encoding="utf-8"))
        out += link_problems(doc, text) + path_problems(doc, text) + module_problems(doc, text)
    return out


def test_docs_cite_only_what_the_repository_has() -> None:
    assert problems() == []


def test_the_checks_catch_what_they_are_for(tmp_path) -> None:
    doc = ROOT / "docs" / "x.md"  # resolved against the real docs dir
    assert link_problems(doc, "see [design](../../shared/DESIGN.md) and [ok](architecture.md#layers)") == [
        "x.md: link '../../shared/DESIGN.md' leaves the repository"]
    assert link_problems(doc, "[gone](nothing-here.md) [web](https://example.com)") == [
        "x.md: link 'nothing-here.md' points to nothing"]
    assert path_problems(doc, "`coordinator/backup.py`, `cli/drills/netsplit*.py`, `<data-dir>/servers/<id>/`") == []
    assert path_problems(doc, "`../../shared/DESIGN.md` fixes it; see /work/shared/DESIGN.md") == [
        "x.md: ../../shared/DESIGN.md is outside the repository", "x.md: /work/shared/DESIGN.md is outside the repository"]
    assert path_problems(doc, "[up](../README.md), `../deploy/README.md`") == []
    assert path_problems(doc, "run `tests/integration/test_nothing.py`") == [
        "x.md: `tests/integration/test_nothing.py` names tests/integration/test_nothing.py, which does not exist"]
    assert module_problems(doc, "`rangetable.aio`, `rangetable.client.TableClient`, `cli.main`") == []
    assert module_problems(doc, "`cli.nothing_here.f`") == ["x.md: `cli.nothing_here.f`: cli/__init__.py defines no nothing_here"]
    assert module_problems(doc, "`rangetable.nothing` and `rangetable.client.Nothing42`") == [
        "x.md: `rangetable.nothing`: rangetable/__init__.py defines no nothing",
        "x.md: `rangetable.client.Nothing42`: rangetable/client/__init__.py defines no Nothing42"]
    assert prose("a\n```\n`tests/gone.py`\n```\nb") == "a\n\nb"


if __name__ == "__main__":
    print("\n".join(problems()) or "no problems")
