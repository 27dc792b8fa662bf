"""Markdown as the documentation tests read it: fenced code blocks, their markers, and tables.

One parser for README.md (tests/test_readme.py) and the pages under docs/
(tests/test_docs.py), so both read a page the same way:

* a fence opens with a line starting with three backticks, followed by its language
  (```` ```python ````), and closes with a line of just three backticks; a fence left open
  fails the test, naming the file and line;
* the *marker* of a block is the HTML comment (``<!-- ... -->``) on the line right before
  its opening fence, or ``""``; :data:`NOT_RUN` and :data:`NEEDS` parse the two markers
  both files understand (docs/ also has ``file:``, in tests/test_docs.py);
* the *section* of a block is the nearest heading above it, without its ``#``\\ s.

:func:`table` reads the first Markdown table under a heading (the support table of
README.md, for tests/test_support_table.py), as rows of cell texts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NEEDS", "NOT_RUN", "Fence", "fences", "table"]

NOT_RUN = re.compile(
    r"<!-- not-run: (?P<reason>.+?)(?:; tested in (?P<test>tests/[\w/]+\.py))? -->"
)
"""``<!-- not-run: REASON; tested in tests/test_x.py -->`` (the test part is optional)."""

NEEDS = re.compile(r"<!-- needs: (?P<backend>\w+)(?:; (?P<note>.+?))? -->")
"""``<!-- needs: BACKEND; NOTE -->`` (the note is optional)."""

FENCE = "```"


@dataclass(frozen=True)
class Fence:
    """One fenced block of a Markdown text."""

    lang: str
    line: int
    """1-based line of the opening fence."""
    body: str
    """The lines between the fences, each ending with a newline."""
    marker: str
    """The HTML comment on the line before the opening fence, or ""."""
    section: str
    """The nearest heading above the block, without the #s ("" before any)."""

    @property
    def not_run(self) -> re.Match[str] | None:
        return NOT_RUN.fullmatch(self.marker)

    @property
    def needs(self) -> re.Match[str] | None:
        return NEEDS.fullmatch(self.marker)


def fences(text: str, where: str) -> list[Fence]:
    """The fenced blocks of a Markdown ``text``, in order; ``where`` names it in failures."""
    found: list[Fence] = []
    lines = text.splitlines()
    section, opened, lang, marker = "", 0, "", ""
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if opened:
            if line.rstrip() == FENCE:
                found.append(Fence(lang, opened, "\n".join(body) + "\n", marker, section))
                opened, body = 0, []
            else:
                body.append(line)
        elif line.startswith(FENCE):
            opened, lang, body = number, line[len(FENCE) :].strip(), []
            previous = lines[number - 2].strip() if number > 1 else ""
            marker = previous if previous.startswith("<!--") else ""
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
    assert not opened, f"{where} line {opened}: the fence is never closed"
    return found


def _cells(line: str) -> list[str]:
    """The cells of a table row: ``| a | b |`` -> ["a", "b"] (no ``|`` inside a cell)."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table(text: str, heading: str, where: str) -> list[list[str]]:
    """The body rows of the first table under the heading ``heading`` (its text without
    the #s), each as its cells; the header row and the ``|---|`` rule are left out."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("#")]
    at = [i for i in starts if lines[i].lstrip("#").strip() == heading]
    assert at, f"{where}: no heading {heading!r}"
    rows: list[list[str]] = []
    for line in lines[at[0] + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append(_cells(line))
        elif rows:
            break  # the table ended
    assert len(rows) >= 2 and set("".join(rows[1])) <= set("-: "), (
        f"{where}: no Markdown table (header, |---| rule, rows) under {heading!r}"
    )
    return rows[2:]
