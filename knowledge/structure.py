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
import hashlib
import io
import json
import re
import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
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
    return parse_markdown(text).blocks


class _Found(NamedTuple):
    """One block as the parser found it, placed within its segment (a heading also when its title is empty)."""

    kind: BlockKind
    start: int
    """Offset of its source from the start of its segment."""
    length: int
    level: int
    """A heading's level (1-6), which decides the headings it closes; 0 for other blocks."""
    title: str


class _Segment(NamedTuple):
    """The source from one top-level block's first line to the next one's, and the blocks found in it."""

    length: int
    digest: bytes
    found: tuple[_Found, ...]


_KIND_CODES: tuple[BlockKind, ...] = ("heading", "text", "code", "table")
_DIGEST_BYTES = 16
_COLUMNS = "<u4"


@dataclass(frozen=True)
class MarkdownMap:
    """Where a Markdown document's top-level blocks start, with a digest of the source between.

    Stored with the document, it lets `parse_markdown` parse an edited copy in part:
    the parser reads a top-level block from its first line with nothing carried over
    from the blocks before it (markdown-it resets its block state between them),
    and decides where the block ends by reading at most up to the first line of the
    block after next. So a block whose source and the two segments after it are
    unchanged parses as before, and only the rest is parsed again.
    """

    segments: tuple[_Segment, ...]

    def dump(self) -> bytes:
        """The map as stored: compressed columns, tagged with the parser that made it."""
        found = [f for s in self.segments for f in s.found]
        header = {
            "parser": _parser_version(),
            "segments": len(self.segments),
            "found": len(found),
            "titles": [f.title for f in found if f.kind == "heading"],
        }
        columns = [
            [s.length for s in self.segments],
            [len(s.found) for s in self.segments],
            [f.start for f in found],
            [f.length for f in found],
            [_KIND_CODES.index(f.kind) * 8 + f.level for f in found],
        ]
        head = json.dumps(header, separators=(",", ":")).encode()
        body = b"".join(np.asarray(c, dtype=_COLUMNS).tobytes() for c in columns)
        digests = b"".join(s.digest for s in self.segments)
        return zlib.compress(len(head).to_bytes(4, "little") + head + body + digests, 1)

    @classmethod
    def load(cls, data: bytes) -> MarkdownMap | None:
        """A stored map; `None` for one another parser version made, or one that cannot be read."""
        try:
            raw = zlib.decompress(data)
            size = int.from_bytes(raw[:4], "little")
            header = json.loads(raw[4 : 4 + size])
            if header["parser"] != _parser_version():
                return None
            return cls(_segments(header, raw[4 + size :]))
        except (zlib.error, ValueError, TypeError, KeyError, IndexError):
            return None


def _segments(header: dict[str, Any], body: bytes) -> tuple[_Segment, ...]:
    """The segments of a stored map's columns (see `MarkdownMap.dump`), checked to hold together."""
    segments, found = int(header["segments"]), int(header["found"])
    width = np.dtype(_COLUMNS).itemsize
    sizes = [segments, segments, found, found, found]
    if len(body) != width * sum(sizes) + _DIGEST_BYTES * segments:
        raise ValueError("a stored map of the wrong size")
    columns, at = [], 0
    for count in sizes:
        columns.append(np.frombuffer(body, dtype=_COLUMNS, count=count, offset=at).tolist())
        at += width * count
    lengths, counts, starts, spans, codes = columns
    if sum(counts) != found or max(codes, default=0) >= 8 * len(_KIND_CODES):
        raise ValueError("a stored map's blocks do not add up")
    reach = np.add(starts, spans, dtype=np.int64)
    if np.any(reach > np.repeat(np.asarray(lengths, dtype=np.int64), counts)):
        raise ValueError("a segment of a stored map does not hold its blocks")
    titles = iter(header["titles"])
    kinds = [_KIND_CODES[code // 8] for code in codes]
    items = [
        _Found(kind, start, span, code % 8, next(titles) if kind == "heading" else "")
        for kind, start, span, code in zip(kinds, starts, spans, codes, strict=True)
    ]
    out, first = [], 0
    for index, (length, count) in enumerate(zip(lengths, counts, strict=True)):
        digest = body[at + _DIGEST_BYTES * index : at + _DIGEST_BYTES * (index + 1)]
        out.append(_Segment(length, digest, tuple(items[first : first + count])))
        first += count
    return tuple(out)


@dataclass(frozen=True)
class MarkdownParse:
    """A Markdown document's blocks, and the map to store for its next version."""

    blocks: list[Block]
    map: MarkdownMap


WINDOW_CHARS = 2048
"""Characters parsed at a time where an edit is found (doubled until blocks settle in the window)."""
_SETTLED_AFTER = 3
"""Block starts that must follow a block in a window before it is taken as the whole text parses it."""
_MAX_CANDIDATES = 4
"""Stored segments of one digest tried where the parse might pick up the stored map again."""


def parse_markdown(text: str, previous: MarkdownMap | None = None) -> MarkdownParse:
    """Parse a Markdown document, reusing what `previous` (an earlier version's map) still holds.

    The result equals a parse of the whole text: a stored segment is reused only
    where its digest, and those of the two after it, match the text at that place;
    elsewhere the text is parsed again, a window at a time from a block boundary,
    keeping the blocks a window settles, until the stored map matches again.
    """
    segments = _Reparse(text, previous.segments if previous else ()).run()
    return MarkdownParse(_blocks(text, segments), MarkdownMap(tuple(segments)))


class _Reparse:
    """One pass over a text: the stored segments that still match it, the rest parsed again."""

    def __init__(self, text: str, stored: tuple[_Segment, ...]) -> None:
        self.text = text
        self.stored = stored
        self.by_digest: dict[bytes, list[int]] | None = None

    def run(self) -> list[_Segment]:
        text, stored = self.text, self.stored
        if not stored:
            return _parse_window(text, 0, len(text), True)[0]
        out: list[_Segment] = []
        pos = 0
        at: int | None = 0 if stored else None  # the stored segment expected at `pos`
        checked = 0  # stored segments from `at` on known to match the text from `pos` on
        size = WINDOW_CHARS
        while pos < len(text):
            if at is not None:
                checked = self._extend(pos, at, checked)
                if checked >= _SETTLED_AFTER or at + checked == len(stored):
                    out.append(stored[at])
                    pos += stored[at].length
                    at, checked = at + 1, checked - 1
                    continue
            end = _line_end(text, pos + size)
            parsed, settled = _parse_window(text, pos, end, end >= len(text))
            hint, at, checked = at, None, 0
            for index in range(settled):
                out.append(parsed[index])
                pos += parsed[index].length
                following = parsed[index + 1] if index + 1 < len(parsed) else None
                at = self._resync(pos, following, hint)
                if at is not None:
                    break
            # a window that settles nothing (an unclosed fence, say) or picks up nothing
            # stored (text rewritten) is followed by a larger one: a rewrite costs no more
            # than about two whole parses
            size = WINDOW_CHARS if at is not None else size * 2
        return out

    def _extend(self, pos: int, at: int, checked: int) -> int:
        """How many stored segments from `at` on match the text from `pos` on (up to three).

        The last stored segment counts only if the text ends with it, as it did.
        """
        for _ in range(checked):
            pos += self.stored[at].length
            at += 1
        while checked < _SETTLED_AFTER and at < len(self.stored):
            segment = self.stored[at]
            fits = pos + segment.length <= len(self.text)
            last = at + 1 == len(self.stored)
            if not fits or (last and pos + segment.length != len(self.text)):
                break
            if _digest(self.text[pos : pos + segment.length]) != segment.digest:
                break
            pos += segment.length
            at += 1
            checked += 1
        return checked

    def _resync(self, pos: int, following: _Segment | None, hint: int | None) -> int | None:
        """The stored segment the text picks up again at `pos`, if one does."""
        if not self.stored or pos >= len(self.text):
            return None
        candidates: list[int] = []
        if hint is not None and hint < len(self.stored):
            candidates.append(hint)  # text replaced in place: the map goes on where it stopped
        if following is not None:
            if self.by_digest is None:
                self.by_digest = {}
                for index, segment in enumerate(self.stored):
                    self.by_digest.setdefault(segment.digest, []).append(index)
            same = self.by_digest.get(following.digest, [])
            later = [i for i in same if hint is None or i >= hint]
            candidates.extend((later or same)[:_MAX_CANDIDATES])
        for index in candidates:
            checked = self._extend(pos, index, 0)
            if checked >= _SETTLED_AFTER or index + checked == len(self.stored):
                return index
        return None


def _digest(source: str) -> bytes:
    return hashlib.blake2b(source.encode("utf-8"), digest_size=_DIGEST_BYTES).digest()


def _line_end(text: str, pos: int) -> int:
    """The end of the line holding `pos` (after its line break), or the text's end."""
    found = _LINE_BREAK.search(text, pos) if pos < len(text) else None
    return found.end() if found is not None else len(text)


def _parse_window(text: str, start: int, end: int, final: bool) -> tuple[list[_Segment], int]:
    """The segments of `text[start:end]` parsed alone, and how many of them are settled.

    `start` is a block boundary of the whole text. A segment is settled when the
    window ends the text (`final`), or when `_SETTLED_AFTER` block starts follow it
    in the window: the parser then decided where it ends from lines the window holds.
    """
    if start >= end:
        return [], 0
    window = text[start:end]
    tokens = _markdown_parser().parse(window)
    line_starts = _line_starts(window)
    bounds: list[int] = [0]
    found: list[_Found] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token.nesting == -1 or token.map is None:
            continue
        first, last = token.map
        if token.level == 0 and line_starts[first] > bounds[-1]:
            bounds.append(line_starts[first])
        # a top-level list is read item by item, so a long list is cut between items
        item = token.type == "list_item_open" and token.level == 1
        if (token.level != 0 and not item) or token.type in _LISTS:
            continue
        begin = line_starts[first]
        stop = line_starts[last] if last < len(line_starts) else len(window)
        source = window[begin:stop].rstrip()
        if token.type == "heading_open":
            inline = tokens[index] if index < len(tokens) else None
            title = heading_text(_heading_words(inline))
            found.append(_Found("heading", begin, len(source), int(token.tag[1]), title))
        elif source.strip():
            found.append(_Found(_BLOCK_KINDS.get(token.type, "text"), begin, len(source), 0, ""))
    segments = []
    position = 0
    for begin, stop in zip(bounds, [*bounds[1:], len(window)], strict=True):
        inside = []
        while position < len(found) and found[position].start < stop:
            inside.append(found[position]._replace(start=found[position].start - begin))
            position += 1
        segments.append(_Segment(stop - begin, _digest(window[begin:stop]), tuple(inside)))
    settled = len(segments) if final else max(0, len(segments) - _SETTLED_AFTER)
    return segments, settled


_LISTS = frozenset({"bullet_list_open", "ordered_list_open"})
_BLOCK_KINDS: dict[str, BlockKind] = {"fence": "code", "code_block": "code", "table_open": "table"}


def _blocks(text: str, segments: Sequence[_Segment]) -> list[Block]:
    """The blocks of `segments` laid over `text`, each under the headings open above it."""
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    section: tuple[str, ...] = ()
    offset = 0
    for segment in segments:
        for kind, start, length, level, title in segment.found:
            start += offset
            if kind == "heading":
                while stack and stack[-1][0] >= level:
                    stack.pop()
                if title:
                    stack.append((level, title))
                section = tuple(h for _, h in stack)
                if not title:
                    continue
            blocks.append(Block(kind, text[start : start + length], section, start))
        offset += segment.length
    return blocks


@functools.cache
def _parser_version() -> str:
    """Names the parser a stored map was made by: another version may read blocks otherwise."""
    import markdown_it

    return f"blocks-map-1 markdown-it-py {markdown_it.__version__}"


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


_INLINE_MARKUP = re.compile(r"[\\`*_\[\]<>!&\r\n]")
"""Characters that can start CommonMark inline markup; a heading without them is its own words."""


def _heading_words(inline: Any) -> str:
    """The words of a heading's inline token: text and code spans, without markup."""
    if inline is None or inline.type != "inline":
        return ""
    if not _INLINE_MARKUP.search(inline.content):
        # most headings are plain words: skip the inline parse (a quarter of parsing a
        # Markdown file of many short sections)
        return str(inline.content)
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


_LINE_BREAK = re.compile(r"\r\n?|\n")
"""A line break as markdown-it counts lines: CR LF, a lone CR, or LF."""


def _line_starts(text: str) -> list[int]:
    return [0, *(match.end() for match in _LINE_BREAK.finditer(text))]


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
    pieces = _packed_lines(body, budget)
    if not opening:
        return ["\n".join(piece) for piece in pieces]
    return [f"{opening}\n" + "\n".join(piece) + f"\n{closing}" for piece in pieces]


def _packed_lines(lines: list[str], budget: int) -> list[list[str]]:
    """The lines in order, in groups whose lines and newlines fit ``budget``; a longer line is cut first."""
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0
    for line in _cut_long_lines(lines, budget):
        if current and size + len(line) + 1 > budget:
            pieces.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        pieces.append(current)
    return pieces


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
    return ["\n".join([*header, *piece]) for piece in _packed_lines(rows, budget)]
