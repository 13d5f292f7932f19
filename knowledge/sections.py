"""Where a chunk sits in its document: the title and section path that make it searchable.

A chunk cut from the middle of a long section does not say what it is about
("Return the number of items..." of which object?). Each chunk is therefore
searched, on both the lexical and the semantic side, as its *context* (the
document's title and the headings above it) followed by its text, while the
text the controller is shown stays the chunk alone.

The section path itself comes from the document's parsed structure
(`knowledge.structure`), or from the `section` its metadata gives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


_FRONT_MATTER = re.compile(r"---[ \t]*\r?\n(.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
"""YAML front matter (Jekyll, Hugo, MkDocs): a ``---`` line first, then up to a ``---`` or ``...`` line."""
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_MAX_FRONT_MATTER_CHARS = 16_384
_YAML_LINE = re.compile(r"\s*$|[\w.-]+:(?:\s|$)|[ \t]|- |#")
"""A line of front matter: blank, ``key:``, indented (a value's next lines), a list item or a comment."""
_YAML_KEY = re.compile(r"[\w.-]+:(?:\s|$)")


def front_matter(text: str) -> tuple[str, str | None, int]:
    """A Markdown text with its YAML front matter blanked, the front matter's ``title``, and where its body starts.

    Read as Markdown, the block's closing ``---`` turns its last line into a heading and
    its opening one a chunk of its own. It is blanked in place (spaces, its line breaks
    kept), so every offset into the text stays an offset into the file. Front matter is a
    mapping: a block without a top-level ``key:`` line (a rule, a list, a rule) is
    Markdown. Only the title is read: a top-level ``title:`` on one line, its quotes
    taken off (a ``|`` or ``>`` block value is none).
    """
    found = _FRONT_MATTER.match(text) if text.startswith("---") else None
    if found is None or found.end() > _MAX_FRONT_MATTER_CHARS:
        return text, None, 0
    lines = (found.group(1) or "").splitlines()
    if not all(_YAML_LINE.match(line) for line in lines) or not any(
        _YAML_KEY.match(line) for line in lines
    ):
        return text, None, 0
    title = _FRONT_TITLE.search(found.group(1) or "")
    named = title.group(1).strip() if title else ""
    if len(named) >= 2 and named[0] == named[-1] and named[0] in "'\"":
        named = named[1:-1].strip()
    if named.startswith(("|", ">")):
        named = ""  # the title is on the lines below: not read
    blank = "".join(c if c in "\r\n" else " " for c in found.group(0))
    return blank + text[found.end() :], named or None, found.end()


def markdown_title(text: str) -> str | None:
    """A Markdown document's own title: the level-1 heading it opens with, if it opens with one.

    ``# Deploying Zorbulon`` (or the line above a ``===`` underline) as the first
    line that is not blank. A document that opens with anything else keeps its
    file's name: a heading further down titles a part, not the document.
    """
    raw = _first_lines(text, 50)
    lines = [line.strip() for line in raw]
    start = next((n for n, line in enumerate(lines) if line), None)
    if start is None or _INDENTED_CODE.match(raw[start]):
        return None  # blank, or an indented code block: no heading
    first = lines[start]
    atx = _ATX.match(first)
    if atx is not None:
        return atx.group(2).strip() if len(atx.group(1)) == 1 else None
    underline = lines[start + 1] if start + 1 < len(lines) else ""
    if (
        underline.startswith("=")
        and _UNDERLINE.match(underline)
        and len(first) <= _MAX_HEADING_CHARS
    ):
        return first
    return None


_INDENTED_CODE = re.compile(r"(?: {4}|\t)")
"""A line indented four spaces or a tab: CommonMark's indented code, never a heading."""


def _first_lines(text: str, count: int) -> list[str]:
    """``text.splitlines()[:count]``, splitting no more of the text than it takes.

    Every ingest of a file reads its title: splitting a whole 1 MB document cost 1.9 ms.
    A prefix that splits into more than `count` lines holds the first `count` whole.
    """
    for prefix in (4096, 65536):
        lines = text[:prefix].splitlines()
        if len(lines) > count:
            return lines[:count]
        if prefix >= len(text):
            return lines
    return text.splitlines()[:count]


def page_label(metadata: Mapping[str, object]) -> str | None:
    """The pages a chunk comes from, as a citation shows them: ``"3"`` or ``"2–3"`` (``None`` unpaged)."""
    first, last = metadata.get("page"), metadata.get("page_end")
    if not isinstance(first, int) or isinstance(first, bool):
        return None
    if isinstance(last, int) and not isinstance(last, bool) and last > first:
        return f"{first}\u2013{last}"
    return str(first)


def context_line(title: str, section: str) -> str:
    """The line a chunk is searched by before its text: ``title > section``, without repeats."""
    parts = [title] if title else []
    if section and section != title:
        parts.append(section.removeprefix(f"{title} > ") if title else section)
    return " > ".join(parts)


def searchable_text(context: str, text: str) -> str:
    """What the embedder and the lexical index see for a chunk: its context, then its text."""
    return f"{context}\n{text}" if context else text
