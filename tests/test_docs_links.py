"""Every relative link in docs/ and the README leads somewhere: the file exists, and the
heading an ``#anchor`` names is in it (GitHub's slugs), so moving a section cannot
silently strand the pages that point at it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(path: Path) -> list[str]:
    """The page's lines, those inside fenced code blocks blanked (kept for numbering)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, only word characters, '-' and spaces,
    spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def broken_links() -> tuple[int, list[str]]:
    """How many relative links the pages hold, and those that lead nowhere."""
    broken: list[str] = []
    checked = 0
    for page in PAGES:
        for number, line in enumerate(prose(page), 1):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                checked += 1
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where}: no such heading")
    return checked, broken


def test_every_relative_link_in_the_docs_leads_somewhere() -> None:
    checked, broken = broken_links()
    assert checked > 100  # the pages link to each other a lot: a parse that finds none is wrong
    assert broken == []


def test_headings_give_github_s_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Where it is\n\n## Again\n\n```\n# not a heading\n```\n\n## Again\n",
                    encoding="utf-8")
    assert anchors(page) == {"where-it-is", "again", "again-1"}
    assert slug("The session: a pure core (`actors/session/`)") == (
        "the-session-a-pure-core-actorssession")
