"""Read PDF and HTML files as text that the splitter and `knowledge.sections` understand.

Each format needs an optional extra (`arcana-loop[pdf]`: pypdf, `arcana-loop[html]`:
beautifulsoup4 with the standard library's HTML parser), imported only when a
file of that type is read. Without it, reading such a file raises `MissingExtra`
(an `IngestError`), which names the extra: a directory walk skips the file with
that reason, a file named directly fails before anything is written.

HTML becomes text, not markup: scripts, styles and the head are dropped, block
elements end lines, and `h1`..`h6` become Markdown `#` headings, so the section
path of each chunk comes from the page's own headings. A PDF is read one page at
a time; the offsets where pages start are kept so each chunk records its page.
"""

from __future__ import annotations

import io
import re
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
        pages = [_clean(page.extract_text() or "") for page in reader.pages]
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


def _pdf_title(info: Any) -> str | None:
    title = getattr(info, "title", None) if info is not None else None
    return _clean(title).strip() or None if isinstance(title, str) else None


def read_html(raw: bytes, path: Path) -> Extracted:
    """Extract the text of an HTML page, its headings as Markdown headings.

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
    _collapse_whitespace(soup)
    for tag in soup.find_all(["h1", "h2", "h3", "h4", "h5", "h6"]):
        heading = " ".join(tag.get_text(" ").split())
        tag.replace_with(f"\n\n{'#' * int(tag.name[1])} {heading}\n\n" if heading else "\n")
    for tag in soup.find_all("br"):
        tag.replace_with("\n")
    for tag in soup.find_all(_CELL_TAGS):
        tag.insert_after(" ")
    for tag in soup.find_all("pre"):
        # fenced, so the Markdown splitter keeps code whole and the tidy-up keeps its indentation
        tag.replace_with(f"\n\n{_FENCE}\n{tag.get_text().strip(chr(10))}\n{_FENCE}\n\n")
    for tag in soup.find_all(_BLOCK_TAGS):
        if tag.name == "li":
            tag.insert(0, "- ")
        else:  # list items end a line each, without a blank line between them
            tag.insert_after("\n")
        tag.insert_before("\n")
    text = _tidy(soup.get_text())
    if not text.strip():
        raise IngestError(f"{path}: the HTML page has no text")
    return Extracted(text=text, markdown=True, title=_clean(title).strip() or None)


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
