"""Read PDF and HTML files as text that the splitter and `knowledge.sections` understand.

Each format needs an optional extra (`arcana-loop[pdf]`: pypdf, `arcana-loop[html]`:
beautifulsoup4 with the standard library's HTML parser), imported only when a
file of that type is read. Without it, reading such a file raises `MissingExtra`
(an `IngestError`), which names the extra: a directory walk skips the file with
that reason, a file named directly fails before anything is written.

HTML becomes Markdown, read from the page's main content: the one `<main>` (or
`role="main"`) element, else the one `<article>`, else the body; inside it,
navigation, banners, footers, sidebars and cookie notices are dropped (by element,
ARIA role, or a class or id naming them), as are scripts and styles. `h1`..`h6`
become `#` headings, `<pre>` a fenced code block, a `<table>` a pipe table, so the
structure parser (`knowledge.structure`) reads the page as it reads Markdown.
Why not a general extractor: on real documentation pages (mdBook, rustdoc,
texinfo) trafilatura dropped most code blocks of an API page (202 of 552 fences
kept) and the blank lines inside code, and readability-lxml emptied every heading
that holds an anchor link; documentation generators mark their main content, so
the semantic elements find it (`knowledge/README.md` has the measurement).

A PDF is read one page at a time; the offsets where pages start are kept so each
chunk records its first and last page.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arcana_loop.knowledge.errors import IngestError

PDF_SUFFIXES = frozenset({".pdf"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
_DROPPED_TAGS = ("script", "style", "noscript", "template", "head", "svg", "iframe", "object")
_BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "dd", "details", "div", "dl", "dt",
    "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav",
    "ol", "p", "section", "summary", "table", "tr", "ul",
)  # fmt: skip
_CELL_TAGS = ("td", "th")
_BOILERPLATE_TAGS = ("nav", "footer", "aside", "dialog", "button", "form", "menu")
_BOILERPLATE_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "dialog"}
)
_BOILERPLATE_WORDS = frozenset(
    {
        "nav", "navbar", "navigation", "sidebar", "breadcrumb", "breadcrumbs", "cookie",
        "cookies", "consent", "banner", "footer", "menu", "toc", "skip", "share", "social",
        "pagination", "pager", "headerlink", "copyright", "masthead", "topbar",
    }
)  # fmt: skip
"""Words that, as a part of an element's class or id, mark it as page furniture, not content."""
_CLASS_WORD = re.compile(r"[a-z]+")
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"(?:page\s*)?\d{1,4}(?:\s*(?:/|of)\s*\d{1,4})?", re.IGNORECASE)
_GENERICS = re.compile(r"\s*<[^<>]*>")
_SIGNATURE_KEYWORDS = frozenset(
    {"pub", "pub(crate)", "const", "async", "unsafe", "extern", '"C"', "fn", "def", "static"}
)
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_WHITESPACE = re.compile(r"\s+")
_FENCE = "```"
_BLANK_LINES = re.compile(r"\n{3,}")


class MissingExtra(IngestError):
    """A file needs an optional dependency that is not installed."""


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


def loader_for(path: Path) -> Loader | None:
    """Return the loader for `path`'s suffix, or `None` for a file read as plain text."""
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        return read_pdf
    if suffix in HTML_SUFFIXES:
        return read_html
    return None


def _missing(path: Path, kind: str, extra: str) -> MissingExtra:
    return MissingExtra(
        f"{path}: reading {kind} files needs the '{extra}' extra (pip install 'arcana-loop[{extra}]')"
    )


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
        raise _missing(path, "PDF", "pdf") from None
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted:
            raise IngestError(f"{path}: the PDF is encrypted")
        pages = _without_running_lines([_clean(page.extract_text() or "") for page in reader.pages])
        title = _pdf_title(reader.metadata)
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


def _pdf_title(info: Any) -> str | None:
    title = getattr(info, "title", None) if info is not None else None
    return _clean(title).strip() or None if isinstance(title, str) else None


def read_html(raw: bytes, path: Path) -> Extracted:
    """Extract the main content of an HTML page as Markdown.

    Raises:
        MissingExtra: if beautifulsoup4 is not installed.
        IngestError: for a page without text.
    """
    try:
        from bs4 import BeautifulSoup
    except ImportError:
        raise _missing(path, "HTML", "html") from None
    # bytes in: BeautifulSoup finds the encoding from the BOM, the <meta> charset or the content
    soup = BeautifulSoup(raw, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for tag in soup.find_all(_DROPPED_TAGS):
        tag.decompose()
    root = _main_content(soup)
    _drop_boilerplate(root)
    _collapse_whitespace(root)
    for tag in root.find_all("table"):
        tag.replace_with(f"\n\n{_pipe_table(tag)}\n\n")
    for tag in root.find_all(["h1", "h2", "h3", "h4", "h5", "h6"]):
        heading = " ".join(tag.get_text(" ").split())
        if _is_code_heading(tag):
            heading = _code_heading_name(heading)
        tag.replace_with(f"\n\n{'#' * int(tag.name[1])} {heading}\n\n" if heading else "\n")
    for tag in root.find_all("br"):
        tag.replace_with("\n")
    for tag in root.find_all("pre"):
        # fenced, so the structure parser keeps code whole and the tidy-up keeps its indentation
        tag.replace_with(f"\n\n{_FENCE}\n{tag.get_text().strip(chr(10))}\n{_FENCE}\n\n")
    for tag in root.find_all(_BLOCK_TAGS):
        if tag.name == "li":
            tag.insert(0, "- ")
        else:  # list items end a line each, without a blank line between them
            tag.insert_after("\n")
        tag.insert_before("\n")
    text = _tidy(root.get_text())
    if not text.strip():
        raise IngestError(f"{path}: the HTML page has no text")
    return Extracted(text=text, markdown=True, title=_clean(title).strip() or None)


def _is_code_heading(tag: Any) -> bool:
    """An API generator's signature heading (rustdoc's `code-header`, a heading that is all `<code>`)."""
    if any("code" in name for name in tag.get("class", [])):
        return True
    code = tag.find("code")
    return code is not None and code.get_text(strip=True) == tag.get_text(strip=True)


def _code_heading_name(signature: str) -> str:
    """What a signature heading names: ``pub fn push(&mut self, value: T)`` gives ``push``.

    A section path holds headings, not code: generic parameters, the argument
    list, `where` clauses and leading keywords are dropped.
    """
    text = signature.split(" where ")[0]
    while (stripped := _GENERICS.sub("", text)) != text:
        text = stripped
    text = text.split("(")[0]
    words = [w for w in text.replace("::", " ").split() if w not in _SIGNATURE_KEYWORDS]
    name = " ".join(words).strip(" :;,=&*")
    return name or signature


def _main_content(soup: Any) -> Any:
    """The element holding the page's content: its one `<main>`, else its one `<article>`, else the body."""
    for candidates in (
        soup.find_all("main") + soup.find_all(attrs={"role": "main"}),
        soup.find_all("article"),
    ):
        unique = {id(tag): tag for tag in candidates}
        if len(unique) == 1:
            return next(iter(unique.values()))
    return soup.body or soup


def _drop_boilerplate(root: Any) -> None:
    """Remove navigation, footers, sidebars and notices: by element, ARIA role or class/id words."""
    doomed = list(root.find_all(_BOILERPLATE_TAGS))
    for tag in root.find_all(True):
        role = str(tag.get("role") or "").lower()
        names = " ".join([*tag.get("class", []), str(tag.get("id") or "")]).lower()
        if role in _BOILERPLATE_ROLES or _BOILERPLATE_WORDS & set(_CLASS_WORD.findall(names)):
            doomed.append(tag)
        elif tag.name == "header" and tag.find_parent(["main", "article"]) is None:
            doomed.append(tag)  # a site header; an article's own header holds its title
    for tag in doomed:
        if not tag.decomposed:
            tag.decompose()


def _pipe_table(table: Any) -> str:
    """A `<table>` as a Markdown pipe table: the first row is the header."""
    rows = []
    for row in table.find_all("tr"):
        cells = [
            " ".join(c.get_text(" ").split()).replace("|", "\\|") for c in row.find_all(_CELL_TAGS)
        ]
        if any(cells):
            rows.append(cells)
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
    return "\n".join([lines[0], "|" + "---|" * width, *lines[1:]])


def _collapse_whitespace(soup: Any) -> None:
    """Make each run of whitespace in text outside `<pre>` one space, as a browser shows it.

    Source line breaks inside a paragraph are layout, not content: left in, they
    would cut sentences across lines.
    """
    from bs4.element import NavigableString

    for string in soup.find_all(string=True):
        # only plain text: a comment or doctype rewritten as a string would become content
        if type(string) is NavigableString and string.find_parent("pre") is None:
            collapsed = _WHITESPACE.sub(" ", str(string))
            if collapsed != string:
                string.replace_with(collapsed)


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


def _clean(text: str) -> str:
    """Drop what PostgreSQL text cannot hold: NUL characters and lone surrogates."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
