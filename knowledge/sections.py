"""Where a chunk sits in its document: the title and section path that make it searchable.

A chunk cut from the middle of a long section does not say what it is about
("Return the number of items..." of which object?). Each chunk is therefore
searched, on both the lexical and the semantic side, as its *context* (the
document's title and the headings above it) followed by its text, while the
text the controller is shown stays the chunk alone.

Headings recognised:

* Markdown ATX headings (``# Title``, ``## Part``), nested by level;
* reStructuredText headings (a line underlined by ``=``, ``-``, ``~`` ... of at
  least its length), nested in the order the underline characters first appear;
* a line that is a dotted Python name alone (``asyncio.wait_for``, the form
  pydoc-style text uses to start each member), nested below the others.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

_ATX = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_UNDERLINE = re.compile(r"^([=\-~^\"'`*+#:.])\1{2,}[ \t]*$")
_DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:(?!//|\\)")
_MAX_HEADING_CHARS = 120
_DOTTED_LEVEL = 100
"""Dotted-name headings nest below any Markdown or reStructuredText heading."""


def document_title(source: str, metadata: dict[str, object]) -> str:
    """The title a document is searched by: its ``title`` metadata, else its source's name.

    ``pydoc:asyncio.tasks`` gives ``asyncio.tasks``; ``docs/deploy-guide.md`` gives
    ``deploy-guide``.
    """
    title = metadata.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    if _SCHEME.match(source):  # "pydoc:asyncio.tasks": a name, not a file
        return source.split(":", 1)[1]
    path = PurePath(source.rstrip("/"))
    return path.stem if path.suffix else path.name or source


def headings(text: str) -> list[tuple[int, int, str]]:
    """Return ``(offset, level, heading)`` for every heading of `text`, in order."""
    found: list[tuple[int, int, str]] = []
    rst_levels: list[str] = []
    offset = 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        stripped = line.strip()
        previous_blank = index == 0 or not lines[index - 1].strip()
        if (m := _ATX.match(stripped)) is not None:
            found.append((offset, len(m.group(1)), m.group(2)))
        elif (
            index + 1 < len(lines)
            and stripped
            and (u := _UNDERLINE.match(lines[index + 1].strip())) is not None
            and len(lines[index + 1].strip()) >= len(stripped)
        ):
            if u.group(1) not in rst_levels:
                rst_levels.append(u.group(1))
            found.append((offset, 10 + rst_levels.index(u.group(1)), stripped))
        elif previous_blank and _DOTTED_NAME.match(stripped):
            found.append((offset, _DOTTED_LEVEL, stripped))
        offset += len(line) + 1
    return [(o, lvl, h[:_MAX_HEADING_CHARS]) for o, lvl, h in found]


def content_offset(chunk: str) -> int:
    """Offset of a chunk's first line of content: past its leading headings and blank lines."""
    marks = {o for o, _, _ in headings(chunk)}
    offset = 0
    for line in chunk.split("\n"):
        if line.strip() and offset not in marks and not _UNDERLINE.match(line.strip()):
            return offset
        offset += len(line) + 1
    return max(0, len(chunk) - 1)


def section_paths(text: str, starts: Sequence[int]) -> list[str]:
    """Return, for each offset into `text`, the headings above it joined by `` > ``.

    Pass a chunk's start plus its `content_offset`, so a chunk that begins with
    its own headings is placed under them.
    """
    marks = headings(text)
    paths = [""] * len(starts)
    stack: list[tuple[int, str]] = []
    next_mark = 0
    for index in sorted(range(len(starts)), key=lambda i: starts[i]):
        while next_mark < len(marks) and marks[next_mark][0] <= max(starts[index], 0):
            _, level, heading = marks[next_mark]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading))
            next_mark += 1
        paths[index] = " > ".join(h for _, h in stack)
    return paths


def context_line(title: str, section: str) -> str:
    """The line a chunk is searched by before its text: ``title > section``, without repeats."""
    parts = [title] if title else []
    if section and section != title:
        parts.append(section.removeprefix(f"{title} > ") if title else section)
    return " > ".join(parts)


def searchable_text(context: str, text: str) -> str:
    """What the embedder and the lexical index see for a chunk: its context, then its text."""
    return f"{context}\n{text}" if context else text
