"""The docs live in the repository: nothing a user reads points outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("../shared", "DESIGN.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _files() -> list[Path]:
    """README.md, every page under docs/ and every file under src/."""
    found = [ROOT / "README.md"]
    for top in ("docs", "src"):
        found += sorted(p for p in (ROOT / top).rglob("*") if p.is_file())
    return [p for p in found if "__pycache__" not in p.parts]


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_refers_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    for word in OUTSIDE:
        assert word not in text, f"{path.relative_to(ROOT)} mentions {word!r}"


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_reach_files_in_the_repository(page: Path) -> None:
    """Every relative Markdown link of README.md and docs/ names a file of the repository."""
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or a place on the same page
        dest = (page.parent / target.split("#", 1)[0]).resolve()
        assert dest.is_relative_to(ROOT), f"{page.relative_to(ROOT)}: {target} leaves the repo"
        assert dest.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
