"""The file types ingest reads, in one list: each one's extensions and reader.

A file is read by the format its extension names (`format_for`); a file of any
other name is read as UTF-8 text. A file that is neither (binary content) is
refused with `unsupported`, whose message lists `supported_types()`: a new reader
is one more entry in `FORMATS`, and the errors name it from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from arcana_loop.knowledge.errors import UnsupportedFormat
from arcana_loop.knowledge.loaders import Loader, read_html, read_pdf
from arcana_loop.knowledge.office import read_docx, read_xlsx

Syntax = Literal["markdown", "rst", "plain"]
"""How a document's text is marked up, which decides how its structure is read."""


@dataclass(frozen=True)
class Format:
    """A file type ingest reads."""

    name: str
    suffixes: tuple[str, ...]
    """Its extensions, lower-case with the dot."""
    read: Loader | None = None
    """The reader turning its bytes into text (`knowledge.loaders.Extracted`, which says
    whether the text is Markdown); `None`: the file is UTF-8 text of `syntax`."""
    syntax: Syntax = "plain"


FORMATS: tuple[Format, ...] = (
    Format("Markdown", (".md", ".markdown"), syntax="markdown"),
    Format("reStructuredText", (".rst", ".rest"), syntax="rst"),
    Format("text", (".txt",)),
    Format("HTML", (".html", ".htm", ".xhtml"), read_html),  # the html extra
    Format("PDF", (".pdf",), read_pdf),  # the pdf extra
    Format("Word", (".docx",), read_docx),  # the office extra
    Format("Excel", (".xlsx",), read_xlsx),  # the office extra
)
_BY_SUFFIX = {suffix: fmt for fmt in FORMATS for suffix in fmt.suffixes}
TEXT = Format("text", ())
"""A file whose extension names no format: UTF-8 text, no line of it taken for a heading."""


def format_for(path: Path) -> Format:
    """The format `path`'s extension names (any case), else `TEXT`."""
    return _BY_SUFFIX.get(path.suffix.lower(), TEXT)


def is_known_suffix(suffix: str) -> bool:
    """Whether an extension (with its dot, any case) names a format ingest reads."""
    return suffix.lower() in _BY_SUFFIX


def supported_types() -> str:
    """The supported types as one line: every extension, then text of any other name."""
    return ", ".join(_BY_SUFFIX) + ", or UTF-8 text under any other name"


def unsupported(path: str, detail: str) -> UnsupportedFormat:
    """The error for a file ingest cannot read as any type, `detail` saying what it is."""
    return UnsupportedFormat(f"{path}: {detail}; supported: {supported_types()}", detail=detail)
