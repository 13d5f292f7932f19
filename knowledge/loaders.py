"""Read PDF and HTML files as text that the splitter and `knowledge.sections` understand.

Also what every reader shares (`Extracted`, `MissingExtra`, `pipe_table`,
`library_log`); `knowledge.formats` lists the readers by file type.

Each format needs an optional extra (`arcana-loop[pdf]`: pypdf, `arcana-loop[html]`:
beautifulsoup4 with the standard library's HTML parser), imported only when a
file of that type is read. Without it, reading such a file raises `MissingExtra`
(an `IngestError`), which names the extra: a directory walk skips the file with
that reason, a file named directly fails before anything is written. What the
parsing library logs or warns while it reads goes to this module's logger
(`library_log`), never to the terminal.

HTML becomes Markdown, read from the page's main content: the one `<main>` (or
`role="main"`) element, else the one `<article>`, else the body; inside it,
navigation, banners, footers, sidebars, comment threads and cookie notices are
dropped (by element, ARIA role, or a class naming them, or an id on a page that
does not mark its content; never a heading nor the element holding most of the
page's text: `_Page.furniture`), as are scripts, styles and HTML comments.
`h1`..`h6` become `#` headings, `<pre>` a fenced code block, a `<table>` a pipe
table, so the structure parser (`knowledge.structure`) reads the page as it reads
Markdown. Each element is visited a bounded number of times, however deep, so the
reading time grows with the page's size, not its shape (`read_html`).
Why not a general extractor: on real documentation pages (mdBook, rustdoc,
texinfo) trafilatura dropped most code blocks of an API page (202 of 552 fences
kept) and the blank lines inside code, and readability-lxml emptied every heading
that holds an anchor link; documentation generators mark their main content, so
the semantic elements find it (`knowledge/README.md` has the measurement).

A PDF is read one page at a time; the offsets where pages start are kept so each
chunk records its first and last page.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from arcana_loop.knowledge.errors import IngestError

logger = logging.getLogger(__name__)

_DROPPED_TAGS = ("script", "style", "noscript", "template", "head", "svg", "iframe", "object")
_BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "dd", "details", "div", "dl", "dt",
    "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav",
    "ol", "p", "section", "summary", "table", "tr", "ul",
)  # fmt: skip
_CELL_TAGS = ("td", "th")
_BOILERPLATE_TAGS = ("nav", "footer", "aside", "dialog", "button", "menu")
_BOILERPLATE_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "dialog"}
)
_BOILERPLATE_WORDS = frozenset(
    {
        "nav", "navbar", "navigation", "sidebar", "sidenav", "topnav", "breadcrumb",
        "breadcrumbs", "cookie", "cookies", "consent", "banner", "footer", "menu", "toc",
        "skip", "share", "social", "pagination", "pager", "headerlink", "copyright",
        "masthead", "topbar", "toolbar", "comments",
    }
)  # fmt: skip
"""Words that, as a part of an element's class or id, mark it as page furniture, not content.

A name's words are split at ``-``, ``_`` and case changes, and two neighbours also
count joined: ``top-bar``, ``sideBar`` and ``site_footer`` all name furniture."""
_HEADER_NAMES = frozenset({"header", "siteheader", "globalheader", "topheader", "mainheader"})
"""Whole class or id names (``-`` and ``_`` aside) of a site's header: not ``card-header``
or ``page-header``, which hold a title."""
_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"(?:page\s*)?\d{1,4}(?:\s*(?:/|of)\s*\d{1,4})?", re.IGNORECASE)
_SIGNATURE_KEYWORDS = frozenset(
    {"pub", "pub(crate)", "const", "async", "unsafe", "extern", '"C"', "fn", "def", "static"}
)
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_WHITESPACE = re.compile(r"\s+")
_FENCE = "```"
_BLANK_LINES = re.compile(r"\n{3,}")


class MissingExtra(IngestError):
    """A file needs an optional dependency that is not installed."""


def missing_extra(path: Path, kind: str, extra: str) -> MissingExtra:
    """The error for a `kind` file (``"PDF"``) read without its `extra` installed."""
    return MissingExtra(
        f"{path}: reading {kind} files needs the '{extra}' extra (pip install 'arcana-loop[{extra}]')"
    )


_READING = threading.Lock()
"""Held while a library reads a file with its log and warnings routed (`library_log`):
``warnings.catch_warnings`` changes process-wide state, which two at once would tangle."""


class _Forward(logging.Handler):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        logger.info("%s: %s: %s", self.path, record.name, record.getMessage())


@contextlib.contextmanager
def library_log(path: Path, library: str) -> Iterator[None]:
    """Log what `library` logs or warns while it reads `path` here, at INFO, naming the file.

    pypdf logs each repair it makes to a damaged file at WARNING, and openpyxl warns
    of workbook features it drops: with no logging configured, Python printed them
    to the terminal, unattributed, mid-ingest. The file is read all the same (one it
    cannot read is an `IngestError`), so they are notes about the file, for
    ``arcana-loop -v`` or an application's own log of `arcana_loop`. While one file
    is read so, a warning from another thread is logged here too.
    """
    source = logging.getLogger(library)
    handler = _Forward(path)
    with _READING, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        propagate = source.propagate
        source.addHandler(handler)
        source.propagate = False  # the library's own records stop at the forwarding handler
        try:
            yield
        finally:
            source.removeHandler(handler)
            source.propagate = propagate
            for note in caught:
                logger.info("%s: %s: %s", path, note.category.__name__, note.message)


def pipe_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cell texts as a Markdown pipe table: the first row is the header.

    A cell's line breaks and runs of spaces become one space and its ``|`` is
    escaped; empty rows are left out, short rows padded. ``""`` for no rows.
    """
    cells = [[" ".join(cell.split()).replace("|", "\\|") for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    width = max(len(r) for r in cells)
    lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in cells]
    return "\n".join([lines[0], "|" + "---|" * width, *lines[1:]])


@dataclass(frozen=True)
class Extracted:
    """Text read from a non-text file, with what the splitter should know about it."""

    text: str
    markdown: bool
    """Whether the text has Markdown headings (HTML headings are written as such)."""
    title: str | None = None
    """The document's own title (HTML `<title>`, PDF `/Title`), if it has one."""
    page_starts: tuple[int, ...] = ()
    """Offset in `text` where each page starts (PDF only; page 1 first)."""


Loader = Callable[[bytes, Path], Extracted]
"""A reader: the file's bytes and path in, its text out (`knowledge.formats` lists them)."""


def read_pdf(raw: bytes, path: Path) -> Extracted:
    """Extract the text of a PDF page by page.

    Raises:
        MissingExtra: if pypdf is not installed.
        IngestError: for a PDF that cannot be read (damaged, encrypted) or has no
            text (a scan without a text layer).
    """
    try:
        from pypdf import PdfReader
    except ImportError:
        raise missing_extra(path, "PDF", "pdf") from None
    try:
        with library_log(path, "pypdf"):
            reader = PdfReader(io.BytesIO(raw))
            if reader.is_encrypted:
                raise IngestError(f"{path}: the PDF is encrypted")
            pages = [clean_text(page.extract_text() or "") for page in reader.pages]
            title = _pdf_title(reader.metadata)
        pages = _without_running_lines(pages)
    except IngestError:
        raise
    except Exception as exc:  # pypdf raises assorted errors on damaged files
        raise IngestError(f"{path}: not a readable PDF ({type(exc).__name__}: {exc})") from None
    starts, parts, offset = [], [], 0
    for page in pages:
        starts.append(offset)
        parts.append(page)
        offset += len(page) + 2  # the "\n\n" joining pages
    text = "\n\n".join(parts)
    if not text.strip():
        raise IngestError(f"{path}: the PDF has no text layer (a scanned PDF needs OCR first)")
    return Extracted(text=text, markdown=False, title=title, page_starts=tuple(starts))


def _without_running_lines(pages: list[str]) -> list[str]:
    """Drop running headers and footers: a first or last line repeated on most pages, or a page number.

    Left in, "Capacity Report 2026 — page 3" would start every chunk of every page
    and pull each of them toward any question naming the report. A line counts as
    repeated when its text is, or when it differs from page to page only by numbers
    that step with the page ("Report - page 3", "Report - page 4"): a fact that
    happens to share its wording with the next page's ("berth 3 holds 300 tonnes")
    is kept.
    """
    if len(pages) < 3:
        return pages
    split = [_trimmed(page.split("\n")) for page in pages]

    def keys(line: str, index: int) -> set[str]:
        text = line.strip()
        stepped = _DIGITS.sub(lambda m: f"#{int(m.group()) - index}", text)
        return {text, stepped} if text else set()

    counts: Counter[str] = Counter()
    for index, lines in enumerate(split):
        if lines:
            counts.update(keys(lines[0], index) | keys(lines[-1], index))
    repeated = {key for key, n in counts.items() if n > len(pages) // 2}

    def running(line: str, index: int) -> bool:  # blank lines around a running line go with it
        return (
            not line.strip()
            or bool(keys(line, index) & repeated)
            or bool(_PAGE_NUMBER.fullmatch(line.strip()))
        )

    cleaned = []
    for index, lines in enumerate(split):
        while lines and running(lines[0], index):
            lines = lines[1:]
        while lines and running(lines[-1], index):
            lines = lines[:-1]
        cleaned.append("\n".join(lines))
    return cleaned


def _trimmed(lines: list[str]) -> list[str]:
    """A page's lines without the blank ones before and after its text."""
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


_PLACEHOLDER_TITLE = re.compile(r"(?:untitled|no title)(?:[\s-]*(?:document|\d+))?", re.IGNORECASE)
"""A title PDF writers fill in when the author gave none (reportlab's "untitled"): no title at all."""


def _pdf_title(info: Any) -> str | None:
    """A PDF's own title; ``None`` for an empty or placeholder one (the file's name titles it then)."""
    title = getattr(info, "title", None) if info is not None else None
    cleaned = clean_text(title).strip() if isinstance(title, str) else ""
    return cleaned if cleaned and not _PLACEHOLDER_TITLE.fullmatch(cleaned) else None


def read_html(raw: bytes, path: Path) -> Extracted:
    """Extract the main content of an HTML page as Markdown.

    The parsed page is read in passes that visit each element once, with a stack in
    place of recursion and without editing the tree, so the work grows with the
    page's size whatever its shape: there is no depth limit, and a page nested
    40,000 elements deep is read whole, with its structure, in about a second of CPU.
    (Editing the tree cost a walk over an element's ancestors or siblings at each
    edit: such a page, or one of 40,000 paragraphs side by side, took minutes.)

    Raises:
        MissingExtra: if beautifulsoup4 is not installed.
        IngestError: for a page without text.
    """
    try:
        soup = _parse(raw)
    except ImportError:
        raise missing_extra(path, "HTML", "html") from None
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    root = _main_content(soup)
    in_main = root.find_parent(_MAIN_TAGS) is not None
    page = _Page(root, in_main)
    document = _Document(page, collapse=root.find_parent("pre") is None)
    _walk(root, in_main, document, page)
    text = _tidy("".join(document.pieces))
    if not text.strip():
        raise IngestError(f"{path}: the HTML page has no text")
    return Extracted(text=text, markdown=True, title=clean_text(title).strip() or None)


_HEADING_LEVELS = {f"h{level}": level for level in range(1, 7)}
_MAIN_TAGS = ("main", "article")
_VOID_BREAKS = {"br": "\n", "hr": "\n\n"}
"""What a void element is in the content (a rule is a block of its own)."""


def _parse(raw: bytes) -> Any:
    """The page's tree: the standard library's HTML parser through BeautifulSoup.

    A void element (``<br>``, ``<img>``, ``<wbr>``...) is parsed as holding what follows
    it, up to its parent's end. As void elements, bs4's html.parser builder keeps
    each one in a list that every end tag searches: void elements times end tags, 11 s
    of a rustdoc index page of 1.9 MB with 4,241 ``<wbr>``. `_walk` reads such an
    element as itself followed by what it holds, so the text is the same.

    Raises:
        ImportError: if beautifulsoup4 is not installed.
    """
    from bs4 import BeautifulSoup

    builder = _html_parser_builder()()
    builder.empty_element_tags = set()
    # bytes in: BeautifulSoup finds the encoding from the BOM, the <meta> charset or the content
    return BeautifulSoup(raw, builder=builder)


def _html_parser_builder() -> type[Any]:
    """bs4's tree builder over the standard library's parser, as ``BeautifulSoup(raw, "html.parser")`` finds it."""
    from bs4.builder import builder_registry

    found = builder_registry.lookup("html.parser")
    if found is None:  # bs4 registers it on import, the one builder with no other dependency
        raise ImportError("beautifulsoup4 has no html.parser tree builder")
    return found


@functools.cache
def _void_tags() -> frozenset[str]:
    """The elements bs4 would parse as void (see `_parse`)."""
    return frozenset(_html_parser_builder()().empty_element_tags or ())


@functools.cache
def _node_types() -> tuple[type[Any], type[Any], type[Any]]:
    """bs4's element, text and CDATA classes (imported once: an import in a loop cost a tenth of a read)."""
    from bs4.element import CData, NavigableString, Tag

    return Tag, NavigableString, CData


class _Visitor(Protocol):
    """What one pass of `_walk` does with the elements and strings it meets."""

    def open(self, tag: Any, in_main: bool) -> bool:
        """Meet an element; return whether to go into it (`False`: the visitor read it whole)."""

    def close(self, tag: Any) -> None:
        """Leave an element that `open` went into."""

    def text(self, string: str) -> None:
        """Meet a string of text (comments, doctypes and the like are never met)."""


def _walk(tag: Any, in_main: bool, visitor: _Visitor, page: _Page | None) -> None:
    """Visit what `tag` holds in document order: each element once, with a stack, not recursion.

    Scripts, styles and the other `_DROPPED_TAGS` are never visited, nor, given the
    `page` being read, its furniture (`_Page.furniture`). `in_main`: whether `tag` is
    inside a `<main>` or an `<article>`.
    """
    tag_type, text_type, cdata_type = _node_types()
    voids = _void_tags()
    stack: list[tuple[Iterator[Any], Any, bool]] = [
        (iter(tag.contents), None, in_main or tag.name in _MAIN_TAGS)
    ]
    while stack:
        children, parent, inside = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if parent is not None:
                visitor.close(parent)
        elif isinstance(child, tag_type):
            if child.name in voids:
                # it holds what follows it (`_parse`): its own part, then that, never dropped
                if page is None or not page.furniture(child, inside):
                    visitor.open(child, inside)
                stack.append((iter(child.contents), None, inside))
                continue
            if child.name in _DROPPED_TAGS or (page is not None and page.furniture(child, inside)):
                continue
            if visitor.open(child, inside):
                stack.append((iter(child.contents), child, inside or child.name in _MAIN_TAGS))
        elif type(child) is text_type or type(child) is cdata_type:  # what get_text reads
            visitor.text(child)


@dataclass
class _Sizes:
    """One pass over the content: the characters of text each element holds, and which hold a heading."""

    chars: dict[int, int] = field(default_factory=dict)
    """By `id()` of the element."""
    headed: set[int] = field(default_factory=set)
    open_elements: list[list[int]] = field(default_factory=lambda: [[0, 0, 0]])
    """`[id, characters, holds a heading]` of each element open, the content's own first."""

    def open(self, tag: Any, in_main: bool) -> bool:
        if tag.name not in _void_tags():  # a void element's text is its parent's (`_parse`)
            self.open_elements.append([id(tag), 0, int(tag.name in _HEADING_LEVELS)])
        return True

    def close(self, tag: Any) -> None:
        key, chars, headed = self.open_elements.pop()
        self.chars[key] = chars
        if headed:
            self.headed.add(key)
        parent = self.open_elements[-1]
        parent[1] += chars
        parent[2] |= headed

    def text(self, string: str) -> None:
        self.open_elements[-1][1] += len(string.strip())


class _Page:
    """What decides which elements of a page's content are furniture (`furniture`)."""

    def __init__(self, root: Any, in_main: bool) -> None:
        self.sizes = _Sizes()
        _walk(root, in_main, self.sizes, None)
        self.total = self.sizes.open_elements[0][1]
        """Characters of text in the whole content."""
        self.marked = in_main or root.name in _MAIN_TAGS or root.get("role") == "main"
        """Whether the page marks its content (`<main>`, `<article>`, ``role="main"``)."""

    def furniture(self, tag: Any, in_main: bool) -> bool:
        """Whether an element is navigation, a header or footer, a sidebar, comments or a notice.

        By element or ARIA role, always. By a class or id naming it, or as a `<form>`
        (ASP.NET pages wrap the whole page in one), only when it holds at most half
        of the content's text: a guess from a name never drops the page itself.
        """
        if tag.name in _BOILERPLATE_TAGS:
            return True
        if str(tag.get("role") or "").lower() in _BOILERPLATE_ROLES:
            return True
        if tag.name == "header" and not in_main:  # a site header; an article's own holds its title
            return True
        guessed = tag.name == "form" or self._named(tag, in_main)
        return guessed and self.sizes.chars.get(id(tag), 0) * 2 <= self.total

    def _named(self, tag: Any, in_main: bool) -> bool:
        """Whether a class, or on a page that does not mark its content an id, names furniture.

        A heading is never judged by its names. Within marked content, ids are
        generated from titles and names (Sphinx's ``<section id="cookies">``,
        rustdoc's ``id="method.skip"``, mdBook's ``<h2 id="comments">``): only a page
        without one is laid out by hand-named ids (``<div id="comments">``).
        """
        if tag.name in _HEADING_LEVELS:
            return False
        # a site header: a block outside the article, unless it holds a heading (page titles do)
        header = tag.name in ("div", "section") and not in_main and id(tag) not in self.sizes.headed
        names = [*(tag.get("class") or ())]
        if not self.marked and tag.get("id"):
            names.append(str(tag.get("id")))
        return any(_names_furniture(name, header=header) for name in names)


def _names_furniture(name: str, *, header: bool) -> bool:
    """Whether a class or id names furniture by its words (`_BOILERPLATE_WORDS`), or a site header."""
    words = [word.lower() for word in _NAME_WORD.findall(name)]
    joined = map(str.__add__, words, words[1:])
    if not _BOILERPLATE_WORDS.isdisjoint([*words, *joined]):
        return True
    return header and "".join(words) in _HEADER_NAMES


class _Candidates:
    """The elements that may hold a page's content (`_main_content`)."""

    def __init__(self) -> None:
        self.main: list[Any] = []
        self.article: list[Any] = []
        self.body: Any = None

    def open(self, tag: Any, in_main: bool) -> bool:
        if tag.name == "main" or tag.get("role") == "main":
            self.main.append(tag)
        elif tag.name == "article":
            self.article.append(tag)
        if tag.name == "body" and self.body is None:
            self.body = tag
        return True

    def close(self, tag: Any) -> None:
        pass

    def text(self, string: str) -> None:
        pass


def _main_content(soup: Any) -> Any:
    """The element holding the page's content: its one `<main>`, else its one `<article>`, else the body."""
    found = _Candidates()
    _walk(soup, False, found, None)
    for candidates in (found.main, found.article):
        if len(candidates) == 1:
            return candidates[0]
    return found.body or soup


class _Document:
    """The content as Markdown: headings as ``#`` lines, `<pre>` fenced, tables as pipe tables."""

    def __init__(self, page: _Page, *, collapse: bool) -> None:
        self.page = page
        self.pieces: list[str] = []
        self.collapse = collapse
        """Whether runs of whitespace are one space, as a browser shows text outside `<pre>`."""

    def open(self, tag: Any, in_main: bool) -> bool:
        name = tag.name
        if name in _VOID_BREAKS:
            self.pieces.append(_VOID_BREAKS[name])
        elif name == "table":
            self.pieces.append(f"\n\n{_table_markdown(tag, in_main, self.page)}\n\n")
        elif name in _HEADING_LEVELS:
            self.pieces.append(_heading_markdown(tag, in_main, self.page))
        elif name == "pre":
            # fenced, so the structure parser keeps code whole and the tidy-up keeps its indentation
            code = _PreText(self.page)
            _walk(tag, in_main, code, self.page)
            self.pieces.append(f"\n\n{_FENCE}\n{''.join(code.pieces).strip(chr(10))}\n{_FENCE}\n\n")
        else:
            if name == "li":
                self.pieces.append("\n- ")
            elif name in _BLOCK_TAGS:
                self.pieces.append("\n")
            return True
        return False

    def close(self, tag: Any) -> None:
        # list items end a line each, without a blank line between them
        if tag.name in _BLOCK_TAGS and tag.name != "li":
            self.pieces.append("\n")

    def text(self, string: str) -> None:
        # Source line breaks inside a paragraph are layout, not content: left in, they
        # would cut sentences across lines. (CDATA is kept as written.)
        if self.collapse and type(string) is _node_types()[1]:
            string = _WHITESPACE.sub(" ", string)
        self.pieces.append(string)


class _PreText:
    """The text of a `<pre>`: its strings as written, a line break for `<br>`; tables and headings as in the content."""

    def __init__(self, page: _Page) -> None:
        self.page = page
        self.pieces: list[str] = []

    def open(self, tag: Any, in_main: bool) -> bool:
        if tag.name == "table":
            self.pieces.append(f"\n\n{_table_markdown(tag, in_main, self.page)}\n\n")
        elif tag.name in _HEADING_LEVELS:
            self.pieces.append(_heading_markdown(tag, in_main, self.page))
        elif tag.name == "br":
            self.pieces.append("\n")
        else:
            return True  # a <pre> inside this one is more of its text
        return False

    def close(self, tag: Any) -> None:
        pass

    def text(self, string: str) -> None:
        self.pieces.append(string)


class _HeadingText:
    """The strings of a heading (a table in it as a pipe table), and of the first `<code>` in it."""

    def __init__(self, page: _Page) -> None:
        self.page = page
        self.pieces: list[str] = []
        self.code: Any = None
        self.code_span = (0, 0)

    def open(self, tag: Any, in_main: bool) -> bool:
        if tag.name == "table":
            self.pieces.append(f"\n\n{_table_markdown(tag, in_main, self.page)}\n\n")
            return False
        if tag.name == "code" and self.code is None:
            self.code, self.code_span = tag, (len(self.pieces), len(self.pieces))
        return True

    def close(self, tag: Any) -> None:
        if tag is self.code:
            self.code_span = (self.code_span[0], len(self.pieces))

    def text(self, string: str) -> None:
        self.pieces.append(string)

    def is_code(self, tag: Any) -> bool:
        """An API generator's signature heading (rustdoc's `code-header`, a heading that is all `<code>`)."""
        if any("code" in name for name in tag.get("class", [])):
            return True
        start, end = self.code_span
        return self.code is not None and _stripped(self.pieces[start:end]) == _stripped(self.pieces)


def _stripped(pieces: list[str]) -> str:
    return "".join(piece.strip() for piece in pieces)


def _heading_markdown(tag: Any, in_main: bool, page: _Page) -> str:
    """A heading element as a Markdown heading line (a signature heading as the name it declares)."""
    words = _HeadingText(page)
    _walk(tag, in_main, words, page)
    heading = " ".join(" ".join(words.pieces).split())
    if words.is_code(tag):
        heading = _code_heading_name(heading)
    return f"\n\n{'#' * _HEADING_LEVELS[tag.name]} {heading}\n\n" if heading else "\n"


def _code_heading_name(signature: str) -> str:
    """What a signature heading names: ``pub fn push(&mut self, value: T)`` gives ``push``.

    A section path holds headings, not code: generic parameters, the argument
    list, `where` clauses and leading keywords are dropped.
    """
    text = _without_generics(signature.split(" where ")[0])
    text = text.split("(")[0]
    words = [w for w in text.replace("::", " ").split() if w not in _SIGNATURE_KEYWORDS]
    name = " ".join(words).strip(" :;,=&*")
    return name or signature


def _without_generics(text: str) -> str:
    """The text without its ``<...>`` groups (nested ones included) and the whitespace before each.

    One pass, pairing each ``>`` with the nearest open ``<``: removing the innermost
    groups again until none was left took a pass per level of nesting. A ``<`` never
    closed, or a ``>`` never opened, stays.
    """
    cut = [0] * (len(text) + 1)  # +1 where a removed stretch starts, -1 after it ends
    opened: list[int] = []  # where each open group's stretch starts (its leading whitespace)
    for index, char in enumerate(text):
        if char == "<":
            start = index
            while start > 0 and text[start - 1].isspace():
                start -= 1
            opened.append(start)
        elif char == ">" and opened:
            cut[opened.pop()] += 1
            cut[index + 1] -= 1
    kept, depth = [], 0
    for char, change in zip(text, cut, strict=False):
        depth += change
        if depth == 0:
            kept.append(char)
    return "".join(kept)


class _TableRows:
    """The rows of a table, each a list of its cells' words.

    A row is a `<tr>` of this table and a cell a `<td>` or `<th>` in one. A row or cell
    opened inside another (their end tags are optional, and the parser nests what is
    left open) starts the next one; a table inside a cell is more text of that cell.
    """

    def __init__(self) -> None:
        self.rows: list[list[list[str]]] = []
        self.nested = 0
        """Tables open inside this one."""
        self.open_cells: set[int] = set()
        self.words: list[str] = []
        """The words of the cell opened last."""

    def open(self, tag: Any, in_main: bool) -> bool:
        if tag.name == "table":
            self.nested += 1
        elif self.nested == 0 and tag.name == "tr":
            self.rows.append([])
        elif self.nested == 0 and tag.name in _CELL_TAGS and self.rows:
            self.words = []
            self.rows[-1].append(self.words)
            self.open_cells.add(id(tag))
        return True

    def close(self, tag: Any) -> None:
        if tag.name == "table":
            self.nested -= 1
        else:
            self.open_cells.discard(id(tag))

    def text(self, string: str) -> None:
        if self.open_cells:
            self.words.extend(string.split())


def _table_markdown(table: Any, in_main: bool, page: _Page) -> str:
    """A `<table>` as a Markdown pipe table: the first row is the header."""
    found = _TableRows()
    _walk(table, in_main, found, page)
    return pipe_table([[" ".join(words) for words in row] for row in found.rows])


def _tidy(text: str) -> str:
    """Strip the lines and collapse blank runs, leaving fenced code as it was."""
    lines, in_code = [], False
    for line in text.split("\n"):
        if line.strip() == _FENCE:
            in_code = not in_code
            lines.append(_FENCE)
        else:
            lines.append(line.rstrip() if in_code else _SPACES.sub(" ", line).strip())
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip() + "\n"


def clean_text(text: str) -> str:
    """Drop what PostgreSQL text cannot hold: NUL characters and lone surrogates."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
