"""The reference in docs/ read as data: its sections, its tables and the names in their cells.

The drift tests compare what the reference names with what the code defines, so they read the
reference by structure (a heading, then a Markdown table with a known header row), never by
searching prose: a word that merely appears in a sentence documents nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Table:
    """One Markdown table: the heading it sits under, its header cells and its rows."""

    heading: str
    headers: tuple[str, ...]
    rows: tuple[dict[str, str], ...]

    def column(self, header: str) -> list[str]:
        return [row[header] for row in self.rows]


def _cells(line: str) -> list[str]:
    # A cell may hold `a | b` inside backticks; none of ours does, so split on every bar.
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(path: Path) -> list[Table]:
    """Every table of a Markdown file, in order."""
    found: list[Table] = []
    heading = ""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if match := _HEADING.match(line):
            heading = match.group(2)
        elif (
            line.startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\|( *:?-+:? *\|)+", lines[i + 1].strip())
        ):
            headers = tuple(_cells(line))
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = _cells(lines[i])
                assert len(cells) == len(headers), f"{path}: {len(cells)} cells: {lines[i]}"
                rows.append(dict(zip(headers, cells, strict=True)))
                i += 1
            found.append(Table(heading, headers, tuple(rows)))
            continue
        i += 1
    return found


def tables_with(path: Path, *headers: str) -> list[Table]:
    """The tables of ``path`` whose header row starts with ``headers``."""
    return [t for t in tables(path) if t.headers[: len(headers)] == headers]


def code_spans(cell: str) -> list[str]:
    """The `code` spans of a cell, in order."""
    return _CODE.findall(cell)


def first_code(cell: str) -> str:
    """The first `code` span of a cell: the name a reference row is about."""
    spans = code_spans(cell)
    assert spans, f"a reference cell names nothing in backticks: {cell!r}"
    return spans[0]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    found = set()
    for line in path.read_text().splitlines():
        if match := _HEADING.match(line):
            text = match.group(2).lower().replace("`", "")
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def cli_sections() -> dict[str, str]:
    """docs/cli.md per command: the text under each ``## `imagerefresh NAME``` heading."""
    text = (DOCS / "cli.md").read_text()
    parts = re.split(r"^## `imagerefresh ([a-z-]+)`$", text, flags=re.M)
    return {parts[i]: parts[i + 1].split("\n## ", 1)[0] for i in range(1, len(parts), 2)}


def cli_exit_tables() -> dict[str, list[tuple[int, str]]]:
    """docs/cli.md's exit-status table of each command."""
    return {
        name: [
            (int(code), meaning.strip())
            for code, meaning in re.findall(r"^\| (\d) \| (.+) \|$", body, flags=re.M)
        ]
        for name, body in cli_sections().items()
    }
