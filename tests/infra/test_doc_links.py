"""Every relative link and anchor in README.md and docs/*.md resolves.

A link is resolved from the directory of the file it is in (as GitHub renders it): a
`[x](docs/capacity.md)` written inside docs/ points at docs/docs/capacity.md, which does not
exist. Anchors are GitHub's heading slugs: lowercased, punctuation other than '-' and '_'
dropped, spaces turned into '-', and a repeated slug numbered (-1, -2, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return [a or b for a, b in LINK.findall(text)]


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(
                f"{target}: no file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}"
            )
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    assert broken(doc) == []


def test_the_checker_catches_a_docs_prefix_inside_docs_and_a_missing_anchor(tmp_path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n## Where it is\n")
    page = tmp_path / "docs" / "b.md"
    page.write_text(
        "[ok](a.md#where-it-is) [bad dir](docs/a.md) [bad anchor](a.md#nowhere) [self](#b)\n# B\n"
    )
    found = broken(page)
    assert len(found) == 2 and "docs/a.md" in found[0] and "#nowhere" in found[1]
    assert slug("What `make simulate ENV=prod` shows, with these figures") == (
        "what-make-simulate-envprod-shows-with-these-figures"
    )
