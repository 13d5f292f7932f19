"""Turn ingest inputs into documents and chunks.

How `source` is read: a `pathlib.Path` (any `os.PathLike`) is always a path; a
`str` is a path when it names an existing file or directory, and text otherwise.
Text gets the source name `text:<sha256 prefix>` unless `name=` is given, so
re-ingesting the same text is skipped and, with a `name`, changed text replaces it.

HTML, PDF, Word and Excel files are read by their readers (optional extras;
`knowledge.formats` lists every type); every other file must be UTF-8 text, and a
binary one is refused with the list of supported types. LangChain `Document`s are
ingested as text named by their `source` metadata (`documents_from_langchain`).

Chunking reads the document's structure first (`knowledge.structure`): Markdown
(`.md`/`.markdown` files, HTML pages and Office files, which are converted to
Markdown, and text with Markdown headings) through a CommonMark parser, reStructuredText
(`.rst`/`.rest`) through docutils, anything else as paragraphs. Chunks are then
filled with whole paragraphs, lists, code blocks and tables of one section; only
a block longer than a chunk is split (code at lines, tables at rows, prose by the
recursive character splitter). A document whose metadata gives its `section` is
placed whole in that section, and its text is not read for headings.
Defaults are 800 characters with 100 overlap (between the pieces of one long
paragraph): WordLlama averages token vectors, so chunks of a few paragraphs keep a
focused embedding, and the overlap keeps a sentence cut at a boundary findable
from either side.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import re
import stat
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, overload

import numpy as np

from arcana_loop.knowledge.errors import IngestError, UnsupportedFormat
from arcana_loop.knowledge.formats import Syntax, format_for, is_known_suffix, unsupported
from arcana_loop.knowledge.names import check_text
from arcana_loop.knowledge.placed import NO_START, Placing, shifted_rows
from arcana_loop.knowledge.sections import (
    context_line,
    document_title,
    front_matter,
    markdown_title,
    searchable_text,
)
from arcana_loop.knowledge.structure import (
    KEY_BYTES,
    Block,
    MarkdownMap,
    PackedMarkdown,
    Piece,
    heading_words,
    pack,
    pack_markdown,
    parse_markdown,
    plain_blocks,
    rst_blocks,
)

DEFAULT_CHUNK_SIZE = 800
DEFAULT_CHUNK_OVERLAP = 100
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
STRUCTURE_VERSION = "blocks-3"
"""Names how documents are read and chunked; a change re-chunks every document on its next ingest."""
_MAX_PATH_CHARS = 4096
_HEADING = re.compile(r"^#{1,6} \S", re.MULTILINE)
CHUNK_ID_CHARS = 32
"""Every chunk id is this many hex characters (the writer's binary COPY relies on it)."""
_DOC_NAMESPACE = uuid.UUID("5b0f8a52-3c1e-4d0e-9a51-6b6e6f776c65")
EMPTY_FILE = "file is empty"
"""The reason an empty file is refused, or skipped by a directory walk."""


@dataclass
class SourceDoc:
    """A document read from one input, not yet split."""

    source: str
    text: str
    syntax: Syntax
    """How the text is marked up, which decides how its structure is read."""
    metadata: dict[str, Any]
    page_starts: tuple[int, ...] = ()
    """Offset in `text` where each page starts, for formats with pages (PDF)."""
    utf8: InitVar[bytes | None] = None
    """The text as UTF-8, when the caller has it (a file's bytes): hashed instead of encoding it again."""
    content_hash: str = field(init=False)

    def __post_init__(self, utf8: bytes | None) -> None:
        """Hash the content, which decides skip versus replace.

        The hash covers how the text is read (`STRUCTURE_VERSION`, the syntax) as
        well as the text: a document stored by an earlier reader is chunked again
        on its next ingest instead of being skipped as unchanged.
        """
        # hashed in two parts: the text is not copied into one string with its prefix first
        digest = hashlib.sha256(f"{STRUCTURE_VERSION}\x00{self.syntax}\x00".encode())
        digest.update(self.text.encode("utf-8") if utf8 is None else utf8)
        self.content_hash = digest.hexdigest()


@dataclass
class ChunkRow:
    """One chunk ready to be embedded and written."""

    id: str
    position: int
    text: str
    metadata: dict[str, Any]
    context: str = ""
    """The document title and section path the chunk is searched by (`knowledge.sections`)."""

    @property
    def searchable(self) -> str:
        """The text embedded and indexed for this chunk: its context, then its text."""
        return searchable_text(self.context, self.text)


def content_hash(text: str) -> str:
    """Return the sha256 hex digest of `text`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def document_id(collection: str, source: str) -> str:
    """Return the stable id of the document `source` in `collection` (kept across replaces)."""
    return str(uuid.uuid5(_DOC_NAMESPACE, f"{collection}\x00{source}"))


def chunk_id(doc_id: str, searchable: str, occurrence: int = 0) -> str:
    """Return a chunk's id, from its document and the text it is searched by (context and text).

    Not from its position: a chunk an edit elsewhere in the document moved keeps its
    id, so a re-ingest reuses its row and embedding, and an earlier answer citing it
    still resolves. ``occurrence`` tells apart identical chunks of one document.
    """
    key = f"{doc_id}\x00{occurrence}\x00{searchable}"
    return hashlib.sha256(key.encode()).hexdigest()[:CHUNK_ID_CHARS]


def is_path_source(source: str | os.PathLike[str]) -> bool:
    """Tell a path from text: `PathLike` is a path; a `str` is one if it exists or looks like one.

    A one-line string that ends with a path separator (``docs/``), or that holds no
    whitespace and starts like a path (``/``, ``./``, ``../``, ``~``), holds a separator
    (``docs/a.md``) or ends with an extension ingest reads (``notes.md``, ``report.pdf``),
    is a path even when nothing is there, so a mistyped path is an error, not a document
    holding its name. (Text of one such word is ingested as a LangChain `Document`.)
    """
    if isinstance(source, os.PathLike):
        return True
    # a blank string names no file: Path("") is the working directory, which exists
    if not source.strip() or "\n" in source or "\x00" in source or len(source) > _MAX_PATH_CHARS:
        return False
    if _looks_like_a_path(source):
        return True
    try:
        return Path(source).expanduser().exists()
    except OSError:  # e.g. a name too long for the filesystem
        return False


def _looks_like_a_path(text: str) -> bool:
    if text.endswith(("/", os.sep)):
        return True
    if any(c.isspace() for c in text):
        return False
    # "/", "./", "../" hold a separator: only "~" starts a path without one
    return (
        text.startswith("~")
        or "/" in text
        or os.sep in text
        or is_known_suffix(PurePosixPath(text).suffix)
    )


def text_document(text: str, *, name: str | None, metadata: dict[str, Any]) -> SourceDoc:
    """Build a document from a text string.

    Raises:
        IngestError: if the text is empty, blank or contains NUL characters.
    """
    if not text.strip():
        raise IngestError("cannot ingest empty text")
    # PostgreSQL text cannot hold NUL nor UTF-8 a lone surrogate; failing here
    # keeps the write from starting
    _check_stored_text(text, "ingest text")
    if name is not None:
        _check_stored_text(name, "document name")
    syntax: Syntax = "markdown" if _HEADING.search(text) else "plain"
    doc = SourceDoc(source="", text=text, syntax=syntax, metadata={})
    doc.source = name or f"text:{content_hash(text)[:16]}"
    doc.metadata = {**metadata, "source": doc.source}
    return doc


def is_documents(source: object) -> bool:
    """Tell LangChain input apart: a `Document`, or a list or tuple of nothing but `Document`s."""
    from langchain_core.documents import Document

    if isinstance(source, Document):
        return True
    return isinstance(source, list | tuple) and all(isinstance(d, Document) for d in source)


def langchain_documents(
    source: Any,
    *,
    name: str | None,
    metadata: dict[str, Any],
    check_metadata: Callable[[Any], dict[str, Any]],
) -> list[SourceDoc]:
    """Turn LangChain `Document`s into documents, each named by its `source` metadata.

    A `Document` without a `source` is named `text:<sha256 prefix>` of its text,
    as text input is. Several `Document`s of one call sharing a source (the pages
    a PDF loader returns, say) become `source#1`, `source#2`, ... in the order
    given, so each is stored and re-ingesting the same list skips them all.
    `metadata` is laid under each `Document`'s own metadata.

    Raises:
        IngestError: for a `Document` whose text is empty or cannot be stored.
        TypeError, ValueError: for metadata `check_metadata` refuses, or `name`
            given with more than one `Document`.
    """
    from langchain_core.documents import Document

    docs: list[Document] = [source] if isinstance(source, Document) else list(source)
    if name is not None and len(docs) != 1:
        raise ValueError(
            f"name= names a single document, got {len(docs)} Documents: each is named by its metadata 'source'"
        )
    names = [name or _document_source(doc) for doc in docs]
    shared = Counter(n for n in names if n is not None)
    seen: Counter[str] = Counter()
    out = []
    for index, (doc, doc_name) in enumerate(zip(docs, names, strict=True)):
        try:
            meta = {**metadata, **check_metadata(doc.metadata or None)}
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"Document {index}: {exc}") from None
        if doc_name is not None and shared[doc_name] > 1:
            seen[doc_name] += 1
            doc_name = f"{doc_name}#{seen[doc_name]}"
        try:
            out.append(text_document(doc.page_content, name=doc_name, metadata=meta))
        except IngestError as exc:
            raise IngestError(f"Document {index}: {exc}") from None
    return out


def _document_source(doc: Any) -> str | None:
    """A `Document`'s `source` metadata as a name, or `None` when it has none."""
    value = (doc.metadata or {}).get("source")
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return str(value)


def _check_stored_text(value: str, what: str) -> None:
    try:
        check_text(value, what)
    except ValueError as exc:
        raise IngestError(str(exc)) from exc


def read_file(path: Path, *, max_bytes: int, metadata: dict[str, Any]) -> SourceDoc:
    """Read one regular file into a document: by its format's reader, or as text (`knowledge.formats`).

    The size limit holds for what is read, not only for what the file reports:
    at most `max_bytes + 1` bytes are read, so a file that grows meanwhile is
    refused rather than loaded whole.

    Raises:
        IngestError: if the file is missing, unreadable, not a regular file (a
            FIFO, a device, a directory), too large, not UTF-8, or empty, or if
            its path is not UTF-8 (it could not be stored as the source).
        UnsupportedFormat: (an `IngestError`) for a binary file of no supported
            type; the message lists them.
        MissingExtra: (an `IngestError`) for a file whose reader's extra is not
            installed.
    """
    _check_name(path)
    raw = _read_bounded(path, max_bytes)
    fmt = format_for(path)
    if fmt.read is not None:
        extracted = fmt.read(raw, path)
        if "\x00" in extracted.text:
            # a NUL in markup survives the parser; PostgreSQL text cannot hold it, and the
            # write would fail only after the documents read before it were being stored
            raise IngestError(f"{path}: binary or damaged page (its text contains NUL characters)")
        source = str(path.resolve())
        meta = {**metadata, "source": source}
        if extracted.title:
            meta.setdefault("title", extracted.title)
        return SourceDoc(
            source=source,
            text=extracted.text,
            syntax="markdown" if extracted.markdown else "plain",
            metadata=meta,
            page_starts=extracted.page_starts,
        )
    known = next((name for start, name in BINARY_SIGNATURES if raw.startswith(start)), None)
    if known is not None:
        raise unsupported(str(path), f"binary file ({known})")
    if b"\x00" in raw:
        raise unsupported(str(path), "binary file (contains NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    if _control_share(raw) > MAX_CONTROL_SHARE:
        raise unsupported(
            str(path),
            f"binary file (more than {MAX_CONTROL_SHARE:.0%} of its first bytes are control characters)",
        )
    if not text or text.isspace():  # `strip()` would copy the whole text to say so
        raise IngestError(f"{path}: {EMPTY_FILE}")
    source = str(path.resolve())
    meta = {**metadata, "source": source}
    utf8: bytes | None = raw[len(_BOM) :] if raw.startswith(_BOM) else raw  # `text.encode()`
    if fmt.syntax == "markdown":
        read, named, body = front_matter(text)
        if read is not text:
            text, utf8 = read, None
        if heading := named or markdown_title(text[body:]):
            meta.setdefault("title", heading_words(heading))  # as the section path names it
    return SourceDoc(source=source, text=text, syntax=fmt.syntax, metadata=meta, utf8=utf8)


def path_text(path: str | os.PathLike[str]) -> str:
    r"""`path` as printable text: bytes of its name that are not UTF-8 written as ``\xNN``.

    On Linux a file name is bytes; Python carries the undecodable ones as lone
    surrogates, which neither a terminal, JSON nor PostgreSQL accept.
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _check_name(path: Path) -> None:
    """Refuse a path that cannot be stored as a document's source (its name is not UTF-8)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise IngestError(
            f"{path_text(path)}: file name is not valid UTF-8 (it could not be stored as the source)"
        ) from None


BINARY_SIGNATURES = (
    (b"\x89PNG", "a PNG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"PK\x03\x04", "a zip archive, or a format built on one"),  # pptx, odt, epub, jar, wheel
    (b"\xd0\xcf\x11\xe0", "an Office 97-2003 file: save it as .docx or .xlsx"),
    (b"\x1f\x8b", "gzip-compressed"),
    (b"\xfd7zXZ", "xz-compressed"),
    (b"7z\xbc\xaf", "a 7-Zip archive"),
    (b"\x7fELF", "an executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O executable or Java class"),
    (b"SQLite format 3", "an SQLite database"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
)
"""Opening bytes of common binary formats and what they are, refused before decoding: some
hold no NUL early on."""
MAX_CONTROL_SHARE = 0.01
"""Text with more control characters than this share (tab, line breaks and form feed aside) is binary."""
_CONTROL_BYTES = bytes([*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
"""The control characters that mark a binary file (tab, line breaks and form feed are text)."""
_BOM = b"\xef\xbb\xbf"


def _control_share(raw: bytes, sample: int = 65_536) -> float:
    """The share of control characters in the first `sample` bytes of a UTF-8 file.

    Counted in bytes: in UTF-8 a byte below 0x80 is always a character of its own, so
    deleting the control bytes counts the control characters. It is a sample (the whole
    file need not be read), and the count runs in C (a regex over the decoded text cost
    0.2 ms per re-read file).
    """
    head = raw[:sample]
    return (len(head) - len(head.translate(None, _CONTROL_BYTES))) / len(head) if head else 0.0


def _read_bounded(path: Path, max_bytes: int) -> bytes:
    """Return the bytes of the regular file `path`, refusing more than `max_bytes`."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise IngestError(f"{path}: no such file") from exc
    except OSError as exc:
        raise IngestError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise IngestError(f"{path}: not a regular file ({_file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise IngestError(
                f"{path}: file is too large ({info.st_size} bytes > max_bytes={max_bytes})"
            )
        try:
            raw = file.read(max_bytes + 1)
        except OSError as exc:
            raise IngestError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    if len(raw) > max_bytes:
        raise IngestError(f"{path}: file is too large (more than max_bytes={max_bytes} bytes)")
    return raw


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def glob_patterns(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    """Return glob patterns as a tuple; a single string is one pattern, not its characters.

    Raises:
        TypeError: if `value` is neither a str nor a sequence of str.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    items: object = value
    if not isinstance(items, Sequence) or not all(isinstance(p, str) for p in value):
        raise TypeError(f"{what} must be a glob string or a list of them, got {value!r}")
    return tuple(value)


SkipFn = Callable[[Path, str], None]
"""Called as `skip(path, reason)` for an entry a directory walk leaves out."""


def read_files(
    files: Sequence[Path], *, max_bytes: int, metadata: dict[str, Any], skip: SkipFn
) -> list[SourceDoc]:
    """Read the files a directory walk found, telling `skip` of each that cannot be read, and why.

    The supported types are listed in the reason of the first binary file only:
    a folder of images would otherwise repeat the list once per file.
    """
    docs, listed = [], False
    for file in files:
        try:
            docs.append(read_file(file, max_bytes=max_bytes, metadata=metadata))
        except IngestError as exc:
            reason = str(exc).removeprefix(f"{path_text(file)}: ")
            if isinstance(exc, UnsupportedFormat):
                reason, listed = (exc.detail if listed else reason), True
            skip(file, reason)
    return docs


def walk_directory(
    root: Path,
    *,
    include: str | Sequence[str] | None,
    exclude: str | Sequence[str] | None,
    skip: SkipFn | None = None,
) -> list[Path]:
    """Return the files under `root`, recursively, sorted, filtered by globs.

    Patterns match the path relative to `root` (POSIX form, `globs_keep`) with
    `fnmatch`, or its tail the way `PurePath.match` does, so `"*.md"` matches at any
    depth and `"docs/*.md"` only under `docs`; a single string is one pattern. Hidden files
    and directories (a name starting with `.`) are skipped unless an include
    pattern names them.

    Symbolic links never lead out of `root`: a link to a file inside `root` is
    read (and stored under the file's real path, once), a link to anything
    outside it is skipped, and links to directories are not descended (what
    they point at inside `root` is walked anyway, and a loop cannot form). The
    walk is iterative, so no depth of nesting exhausts the stack.

    No entry stops the walk: a folder it cannot list (no read or no search
    permission), an entry it cannot look at, and a link that is broken, a loop or
    leads outside are left out and told to `skip`; the rest is walked.

    Args:
        root: The directory to walk.
        include: Globs to keep (default: every non-hidden file).
        exclude: Globs to drop.
        skip: Told about each entry left out for a reason other than the globs or
            being hidden (a folder it could not list, a link it could not use),
            with the reason.

    Raises:
        IngestError: if `root` itself cannot be listed: a walk that saw nothing
            must not pass for an empty directory, from which a sync removes all.
    """
    keep, drop = glob_patterns(include, "include"), glob_patterns(exclude, "exclude")
    base = root.resolve()
    tell: SkipFn = skip or (lambda path, reason: None)
    found: dict[Path, tuple[str, ...]] = {}
    for path, rel in _entries(base, descend_hidden=bool(keep), skip=tell):
        if not globs_keep(PurePosixPath(*rel), keep, drop) or (not keep and _hidden(rel)):
            continue
        real, reason = _inside(path, base)
        if real is None:
            tell(path, reason)
            continue
        found.setdefault(real, rel)
    return sorted(found, key=lambda p: found[p])


def _entries(
    base: Path, *, descend_hidden: bool, skip: SkipFn
) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """Yield every non-directory entry under `base` with its relative parts, without recursion.

    An entry whose type cannot be read (a link in a loop, a folder without search
    permission) is yielded as a file: `_inside` or the reader then says what is wrong.
    """
    stack: list[tuple[Path, tuple[str, ...]]] = [(base, ())]
    while stack:
        folder, rel = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            if not rel:
                raise IngestError(
                    f"{path_text(folder)}: cannot list the directory ({exc.strerror or exc})"
                ) from exc
            skip(folder, f"cannot list the folder ({exc.strerror or exc})")
            continue
        for entry in entries:
            parts = (*rel, entry.name)
            if _is_folder(entry):
                if descend_hidden or not entry.name.startswith("."):
                    stack.append((Path(entry.path), parts))
            elif not _links_to_folder(entry):
                yield Path(entry.path), parts
            elif (descend_hidden or not entry.name.startswith(".")) and not _leads_inside(
                Path(entry.path), base
            ):
                # a link to a folder inside is walked where it is; one outside is not walked
                # at all, and a user looking for its files should be told why
                skip(
                    Path(entry.path),
                    "symbolic link to a folder outside the directory being ingested",
                )


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:  # no type in the listing and no search permission to stat it
        return False


def _links_to_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() and entry.is_dir()
    except OSError:  # a loop of links, or a target that cannot be looked at
        return False


def _leads_inside(link: Path, base: Path) -> bool:
    try:
        return link.resolve(strict=True).is_relative_to(base)
    except (OSError, RuntimeError):
        return True  # a link that cannot be followed leads nowhere to tell of


def _inside(path: Path, base: Path) -> tuple[Path | None, str]:
    """Return the real path of `path` if it lies inside `base`, else `None` and why not."""
    try:
        info = os.lstat(path)
    except OSError as exc:  # e.g. in a folder without search permission
        return None, f"unreadable ({exc.strerror or exc})"
    if not stat.S_ISLNK(info.st_mode):
        return path, ""
    try:
        real = path.resolve(strict=True)
    except RuntimeError:  # how some Python versions report a loop
        return None, "symbolic link loop"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "symbolic link loop"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None, "broken symbolic link"
        return None, f"unreadable symbolic link ({exc.strerror or exc})"
    if not real.is_relative_to(base):
        return None, "symbolic link to a path outside the directory being ingested"
    return real, ""


def globs_keep(path: PurePosixPath, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether `include` and `exclude` keep `path`: it matches an include (if any) and no exclude.

    A walk matches the path relative to its directory; a file named directly, the path
    as given. Patterns match with `fnmatch`, or the path's tail as `PurePath.match`
    does, so ``"*.md"`` matches at any depth and ``"docs/*.md"`` only under ``docs``.
    """
    return (not include or _matches(path, include)) and not (exclude and _matches(path, exclude))


def _hidden(rel: tuple[str, ...]) -> bool:
    return any(part.startswith(".") for part in rel)


def _matches(rel: PurePosixPath, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(str(rel), p) or rel.match(p) for p in patterns)


def check_chunking(chunk_size: int, chunk_overlap: int) -> None:
    """Raise `ValueError` unless `chunk_size >= 1` and `0 <= chunk_overlap < chunk_size`."""
    if chunk_size < 1 or not 0 <= chunk_overlap < chunk_size:
        raise ValueError(
            f"need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size, got "
            f"chunk_size={chunk_size}, chunk_overlap={chunk_overlap}"
        )


def split_document(
    doc: SourceDoc, *, collection: str, chunk_size: int, chunk_overlap: int
) -> list[ChunkRow]:
    """Split a document into chunks with stable ids and per-chunk metadata (`chunk_document`)."""
    return chunk_document(
        doc, collection=collection, chunk_size=chunk_size, chunk_overlap=chunk_overlap
    ).rows


class Placed(NamedTuple):
    """A chunk carried over unchanged from the document's earlier version: its id and new place."""

    id: str
    position: int
    start: int
    """Its `start_index`: where its text now starts in the document's text."""


_ROWS_AT = np.dtype("<i4")
"""A chunk's row place in a stored map (`Packing.placed`): position and offset (-1: none), per chunk."""


@dataclass(frozen=True)
class RowsAt:
    """Where the rows of a document's stored chunks are, as its stored map records it, and where they go.

    A kept chunk's row keeps the position and offset it was written with; readers see
    its new place through its document row's shift ranges (`knowledge.placed`). The map
    records each row's place, so an edit works out the ranges without reading the
    document's chunk rows.
    """

    listed: int
    """How many chunks the stored map lists: as many as are stored, if it is the stored version's."""
    found: frozenset[str]
    """The chunks built anew that the stored map lists and that keep their rows (the carried
    ones it lists all)."""
    stale: list[str]
    """The stored chunks whose rows go (the new version lacks them), in id order."""
    placing: Placing
    """Where every row is once the edit is written (new rows at their position plus
    `Placing.offset`), and the shift ranges that place the kept ones."""


@dataclass(frozen=True)
class Chunked:
    """A document's chunks, and the map of its structure to store with it."""

    rows: list[ChunkRow]
    """The chunks built in full: all of them, unless some were `carried`."""
    structure: bytes | None
    """A Markdown document's block map (`structure.MarkdownMap`), from which its next
    version is parsed and packed in part; `None` for other documents."""
    carried: Sequence[Placed] = ()
    """The chunks the earlier version's map gave unchanged (same text, section and id),
    with their new places: what a small edit moves costs no row to build."""
    rows_at: RowsAt | None = None
    """What the earlier version's map says of its chunks' rows; `None` when it says nothing
    (no map, or one stored before maps recorded it): the rows are then read."""

    def placing_rows(self, places: Sequence[tuple[int, int | None]]) -> bytes | None:
        """`structure`, recording that the chunks' rows place them at `places` (one per chunk, in order).

        The map is built assuming every chunk not carried is written at its new place; a
        writer that kept some rows where they were says so here, without building it again.
        """
        if self.structure is None:
            return None
        rows = np.array([(p, NO_START if s is None else s) for p, s in places], dtype=np.int64)
        recorded = _ROWS_AT.itemsize * 2 * len(places)
        return self.structure[: len(self.structure) - recorded] + _rows_bytes(rows)


def _rows_bytes(rows: np.ndarray[Any, Any]) -> bytes:
    """Rows' places (position, offset) as a stored map records them (`Packing.placed`)."""
    return rows.astype(_ROWS_AT).tobytes()


def chunk_document(
    doc: SourceDoc,
    *,
    collection: str,
    chunk_size: int,
    chunk_overlap: int,
    previous: bytes | None = None,
) -> Chunked:
    """Split a document into chunks with stable ids and per-chunk metadata.

    Each chunk's metadata gets `section` (its headings joined by `` > ``), `page`
    and `page_end` for a paged document (its first and last page), and
    `start_index` when its text is a verbatim slice of the document's text.

    Args:
        doc: The document.
        collection: The collection it goes to (part of its chunks' ids).
        chunk_size: The most characters in a chunk.
        chunk_overlap: Characters shared by consecutive pieces of one long paragraph.
        previous: The structure stored with the document's earlier version, if any:
            its unchanged blocks are not parsed again, and the chunks of its unchanged
            runs are `carried` instead of built (the chunks are the same). It must have
            been stored with the same document metadata: a carried chunk's metadata
            is taken to be the one already stored.

    Raises:
        IngestError: for a document nested deeper than its parser can recurse.
    """
    check_chunking(chunk_size, chunk_overlap)
    given = given_section(doc.metadata)
    doc_id = document_id(collection, doc.source)
    title = document_title(doc.source, doc.metadata)
    structured = given is None
    if given is None and doc.syntax == "markdown" and not doc.page_starts:
        stored = MarkdownMap.load(previous) if previous is not None else None
        try:
            chunked = _chunk_markdown(doc, doc_id, title, stored, chunk_size, chunk_overlap)
        except RecursionError:
            raise _too_deep(doc) from None
        if chunked.rows or chunked.carried or not doc.text.strip():
            return chunked
        # headings alone (a section's heading is kept with what it heads, and here heads
        # nothing): the document is one outline, read as plain text, or it could not be found
        structured = False
    blocks = document_structure(doc, structured=structured)
    pieces = pack(blocks, doc.text, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    return Chunked(_rows(doc, doc_id, title, given, pieces), None)


def _rows(
    doc: SourceDoc, doc_id: str, title: str, given: str | None, pieces: Sequence[Piece]
) -> list[ChunkRow]:
    """Every non-blank piece as a chunk, its id told apart from identical ones by their order."""
    rows: list[ChunkRow] = []
    seen: Counter[str] = Counter()
    for piece in pieces:
        if not piece.text.strip():
            continue
        section = given or " > ".join(piece.section)
        context = context_line(title, section)
        searchable = searchable_text(context, piece.text)
        chunk = chunk_id(doc_id, searchable, seen[searchable])
        seen[searchable] += 1
        rows.append(_row(doc, piece, chunk, len(rows), section, context))
    return rows


def _chunk_markdown(
    doc: SourceDoc,
    doc_id: str,
    title: str,
    stored: MarkdownMap | None,
    chunk_size: int,
    chunk_overlap: int,
) -> Chunked:
    """Chunk a Markdown document, carrying the chunks of its unchanged runs over from `stored`.

    Each piece's key in the stored packing is its chunk's id (zeros for a blank piece),
    labelled with the document and its title: a carried chunk takes its id from there,
    unless identical chunks make an id depend on their order (then all are built).
    """
    label = f"{doc_id}\x00{title}"
    if stored is not None and stored.packing is not None and stored.packing.label != label:
        stored = replace(stored, packing=None)  # keys made for another document or title
    packed = pack_markdown(doc.text, stored, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    packing = packed.map.packing
    assert packing is not None  # pack_markdown always packs
    keys = np.zeros((len(packed.source), KEY_BYTES), dtype=np.uint8)
    carried = packed.source >= 0
    if stored is not None and stored.packing is not None and np.any(carried):
        stored_keys = np.frombuffer(stored.packing.keys, dtype=np.uint8).reshape(-1, KEY_BYTES)
        keys[carried] = stored_keys[packed.source[carried]]
    built = np.flatnonzero(~carried).tolist()
    contexts: dict[tuple[str, ...], tuple[str, str]] = {}
    for at, piece in zip(built, packed.pieces, strict=True):
        if piece.text.strip():
            if piece.section not in contexts:
                contexts[piece.section] = _context(title, piece.section)
            key = chunk_id(doc_id, searchable_text(contexts[piece.section][1], piece.text))
            keys[at] = np.frombuffer(bytes.fromhex(key), dtype=np.uint8)
    chunk = np.asarray(keys.any(axis=1), dtype=bool)
    ids = keys[chunk]  # each chunk's id, as bytes
    again = b""
    if _repeats(ids):
        named = _hex_keys(ids)
        anew = dict(zip(built, packed.pieces, strict=True))
        _count_identical(doc, doc_id, title, packed, anew, np.flatnonzero(chunk).tolist(), named)
        first = ids
        ids = np.frombuffer(bytes.fromhex("".join(named)), dtype=np.uint8).reshape(-1, KEY_BYTES)
        again = _again(np.flatnonzero(chunk), first, ids)
    positions = np.cumsum(chunk) - 1
    rows = []
    for at, piece in zip(built, packed.pieces, strict=True):
        if chunk[at]:
            section, context = contexts[piece.section]
            position = int(positions[at])
            rows.append(_row(doc, piece, ids[position].tobytes().hex(), position, section, context))
    kept = np.flatnonzero(carried & chunk)
    moved = _Carried(ids, positions[kept], packed.starts[kept])
    placed, rows_at = _rows_at(stored, packed, chunk, ids)
    keyed = replace(
        packing, keys=keys.tobytes(), label=label, again=again, placed=_rows_bytes(placed)
    )
    return Chunked(rows, replace(packed.map, packing=keyed).dump(), moved, rows_at)


_AGAIN = np.dtype([("piece", "<u4"), ("id", np.uint8, (KEY_BYTES,))])
"""An identical chunk after the first in a stored map (`Packing.again`): its piece and its own id."""


def _again(
    pieces: np.ndarray[Any, Any], keys: np.ndarray[Any, Any], ids: np.ndarray[Any, Any]
) -> bytes:
    """The chunks whose id is not their key (identical ones after the first), as `Packing.again` keeps them."""
    other = np.flatnonzero(np.any(keys != ids, axis=1))
    entries = np.zeros(len(other), dtype=_AGAIN)
    entries["piece"], entries["id"] = pieces[other], ids[other]
    return entries.tobytes()


class _Carried(Sequence[Placed]):
    """The chunks carried over from the stored map, each made a `Placed` only when asked for.

    An edit that reads no chunk row needs none of them one by one (600 objects for a
    1 % edit of 659 sections).
    """

    def __init__(
        self,
        ids: np.ndarray[Any, Any],
        positions: np.ndarray[Any, Any],
        starts: np.ndarray[Any, Any],
    ) -> None:
        self._ids, self._positions, self._starts = ids, positions, starts

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> Placed: ...

    @overload
    def __getitem__(self, index: slice) -> list[Placed]: ...

    def __getitem__(self, index: int | slice) -> Placed | list[Placed]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = int(self._positions[index])
        return Placed(self._ids[position].tobytes().hex(), position, int(self._starts[index]))


def _rows_at(
    stored: MarkdownMap | None,
    packed: PackedMarkdown,
    chunk: np.ndarray[Any, Any],
    ids: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], RowsAt | None]:
    """Where each chunk's row is once written (position, offset), and what the stored map says of them.

    A chunk the stored map lists keeps its row there; any other is written anew
    (`placed.shifted_rows`). Without a stored map that records its rows, or when the
    new rows find no free positions, every chunk is taken to be written at its new
    place and `None` says the rows must be read.
    """
    pieces = np.flatnonzero(chunk)
    new = np.stack((np.arange(len(pieces)), packed.starts[pieces]), axis=1).astype(np.int64)
    packing = stored.packing if stored is not None else None
    if packing is None or not packing.keys:
        return new, None
    stored_keys = np.frombuffer(packing.keys, dtype=np.uint8).reshape(-1, KEY_BYTES)
    was_chunk = stored_keys.any(axis=1)
    listed = int(np.count_nonzero(was_chunk))
    if len(packing.placed) != listed * _ROWS_AT.itemsize * 2:
        return new, None  # stored before maps recorded rows
    row_of_piece = np.cumsum(was_chunk) - 1
    chunk_keys = stored_keys[was_chunk].copy()  # the stored chunks' ids
    stored_again = np.frombuffer(packing.again, dtype=_AGAIN)
    chunk_keys[row_of_piece[stored_again["piece"]]] = stored_again["id"]
    source = packed.source[pieces]  # a carried chunk's piece in the stored packing
    carried = source >= 0
    if _repeats(chunk_keys) or np.any(ids[carried] != chunk_keys[row_of_piece[source[carried]]]):
        # an identical chunk whose id counts the ones before it changed: its rows are read
        return new, None
    stored_rows = np.frombuffer(packing.placed, dtype=_ROWS_AT).reshape(-1, 2)
    rows = new.copy()
    rows[carried] = stored_rows[row_of_piece[source[carried]]]
    kept = carried.copy()
    row_kept = np.zeros(listed, dtype=bool)
    row_kept[row_of_piece[source[carried]]] = True
    found = _listed(chunk_keys, ids, np.flatnonzero(~carried).tolist())
    for position, row in list(found.items()):
        if (stored_rows[row, 1] == NO_START) != (new[position, 1] == NO_START):
            del found[position]  # an offset gained or lost: written anew (a range cannot say so)
        else:
            rows[position] = stored_rows[row]
            kept[position] = row_kept[row] = True
    placing = shifted_rows(new, rows, kept)
    if placing is None:
        return new, None
    stale = sorted(_hex_keys(chunk_keys[~row_kept]))
    found_ids = frozenset(ids[i].tobytes().hex() for i in found)
    return placing.rows, RowsAt(listed, found_ids, stale, placing)


def _repeats(keys: np.ndarray[Any, Any]) -> bool:
    """Whether any key (`KEY_BYTES` a row) is there twice.

    Keys are digests: their first 8 bytes, sorted as integers, almost never repeat
    unless the keys do, and only then are whole keys compared (sorting them as
    16-byte strings cost 0.08 ms for a document of 659 chunks, at every edit).
    """
    if len(keys) < 2:
        return False
    heads = np.sort(np.ascontiguousarray(keys[:, :8]).view("<u8").ravel())
    if not np.any(heads[1:] == heads[:-1]):
        return False
    rows = np.ascontiguousarray(keys).view(f"V{KEY_BYTES}").ravel()
    return len(np.unique(rows)) < len(rows)


def _hex_keys(keys: np.ndarray[Any, Any]) -> list[str]:
    """Keys (`KEY_BYTES` a row) as the chunk ids they are."""
    width = 2 * KEY_BYTES
    hexed = keys.tobytes().hex()
    return [hexed[at : at + width] for at in range(0, len(hexed), width)]


_FEW_BUILT = 32
"""Chunks built anew up to which each is looked up in the stored keys by itself (`_listed`)."""


def _listed(
    stored_keys: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], built: list[int]
) -> dict[int, int]:
    """Of the chunks at `built` (positions; `ids` by position), those the stored map lists, with their row there.

    A chunk built anew may still be stored: a run packed again for an edit of one of its
    blocks gives its other chunks again.
    """
    if len(built) > _FEW_BUILT:
        row_of = {key.tobytes(): row for row, key in enumerate(stored_keys)}
        return {i: row_of[ids[i].tobytes()] for i in built if ids[i].tobytes() in row_of}
    found = {}
    for i in built:
        match = np.flatnonzero((stored_keys == ids[i]).all(axis=1))
        if len(match):
            found[i] = int(match[0])
    return found


def _count_identical(
    doc: SourceDoc,
    doc_id: str,
    title: str,
    packed: PackedMarkdown,
    anew: dict[int, Piece],
    pieces: list[int],
    ids: list[str],
) -> None:
    """Give the second and later of identical chunks their own ids (`chunk_id`'s occurrence).

    `ids` holds each chunk's key, the id its first occurrence has; `pieces` each
    chunk's piece, `anew` the pieces packed anew by their index (the others are
    slices of the text). Only the chunks that repeat one before them are hashed again.
    """
    seen: Counter[str] = Counter()
    lengths = packed.map.packing.piece_lengths if packed.map.packing is not None else None
    assert lengths is not None  # pack_markdown always packs
    for position, key in enumerate(list(ids)):
        occurrence = seen[key]
        seen[key] += 1
        if occurrence:
            at = pieces[position]
            start = int(packed.starts[at])
            piece = anew.get(at)
            text = piece.text if piece is not None else doc.text[start : start + int(lengths[at])]
            context = _context(title, packed.sections[at])[1]
            ids[position] = chunk_id(doc_id, searchable_text(context, text), occurrence)


def _context(title: str, path: tuple[str, ...]) -> tuple[str, str]:
    """A section path as `metadata["section"]` holds it, and the context line it gives."""
    section = " > ".join(path)
    return section, context_line(title, section)


def _row(
    doc: SourceDoc, piece: Piece, chunk: str, position: int, section: str, context: str
) -> ChunkRow:
    metadata = dict(doc.metadata)
    if piece.start is not None:
        metadata["start_index"] = piece.start
    if section:
        metadata.setdefault("section", section)
    if piece.page is not None:
        metadata.setdefault("page", piece.page)
        metadata.setdefault("page_end", piece.page_end)
    return ChunkRow(
        id=chunk, position=position, text=piece.text, metadata=metadata, context=context
    )


def document_structure(doc: SourceDoc, *, structured: bool = True) -> list[Block]:
    """The blocks of a document, read as its syntax says (Markdown, reStructuredText, plain text).

    Raises:
        IngestError: for a document nested deeper than its parser can recurse.
    """
    if not structured or doc.syntax == "plain" or doc.page_starts:
        return plain_blocks(doc.text, doc.page_starts)
    try:
        if doc.syntax == "rst":
            return rst_blocks(doc.text)
        return parse_markdown(doc.text).blocks
    except RecursionError:
        raise _too_deep(doc) from None


def _too_deep(doc: SourceDoc) -> IngestError:
    # docutils recurses once per level of nesting: a few hundred nested block quotes
    # exhaust Python's stack, and the error would otherwise end a whole folder's ingest
    return IngestError(
        f"{doc.source}: nested too deeply to read (its {doc.syntax} structure is deeper"
        f" than Python's recursion limit of {sys.getrecursionlimit()})"
    )


def given_section(metadata: dict[str, Any]) -> str | None:
    """The section path a document's metadata gives it, or `None` to read it from its headings.

    A caller that knows the structure (one member of an API reference, one page of
    a wiki) says so; no line of such a document's text then becomes a heading.
    """
    value = metadata.get("section")
    return value.strip() if isinstance(value, str) and value.strip() else None
