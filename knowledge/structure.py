"""A document's structure, read by real parsers, and the chunks packed from it.

A document becomes a list of `Block`s (a paragraph, a list, a code block, a table),
each under the headings above it:

* Markdown through markdown-it-py (CommonMark, plus pipe tables): headings are
  heading tokens, so a ``# comment`` inside a fenced block is code, never a heading;
* reStructuredText through docutils: sections are the doctree's sections, code is
  its literal blocks, tables are its tables (rendered as pipe tables);
* plain text (and the text of a PDF, page by page) as paragraphs with no headings:
  a line of plain text is never taken for a heading.

`pack` then fills chunks block by block within one section. A chunk boundary never
falls inside a code block or a table: a block too long for one chunk is split, a
code block at line boundaries with each piece fenced again, a table at row
boundaries with its header row repeated, a paragraph by the recursive character
splitter (with the configured overlap). A chunk never runs on across a PDF page
break, however short: a fact is cited on the page it is on.

A section path holds headings only: the text of heading nodes, nothing else.
"""

from __future__ import annotations

import functools
import io
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_text_splitters import RecursiveCharacterTextSplitter

BlockKind = Literal["heading", "text", "code", "table"]
MAX_HEADING_CHARS = 120
"""A heading longer than this is cut in the section path (headings are titles, not prose)."""
_HEADING_MARKS = re.compile(r"[\s¶§#]+$|^[\s¶§#]+")
_FENCE_OPEN = re.compile(r"^(`{3,}|~{3,})")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Block:
    """One unit of a document that a chunk boundary must not cut: a paragraph, a list, code, a table."""

    kind: BlockKind
    text: str
    section: tuple[str, ...]
    """The headings above the block, outermost first."""
    start: int | None = None
    """Offset of `text` in the document's text, when `text` is a verbatim slice of it."""
    page: int | None = None
    """The page the block is on (PDF), 1-based."""


@dataclass(frozen=True)
class Piece:
    """The text of one chunk and where it sits."""

    text: str
    section: tuple[str, ...]
    start: int | None
    page: int | None = None
    page_end: int | None = None


def heading_text(text: str) -> str:
    """A heading as a section path holds it: one line, no anchor marks (``¶``, ``§``), bounded."""
    one_line = " ".join(text.split())
    return _HEADING_MARKS.sub("", one_line)[:MAX_HEADING_CHARS].strip()


# -- Markdown -------------------------------------------------------------------------------


def markdown_blocks(text: str) -> list[Block]:
    """The blocks of a Markdown document, each under its ATX or setext headings.

    Each block's text is the verbatim source of a top-level block token (so a
    table keeps its pipes and a code block its fences and info string).
    """
    tokens = _markdown_parser().parse(text)
    line_starts = _line_starts(text)
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        # a top-level list is read item by item, so a long list is cut between items
        item = token.type == "list_item_open" and token.level == 1
        if (token.level != 0 and not item) or token.nesting == -1 or token.map is None:
            continue
        if token.type in ("bullet_list_open", "ordered_list_open"):
            continue
        first, last = token.map
        start = line_starts[first]
        end = line_starts[last] if last < len(line_starts) else len(text)
        source = text[start:end].rstrip()
        if token.type == "heading_open":
            level = int(token.tag[1])
            inline = tokens[index] if index < len(tokens) else None
            title = heading_text(_heading_words(inline))
            while stack and stack[-1][0] >= level:
                stack.pop()
            if title:
                stack.append((level, title))
                blocks.append(Block("heading", source, tuple(h for _, h in stack), start))
            continue
        if not source.strip():
            continue
        kind: BlockKind = (
            "code"
            if token.type in ("fence", "code_block")
            else "table"
            if token.type == "table_open"
            else "text"
        )
        blocks.append(Block(kind, source, tuple(h for _, h in stack), start))
    return blocks


@functools.cache
def _markdown_parser() -> Any:
    """A CommonMark parser (with tables) that reads blocks only.

    Inline markup is parsed for headings alone (`_heading_words`): a block's text is
    its verbatim source, so parsing every paragraph's links and emphasis cost a third
    of the parse and changed nothing.
    """
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").disable("inline")


@functools.cache
def _inline_parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True})


def _heading_words(inline: Any) -> str:
    """The words of a heading's inline token: text and code spans, without markup."""
    if inline is None or inline.type != "inline":
        return ""
    parsed = _inline_parser().parseInline(inline.content)
    children = parsed[0].children if parsed else None
    if not children:
        return str(inline.content)
    parts = []
    for child in children:
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for match in re.finditer("\n", text):
        starts.append(match.end())
    return starts


# -- reStructuredText -----------------------------------------------------------------------


def rst_blocks(text: str) -> list[Block]:
    """The blocks of a reStructuredText document, each under its section titles.

    Parsed by docutils with file inclusion and raw output off and every message
    silenced (a document with markup errors still yields its text). Sphinx's
    cross-reference roles (``:func:`x```) read as literal text, and its
    ``versionadded``-style directives keep their content.
    """
    from docutils import nodes
    from docutils.core import publish_doctree

    _register_sphinx_markup()
    doctree = publish_doctree(
        text,
        settings_overrides={
            "report_level": 5,
            "halt_level": 5,
            "warning_stream": io.StringIO(),
            "file_insertion_enabled": False,
            "raw_enabled": False,
            "doctitle_xform": False,  # the title stays a section, as a Markdown H1 does
            "_disable_config": True,
        },
    )
    blocks: list[Block] = []
    _walk_rst(doctree, (), blocks, nodes)
    return blocks


_SKIPPED_RST = (
    "system_message",
    "comment",
    "target",
    "substitution_definition",
    "raw",
    "pending",
    "title",
)


def _walk_rst(node: Any, section: tuple[str, ...], blocks: list[Block], nodes: Any) -> None:
    for child in node.children:
        if isinstance(child, nodes.section):
            title = next((c for c in child.children if isinstance(c, nodes.title)), None)
            heading = heading_text(title.astext()) if title is not None else ""
            inner = (*section, heading) if heading else section
            if heading:
                blocks.append(Block("heading", heading, inner))
            _walk_rst(child, inner, blocks, nodes)
        elif child.tagname in _SKIPPED_RST:
            continue
        elif isinstance(child, nodes.topic) and "contents" in child.get("classes", []):
            continue  # a table of contents repeats the headings
        elif isinstance(child, nodes.literal_block | nodes.doctest_block):
            language = next((c for c in child.get("classes", []) if c != "code"), "")
            body = child.astext().rstrip("\n")
            blocks.append(Block("code", f"```{language}\n{body}\n```", section))
        elif isinstance(child, nodes.table):
            blocks.append(Block("table", _rst_table(child, nodes), section))
        elif isinstance(child, nodes.container | nodes.compound):
            _walk_rst(child, section, blocks, nodes)
        else:
            rendered = _rst_text(child, nodes).strip()
            if rendered:
                blocks.append(Block("text", rendered, section))


def _rst_text(node: Any, nodes: Any) -> str:
    """A body element as plain text: list items marked, admonitions and fields named."""
    if isinstance(node, nodes.bullet_list | nodes.enumerated_list):
        return "\n".join(f"- {' '.join(item.astext().split())}" for item in node.children)
    if isinstance(node, nodes.field_list):
        lines = []
        for field in node.children:
            name, body = field.children[0].astext(), field.children[1].astext()
            lines.append(f"{name}: {' '.join(body.split())}")
        return "\n".join(lines)
    if isinstance(node, nodes.Admonition):
        titled = [c for c in node.children if isinstance(c, nodes.title)]
        label = titled[0].astext() if titled else node.tagname.replace("_", " ").capitalize()
        body = "\n\n".join(
            c.astext() for c in node.children if not isinstance(c, nodes.title)
        ).strip()
        return f"{label}: {body}"
    return str(node.astext())


def _rst_table(table: Any, nodes: Any) -> str:
    """A docutils table as a pipe table: the header rows, a separator, the body rows."""
    head = [row for group in table.findall(nodes.thead) for row in group.findall(nodes.row)]
    body = [row for group in table.findall(nodes.tbody) for row in group.findall(nodes.row)]

    def line(row: Any) -> str:
        cells = [" ".join(entry.astext().split()) for entry in row.findall(nodes.entry)]
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    header = [line(row) for row in head] or [line(body.pop(0))] if (head or body) else []
    width = header[0].count(" | ") + 1 if header else 1
    separator = "|" + "---|" * width
    return "\n".join([*header, separator, *(line(row) for row in body)])


_sphinx_registered = False
SPHINX_ROLES = (
    "func", "meth", "class", "mod", "attr", "exc", "data", "const", "obj", "ref", "doc",
    "term", "option", "envvar", "file", "program", "command", "kbd", "samp", "py:func",
    "py:meth", "py:class", "py:mod", "py:attr", "py:exc", "py:data", "py:const", "py:obj",
)  # fmt: skip
"""Sphinx roles read as literal text (docutils alone would report them as unknown)."""
SPHINX_DIRECTIVES = {
    "versionadded": "Added in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "seealso": "See also",
    "todo": "To do",
}
"""Sphinx directives whose content is kept, introduced as Sphinx renders them."""


def _register_sphinx_markup() -> None:
    global _sphinx_registered
    if _sphinx_registered:
        return
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives, roles
    from docutils.statemachine import StringList

    class _Noted(Directive):
        """``.. versionadded:: 2.1`` and its kin: a line naming the directive, then its content."""

        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True

        def run(self) -> list[Any]:
            # as in Sphinx, text right below the directive line continues its argument
            version, _, rest = (self.arguments[0] if self.arguments else "").partition("\n")
            label = SPHINX_DIRECTIVES[self.name]
            container = nodes.admonition()  # read as "<label>: <content>", like a note
            container += nodes.title(text=f"{label} {version}".strip())
            if rest.strip():
                self.state.nested_parse(StringList(rest.splitlines()), self.lineno, container)
            self.state.nested_parse(self.content, self.content_offset, container)
            return [container]

    for name in SPHINX_ROLES:
        roles.register_generic_role(name, nodes.literal)
    for name in SPHINX_DIRECTIVES:
        directives.register_directive(name, _Noted)
    _sphinx_registered = True


# -- plain text -----------------------------------------------------------------------------


def plain_blocks(text: str, page_starts: Sequence[int] = ()) -> list[Block]:
    """Paragraphs (runs of lines between blank lines), each on its page when pages are known."""
    blocks = []
    position = 0
    for match in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = match.start() if match is not None else len(text)
        paragraph = text[position:end]
        stripped = paragraph.strip()
        if stripped:
            start = position + paragraph.index(stripped[0])
            page = bisect_right(page_starts, start) if page_starts else None
            blocks.append(Block("text", stripped, (), start, page))
        position = match.end() if match is not None else len(text)
    return blocks


# -- packing --------------------------------------------------------------------------------


def pack(blocks: Sequence[Block], text: str, *, chunk_size: int, chunk_overlap: int) -> list[Piece]:
    """Fill chunks of at most `chunk_size` characters with whole blocks of one section.

    Args:
        blocks: The document's blocks, in order.
        text: The document's text (a chunk of verbatim blocks is its slice of it).
        chunk_size: The most characters in a chunk (a block that cannot be split,
            such as one line of code longer than this, is cut at the limit).
        chunk_overlap: Characters shared by consecutive pieces of one long paragraph.
    """
    pieces: list[Piece] = []
    group: list[Block] = []
    size = 0
    for block in blocks:
        if group and not _fits(group, size, block, chunk_size):
            _flush(group, text, pieces)
            group, size = [], 0
        if len(block.text) > chunk_size:
            _flush(group, text, pieces)
            group, size = [], 0
            pieces.extend(_split(block, chunk_size, chunk_overlap))
            continue
        group.append(block)
        size += len(block.text) + (2 if size else 0)
    _flush(group, text, pieces)
    return pieces


def _flush(group: list[Block], text: str, pieces: list[Piece]) -> None:
    """End a chunk; one of nothing but headings is dropped (they live on in the section path)."""
    if any(block.kind != "heading" for block in group):
        pieces.append(_joined(group, text))


def _fits(group: list[Block], size: int, block: Block, chunk_size: int) -> bool:
    if block.section != group[0].section or size + 2 + len(block.text) > chunk_size:
        return False
    # a page break always ends a chunk, however short: a fact is cited on its own page
    return block.page == group[-1].page


def _joined(group: list[Block], text: str) -> Piece:
    first, last = group[0], group[-1]
    verbatim = all(b.start is not None for b in group)
    if verbatim and first.start is not None and last.start is not None:
        body = text[first.start : last.start + len(last.text)]
    else:
        body = "\n\n".join(b.text for b in group)
    return Piece(body, first.section, first.start if verbatim else None, first.page, last.page)


def _split(block: Block, chunk_size: int, chunk_overlap: int) -> list[Piece]:
    if block.kind == "code":
        parts = _split_code(block.text, chunk_size)
    elif block.kind == "table":
        parts = _split_table(block.text, chunk_size)
    else:
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap
        )
        parts = splitter.split_text(block.text)
    pieces = []
    search_from = 0
    for part in parts:
        found = block.text.find(part, search_from) if block.start is not None else -1
        start = block.start + found if block.start is not None and found >= 0 else None
        if found >= 0:
            search_from = found + 1
        pieces.append(Piece(part, block.section, start, block.page, block.page))
    return pieces


def _split_code(code: str, chunk_size: int) -> list[str]:
    """A code block in pieces at line boundaries, each fenced as the block was."""
    lines = code.split("\n")
    fence = _FENCE_OPEN.match(lines[0])
    if fence is not None:
        opening = lines[0]
        closing = lines[-1] if len(lines) > 1 and lines[-1].startswith(fence.group(1)) else ""
        body = lines[1:-1] if closing else lines[1:]
        closing = closing or fence.group(1)
    else:  # an indented code block: its pieces are indented code too
        opening, closing, body = "", "", lines
    frame = len(opening) + len(closing) + 2 if opening else 0
    budget = max(1, chunk_size - frame)
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0
    for line in _cut_long_lines(body, budget):
        if current and size + len(line) + 1 > budget:
            pieces.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        pieces.append(current)
    if not opening:
        return ["\n".join(piece) for piece in pieces]
    return [f"{opening}\n" + "\n".join(piece) + f"\n{closing}" for piece in pieces]


def _cut_long_lines(lines: list[str], budget: int) -> list[str]:
    out = []
    for line in lines:
        while len(line) > budget:
            out.append(line[:budget])
            line = line[budget:]
        out.append(line)
    return out


def _split_table(table: str, chunk_size: int) -> list[str]:
    """A pipe table in pieces at row boundaries, each starting with the header and separator."""
    lines = table.split("\n")
    header = lines[:2] if len(lines) > 1 and set(lines[1].replace(" ", "")) <= set("|:-") else []
    rows = lines[len(header) :]
    head_text = "\n".join(header)
    budget = max(1, chunk_size - len(head_text) - 1)
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0
    for row in _cut_long_lines(rows, budget):
        if current and size + len(row) + 1 > budget:
            pieces.append(current)
            current, size = [], 0
        current.append(row)
        size += len(row) + 1
    if current:
        pieces.append(current)
    return ["\n".join([*header, *piece]) for piece in pieces]
