"""A benchmark corpus of distinct real text, built offline from what this machine holds.

Sources, nothing downloaded:

* docstrings of every Python module of the standard library and of every
  distribution installed in the running environment, read with `ast` (no module
  is imported, so nothing runs and nothing hangs);
* plain-text documentation under ``/usr/share/doc`` (READMEs, changelogs, news,
  ``.txt``/``.md``/``.rst`` files, gzip-compressed ones decompressed; licence
  texts, HTML and other binaries left out);
* optionally, package registries' lists of package summaries (tab-separated,
  a header naming a ``name`` column and a column starting with ``summary``),
  given with ``--summaries`` or `SUMMARIES_ENV`: short texts, median about 60
  characters, taken only once the first two sources are used up, so a corpus
  those cover is the same with or without them. Together they reach a million
  chunks where the first two hold about 120,000.

Each source file becomes one document cut into chunks of `MIN_CHUNK_CHARS` to
`CHUNK_CHARS` characters. A chunk whose normalised text (case folded, whitespace
collapsed) was already seen is dropped, so the corpus holds no exact duplicate
however often a docstring or a changelog entry is repeated across packages. The
chunks of a document are written separated by one blank line and hold none
themselves, and every chunk is longer than half the chunk size, so ingesting a
document with ``chunk_size=CHUNK_CHARS, chunk_overlap=0`` cuts exactly these
chunks: the corpus size is the number of chunks the ingest stores.

A list of summaries becomes Markdown documents of `SUMMARY_DOC_PACKAGES`
packages, one ``## name`` section each holding its summary on one line; the
ingest keeps sections apart, so each section is one chunk. A summary whose text
(case and spacing aside) was already taken is dropped, as are summaries shorter
than `MIN_SUMMARY_CHARS` or too long for one chunk.

Documents are taken in the order of a hash of their name (a fixed shuffle that
mixes docstrings and documentation, then the summaries) until `size` chunks are reached; one in
`SMALL_EVERY` documents (by the same hash) goes to ``small/``, the others to
``main/``. The result is cached under a directory named by `CORPUS_VERSION`, the
size and a fingerprint of the interpreter, installed distributions and summary lists.

    .venv/bin/python -m bench.corpus --size 100000
    .venv/bin/python -m bench.corpus --size 1000000 --summaries pypi.tsv npm.tsv
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from langchain_text_splitters import RecursiveCharacterTextSplitter

CORPUS_VERSION = 3
"""Bump when the corpus changes for the same sources, so cached copies are rebuilt."""
CHUNK_CHARS = 500
_SEPARATOR = "\n\n"
"""Between chunks in a corpus file; the ingest splitter counts it into the next chunk's length."""
MIN_CHUNK_CHARS = 260
"""Above half of `CHUNK_CHARS`: two chunks never fit in one, so the ingest cannot merge them."""
MAX_DOC_CHUNKS = 200
"""Chunks kept per document: one long changelog must not be a tenth of the corpus."""
MAX_READ_CHARS = 4 * MAX_DOC_CHUNKS * CHUNK_CHARS
"""Characters of a source split at most (more than the kept chunks need, after drops)."""
SMALL_EVERY = 10
SUMMARIES_ENV = "ARCANA_LOOP_BENCH_SUMMARIES"
"""Summary lists to use when none are given (paths separated by the OS path separator)."""
SUMMARY_PREFIX = "packages/"
"""Names of summary documents start with this; they are written as Markdown."""
SUMMARY_DOC_PACKAGES = 100
MIN_SUMMARY_CHARS = 15
_LEADING_NOTE = re.compile(r"^\[[^\]]*\]\s*")
"""A bracketed note before a summary (a list's own remark, not the authors' text)."""
DOC_ROOT = Path("/usr/share/doc")
_TEXT_SUFFIXES = frozenset({"", ".txt", ".md", ".rst"})
_TEXT_STEMS = ("readme", "news", "changelog", "changes", "history", "todo", "faq", "bugs")
_SKIPPED_STEMS = ("copyright", "license", "licence", "copying")
_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")
_SPACE = re.compile(r"\s+")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL and lone surrogates: PostgreSQL text cannot hold them, and ingest refuses the file."""


@dataclass(frozen=True)
class Document:
    """One source file's text, under the name its corpus file gets."""

    name: str
    """Relative POSIX path of the corpus file without suffix, e.g. ``python/json/decoder``."""
    text: str


@dataclass
class Corpus:
    """Distinct chunks grouped by document, in corpus order."""

    documents: list[tuple[str, list[str]]] = field(default_factory=list)
    duplicates: int = 0
    """Chunks dropped because their normalised text was already in the corpus."""

    @property
    def chunks(self) -> int:
        """Number of chunks kept."""
        return sum(len(chunks) for _, chunks in self.documents)


def order_key(name: str) -> str:
    """Return a document's place in the corpus: a hash of its name, a fixed shuffle."""
    return hashlib.sha256(name.encode()).hexdigest()


def is_summaries(name: str) -> bool:
    """Tell whether a document is made of package summaries (taken last, written as Markdown)."""
    return name.startswith(SUMMARY_PREFIX)


def is_small(name: str) -> bool:
    """Tell whether a document belongs to the ``small`` collection (one in `SMALL_EVERY`)."""
    return int(order_key(name)[:8], 16) % SMALL_EVERY == 0


def normalised_hash(chunk: str) -> bytes:
    """Hash of a chunk's text, case folded and with whitespace collapsed."""
    return hashlib.sha256(_SPACE.sub(" ", chunk.casefold()).strip().encode()).digest()


def split_chunks(text: str) -> list[str]:
    """Cut `text` into chunks of `MIN_CHUNK_CHARS`..`CHUNK_CHARS` characters without blank lines.

    Shorter pieces (a document's tail, a lone short docstring) are dropped, and
    blank lines inside a chunk become line breaks, so the blank line between
    chunks in the written file is the only place the ingest splitter cuts.
    """
    # a chunk with the separator before it must still fit, or the ingest cuts it again
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=CHUNK_CHARS - len(_SEPARATOR), chunk_overlap=0
    )
    chunks = (_BLANK_LINES.sub("\n", piece.strip()) for piece in splitter.split_text(text))
    return [c for c in chunks if len(c) >= MIN_CHUNK_CHARS and not _UNSTORABLE.search(c)]


def distinct_corpus(documents: Iterable[Document], size: int) -> Corpus:
    """Take documents in `order_key` order, dropping repeated chunks, until `size` chunks.

    The last document taken is cut so the corpus holds exactly `size` chunks when
    the sources have that many (fewer otherwise).
    """
    corpus = Corpus()
    seen: set[bytes] = set()
    ordered = sorted(documents, key=lambda d: (is_summaries(d.name), order_key(d.name)))
    for doc in ordered:
        kept: list[str] = []
        pieces = doc.text.split(_SEPARATOR) if is_summaries(doc.name) else split_chunks(doc.text)
        for chunk in pieces:
            if len(kept) >= MAX_DOC_CHUNKS or corpus.chunks + len(kept) >= size:
                break
            # a summary is a duplicate by its text, whatever package it names
            key = normalised_hash(chunk.partition("\n")[2] if is_summaries(doc.name) else chunk)
            if key in seen:
                corpus.duplicates += 1
                continue
            seen.add(key)
            kept.append(chunk)
        if kept:
            corpus.documents.append((doc.name, kept))
        if corpus.chunks >= size:
            break
    return corpus


# -- Python docstrings ------------------------------------------------------------


def module_docstrings(source: bytes, module: str) -> str:
    """Return a module's docstrings as pydoc-like text: a dotted-name line, then its docstring.

    Returns an empty string for source that does not parse.
    """
    try:
        with warnings.catch_warnings():  # invalid escape sequences in old code
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    parts: list[str] = []
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, qualname = stack.pop()
        doc = ast.get_docstring(node, clean=True)  # type: ignore[arg-type]
        if doc:
            parts.append(f"{qualname}\n{doc}")
        children = [
            (child, f"{qualname}.{child.name}")
            for child in ast.iter_child_nodes(node)
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        stack.extend(reversed(children))  # source order
    return "\n\n".join(parts)


def python_sources() -> Iterator[tuple[str, Path]]:
    """Yield ``(module, path)`` for the standard library and every installed distribution's modules."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for folder, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(
            d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__")
        )
        for file in sorted(files):
            if file.endswith(".py"):
                path = Path(folder) / file
                yield _module_name(path.relative_to(stdlib)), path
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        for rel in dist.files or []:
            if rel.suffix == ".py" and ".." not in rel.parts:
                yield _module_name(PurePosixPath(rel.as_posix())), Path(str(dist.locate_file(rel)))


def _module_name(rel: PurePosixPath | Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def python_documents() -> Iterator[Document]:
    """Yield one document per module that has docstrings (each module once)."""
    seen: set[str] = set()
    for module, path in python_sources():
        if module in seen:
            continue
        seen.add(module)
        try:
            text = module_docstrings(path.read_bytes(), module)
        except OSError:
            continue
        if text:
            yield Document(name=f"python/{module}", text=text[:MAX_READ_CHARS])


# -- /usr/share/doc ---------------------------------------------------------------


def is_text_doc(name: str) -> bool:
    """Tell whether a file under a doc tree is plain-text documentation, by its name."""
    lower = name.lower().removesuffix(".gz")
    stem, suffix = os.path.splitext(lower)
    if lower.startswith(_SKIPPED_STEMS):
        return False
    return suffix in _TEXT_SUFFIXES or lower.startswith(_TEXT_STEMS)


def read_text_doc(path: Path) -> str | None:
    """Return a documentation file's text (gunzipped), or `None` if it is not UTF-8 text."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as file:
                raw = file.read(MAX_READ_CHARS * 2)
        else:
            with path.open("rb") as file:
                raw = file.read(MAX_READ_CHARS * 2)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(raw) < MAX_READ_CHARS * 2 or exc.start < len(raw) - 3:
            return None
        text = raw[: exc.start].decode("utf-8")  # only the bounded read cut a character
    return text[:MAX_READ_CHARS]


def doc_documents(root: Path = DOC_ROOT) -> Iterator[Document]:
    """Yield one document per plain-text documentation file under `root`."""
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for file in sorted(files):
            path = Path(folder) / file
            if not is_text_doc(file) or path.is_symlink():
                continue
            text = read_text_doc(path)
            if text:
                # the name keeps ".gz": a package may ship NEWS and NEWS.gz
                yield Document(name=f"doc/{path.relative_to(root).as_posix()}", text=text)


# -- package summaries ------------------------------------------------------------


def summary_documents(path: Path) -> Iterator[Document]:
    """Yield the summaries of one package list as documents of `SUMMARY_DOC_PACKAGES` sections.

    Each section is ``## name`` and the summary on one line; the document's text is its
    sections separated by blank lines (its title is written with it, `write_corpus`).
    """
    sections: list[str] = []
    group = 0
    for name, summary in _summaries(path):
        sections.append(f"## {name}\n{summary}")
        if len(sections) == SUMMARY_DOC_PACKAGES:
            yield Document(f"{SUMMARY_PREFIX}{path.stem}/{group:05d}", _SEPARATOR.join(sections))
            sections, group = [], group + 1
    if sections:
        yield Document(f"{SUMMARY_PREFIX}{path.stem}/{group:05d}", _SEPARATOR.join(sections))


def _summaries(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(name, summary)`` of each usable row of a package list, in file order."""
    with path.open(encoding="utf-8", errors="replace", newline="") as file:
        rows = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, [])
        try:
            name_at = header.index("name")
            summary_at = next(i for i, h in enumerate(header) if h.startswith("summary"))
        except (ValueError, StopIteration):
            raise ValueError(f"{path}: no 'name' and 'summary' columns in its header") from None
        for row in rows:
            if len(row) <= max(name_at, summary_at):
                continue
            name = _SPACE.sub("", row[name_at])
            summary = _LEADING_NOTE.sub("", _SPACE.sub(" ", row[summary_at]).strip())
            if name and _fits_one_section(name, summary):
                yield name, summary


def _fits_one_section(name: str, summary: str) -> bool:
    """Whether a summary makes exactly one chunk: long enough, short enough, no Markdown heading."""
    return (
        len(summary) >= MIN_SUMMARY_CHARS
        and len(name) + len(summary) + 4 <= CHUNK_CHARS - len(_SEPARATOR)
        and not summary.startswith(("#", "=", "-", "`", "~", ">", "<", "|", "*", "+"))
        and not _UNSTORABLE.search(summary + name)
    )


def summary_lists(given: Iterable[Path] | None = None) -> list[Path]:
    """The summary lists to read: those given, else those named by `SUMMARIES_ENV` (may be none)."""
    if given is not None:
        paths = list(given)
    else:
        paths = [Path(p) for p in os.environ.get(SUMMARIES_ENV, "").split(os.pathsep) if p]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"no such summary list: {missing[0]}")
    return paths


# -- writing and caching ----------------------------------------------------------


def write_corpus(corpus: Corpus, root: Path) -> dict[str, int]:
    """Write each document as ``<root>/<main|small>/<name>.txt``; return the counts per collection."""
    counts = {"main_documents": 0, "main_chunks": 0, "small_documents": 0, "small_chunks": 0}
    for name, chunks in corpus.documents:
        collection = "small" if is_small(name) else "main"
        if is_summaries(name):  # Markdown, so each ## section is a chunk of its own
            path = root / collection / f"{_safe(name)}.md"
            text = f"# Package summaries: {name.removeprefix(SUMMARY_PREFIX)}{_SEPARATOR}"
        else:
            path, text = root / collection / f"{_safe(name)}.txt", ""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + _SEPARATOR.join(chunks) + "\n", encoding="utf-8")
        counts[f"{collection}_documents"] += 1
        counts[f"{collection}_chunks"] += len(chunks)
    return counts


def _safe(name: str) -> str:
    """A relative path made of plain, non-hidden parts (a doc file may be named ``.foo``)."""
    return "/".join(re.sub(r"[^\w.+-]", "_", part).lstrip(".") or "_" for part in name.split("/"))


def read_chunks(folder: Path) -> list[str]:
    """Return the chunks of every corpus file under `folder`, in sorted path order."""
    chunks: list[str] = []
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".txt", ".md"):
            chunks.extend(read_file_chunks(path))
    return chunks


def read_file_chunks(path: Path) -> list[str]:
    """Return the chunks of one corpus file."""
    pieces = path.read_text(encoding="utf-8").strip().split(_SEPARATOR)
    return pieces[1:] if path.suffix == ".md" else pieces  # a .md starts with its title


def fingerprint(summaries: Iterable[Path] = ()) -> str:
    """Identify the sources: interpreter version, installed distributions, summary lists."""
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    lists = [f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in summaries]
    text = "\n".join([sys.version, str(DOC_ROOT), *dists, *lists])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """The directory built corpora are kept in between runs."""
    return Path(tempfile.gettempdir()) / "arcana-loop-bench"


def build(size: int, cache_dir: Path | None = None, summaries: Iterable[Path] = ()) -> Path:
    """Return the directory of a corpus of `size` distinct chunks, building it unless cached.

    The directory holds ``main/``, ``small/`` and ``manifest.json`` (the counts).
    `summaries`: package lists to take short texts from once the other sources are used up.

    Raises:
        ValueError: if `size` is not positive.
    """
    if size < 1:
        raise ValueError(f"size must be positive, got {size!r}")
    lists = list(summaries)
    cache = cache_dir or default_cache_dir()
    target = cache / f"corpus-v{CORPUS_VERSION}-{size}-{fingerprint(lists)}"
    if (target / "manifest.json").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    corpus = distinct_corpus(_all_documents(lists), size)
    staging = Path(tempfile.mkdtemp(prefix="building-", dir=cache))
    try:
        counts = write_corpus(corpus, staging)
        manifest = {
            "version": CORPUS_VERSION,
            "size": size,
            "chunks": corpus.chunks,
            "documents": len(corpus.documents),
            "duplicates_dropped": corpus.duplicates,
            "python_documents": sum(n.startswith("python/") for n, _ in corpus.documents),
            "doc_documents": sum(n.startswith("doc/") for n, _ in corpus.documents),
            "summary_documents": sum(is_summaries(n) for n, _ in corpus.documents),
            "summary_chunks": sum(len(c) for n, c in corpus.documents if is_summaries(n)),
            **counts,
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
        staging.rename(target)  # atomic: a concurrent or killed build never leaves half a corpus
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "manifest.json").is_file():  # not another process's finished build
            raise
    return target


def _all_documents(summaries: Iterable[Path] = ()) -> Iterator[Document]:
    yield from python_documents()
    yield from doc_documents()
    for path in summaries:
        yield from summary_documents(path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help="chunks (default 100000)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument(
        "--summaries",
        type=Path,
        nargs="*",
        default=None,
        help=f"package lists (TSV: name, summary); default: ${SUMMARIES_ENV}",
    )
    args = parser.parse_args()
    root = build(args.size, args.cache_dir, summary_lists(args.summaries))
    print(root)
    print((root / "manifest.json").read_text())


if __name__ == "__main__":
    main()
