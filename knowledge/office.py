"""Read Word (``.docx``) and Excel (``.xlsx``) files as Markdown (the `office` extra).

A Word document, through python-docx, becomes Markdown that the structure parser
reads as it reads a Markdown file: a paragraph in the Title style is a ``#``
heading and one in "Heading N" (or a style based on it) a heading one level
below, so the document's outline is each chunk's section path; list paragraphs
are ``-`` or ``1.`` items indented by their level, tables pipe tables (the first
row the header; a table in a cell is text of that cell), and paragraphs in a code
style one fenced block. Page headers and footers, footnotes and comments are not
body text and are left out. The title is the core properties' title, else the
first heading; without either the file's name titles it (`sections.document_title`).

A workbook, through openpyxl (cached values, not formulas), becomes one ``#``
section per worksheet named as the sheet, its rows a pipe table whose first
non-empty row is the header; empty rows and trailing empty cells are left out.
Its title is the core properties' title.

Both formats are zip packages: one that would unpack to more than
`MAX_UNPACKED_BYTES` is refused before it is parsed.
"""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arcana_loop.knowledge.errors import IngestError
from arcana_loop.knowledge.loaders import (
    Extracted,
    clean_text,
    library_log,
    missing_extra,
    pipe_table,
)

MAX_UNPACKED_BYTES = 200 * 1024 * 1024
"""The most a Word or Excel package may unpack to: the parsers hold every part in memory,
and a small zip can hold a part of gigabytes."""
_HEADING_STYLE = re.compile(r"heading ([1-9])")
_LIST_STYLE = re.compile(r"list (bullet|number|paragraph|continue)?\s*([2-9])?$")
_CODE_STYLES = frozenset({"html preformatted", "plain text", "macro text"})
_MARKUP_START = re.compile(r"(?:#{1,6}(?:\s|$)|[=\-_*](?:\s*[=\-_*]){2,}\s*$|`{3}|~{3}|>)")
"""A line start Markdown would read as a heading, a rule or setext underline, a fence or a quote."""
_FENCE = "```"


def read_docx(raw: bytes, path: Path) -> Extracted:
    """Extract a Word document's body as Markdown, with its outline as headings.

    Raises:
        MissingExtra: if python-docx is not installed.
        IngestError: for a file that is not a readable Word document, unpacks to
            too much, or has no text.
    """
    try:
        import docx
        from docx.table import Table
    except ImportError:
        raise missing_extra(path, "Word", "office") from None
    _check_unpacked(raw, path, "Word document")
    try:
        with library_log(path, "docx"):
            document = docx.Document(io.BytesIO(raw))
            words = _WordText()
            for block in document.iter_inner_content():
                if isinstance(block, Table):
                    words.table(block)
                else:
                    words.paragraph(block)
            title = (document.core_properties.title or "").strip() or words.first_heading
    except Exception as exc:  # python-docx, lxml and zipfile raise assorted errors on damaged files
        raise IngestError(
            f"{path}: not a readable Word document ({type(exc).__name__}: {exc})"
        ) from None
    text = clean_text(words.markdown())
    if not text.strip():
        raise IngestError(f"{path}: the Word document has no text")
    return Extracted(text=text, markdown=True, title=clean_text(title) or None)


def read_xlsx(raw: bytes, path: Path) -> Extracted:
    """Extract a workbook's worksheets as Markdown: a section per sheet, its rows a table.

    Raises:
        MissingExtra: if openpyxl is not installed.
        IngestError: for a file that is not a readable workbook, unpacks to too
            much, or has no cell with a value.
    """
    try:
        from openpyxl import load_workbook
    except ImportError:
        raise missing_extra(path, "Excel", "office") from None
    _check_unpacked(raw, path, "workbook")
    sections = []
    try:
        with library_log(path, "openpyxl"):
            book = load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
            try:
                for sheet in book.worksheets:
                    # rows padded to the sheet's stated size cost rows x columns: three cells
                    # far apart (A1, XFD1, A1048576) took hours; unpadded, a row ends at its
                    # last cell and a missing row is empty
                    sheet.reset_dimensions()
                    rows = (_row(values) for values in sheet.iter_rows(values_only=True))
                    table = pipe_table([row for row in rows if row])
                    if table:
                        sections.append(f"# {_one_line(sheet.title)}\n\n{table}\n")
                title = (book.properties.title or "").strip()
            finally:
                book.close()
    except Exception as exc:  # openpyxl and zipfile raise assorted errors on damaged files
        raise IngestError(
            f"{path}: not a readable workbook ({type(exc).__name__}: {exc})"
        ) from None
    if not sections:
        raise IngestError(f"{path}: the workbook has no cell with a value")
    return Extracted(text=clean_text("\n".join(sections)), markdown=True, title=title or None)


def _check_unpacked(raw: bytes, path: Path, kind: str) -> None:
    """Refuse a package whose parts, as its zip directory gives their sizes, exceed the limit.

    zipfile reads no more of a part than the directory says it holds, so the sum
    bounds what the parser is handed. A file that is not a zip is left to the
    parser's own error.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as package:
            unpacked = sum(part.file_size for part in package.infolist())
    except (zipfile.BadZipFile, ValueError):
        return
    if unpacked > MAX_UNPACKED_BYTES:
        raise IngestError(
            f"{path}: the {kind} unpacks to {unpacked:,} bytes, more than {MAX_UNPACKED_BYTES:,}"
        )


class _WordText:
    """A Word document's body blocks as Markdown, in order."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.first_heading = ""
        self.code: list[str] = []
        """Lines of the code block being gathered."""
        self.items: list[str] = []
        """Items of the list being gathered."""

    def table(self, table: Any) -> None:
        """Add a table (python-docx's `Table`)."""
        self._end_blocks()
        self.blocks.append(pipe_table([[_cell_text(c) for c in row.cells] for row in table.rows]))

    def paragraph(self, paragraph: Any) -> None:
        """Add a paragraph (python-docx's `Paragraph`)."""
        style = _style_names(paragraph.style)
        kind, level = _paragraph_kind(style)
        text = paragraph.text
        if kind == "code":
            self._end_list()
            self.code.extend(text.split("\n"))
            return
        if kind == "list":
            self._end_code()
            numbered = any(name.startswith("list number") for name in style)
            self.items.append(_list_item(text, "1. " if numbered else "- ", level))
            return
        self._end_blocks()
        if kind == "heading" and _one_line(text):
            self.first_heading = self.first_heading or _one_line(text)
            self.blocks.append(f"{'#' * min(level + 1, 6)} {_one_line(text)}")
        elif text.strip():
            self.blocks.append(_literal(text))

    def markdown(self) -> str:
        """The document so far as Markdown."""
        self._end_blocks()
        return "\n\n".join(block for block in self.blocks if block) + "\n"

    def _end_blocks(self) -> None:
        self._end_code()
        self._end_list()

    def _end_list(self) -> None:
        if self.items:
            self.blocks.append("\n".join(self.items))
            self.items = []

    def _end_code(self) -> None:
        if self.code:
            self.blocks.append("\n".join([_FENCE, *self.code, _FENCE]))
            self.code = []


def _list_item(text: str, marker: str, depth: int) -> str:
    """A list paragraph as a Markdown item at `depth` (1 for the outermost list), its further lines inside it."""
    indent = " " * len(marker) * (depth - 1)
    first, *rest = _literal(text).split("\n")
    return "\n".join(
        [f"{indent}{marker}{first}", *(f"{indent}{' ' * len(marker)}{r}" for r in rest)]
    )


def _style_names(style: Any) -> list[str]:
    """The paragraph style's name and those of the styles it is based on, lower-cased."""
    names: list[str] = []
    while style is not None and len(names) < 10:  # a chain that loops is cut
        names.append((style.name or "").lower())
        style = style.base_style
    return names


def _paragraph_kind(style: list[str]) -> tuple[str, int]:
    """A paragraph's kind by its style (`"heading"`, `"list"`, `"code"`, `"text"`) and its level."""
    for name in style:
        if name == "title":
            return "heading", 0
        if heading := _HEADING_STYLE.fullmatch(name):
            return "heading", int(heading.group(1))
        if listed := _LIST_STYLE.fullmatch(name):
            return "list", int(listed.group(2) or 1)
        if "code" in name or name in _CODE_STYLES:
            return "code", 0
    return "text", 0


def _cell_text(cell: Any) -> str:
    """A table cell's text: its paragraphs and the text of tables inside it, in order."""
    from docx.table import Table

    pieces: list[str] = []
    stack: list[Iterator[Any]] = [cell.iter_inner_content()]
    while stack:  # a stack, not recursion: tables nest in cells to any depth
        block = next(stack[-1], None)
        if block is None:
            stack.pop()
        elif isinstance(block, Table):
            stack.append(b for row in block.rows for c in row.cells for b in c.iter_inner_content())
        else:
            pieces.append(block.text)
    return " ".join(pieces)


def _literal(text: str) -> str:
    """Paragraph text as Markdown that reads back as that text: a line Markdown would take for markup is escaped."""
    lines = [line.strip() for line in text.split("\n")]
    return "\n".join(f"\\{line}" if _MARKUP_START.match(line) else line for line in lines)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _row(values: tuple[Any, ...]) -> list[str]:
    """A worksheet row's cells as text, without the empty ones after the last value."""
    cells = ["" if value is None else _cell_value(value) for value in values]
    while cells and not cells[-1].strip():
        cells.pop()
    return cells


def _cell_value(value: Any) -> str:
    """A cell's value as a reader of the sheet sees it: ``12`` for 12.0, dates in ISO 8601."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)
