"""The demo corpus: the Python standard library's own docstrings, read from the running interpreter.

Each documented module of `MODULES` that imports here contributes one section
for its module docstring and one for each documented public member: every
class, function and method, each titled by its qualified name
(``asyncio.run``, ``asyncio.Queue.get``) and led by its signature where
`inspect.signature` gives one. A module's public members are the names of its
``__all__`` where it defines one; otherwise the public names whose object
comes from the module itself, its C accelerator (``_csv`` for ``csv``,
``posix`` for ``os``) or a submodule of its package. An object reachable from
several listed modules is documented once, under the first, and a docstring
once: a subclass's or a sibling's copy of it is left out.

The structure is given, not guessed: each section is ingested as its own
document (``pydoc:asyncio#run``) whose ``section`` metadata is the member's
qualified name, so every chunk is searched under ``module > member`` and no
docstring line is ever read as a heading. Nothing is downloaded; the text is
whatever this interpreter ships.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from arcana_loop.knowledge.base import KnowledgeBase
from arcana_loop.knowledge.types import IngestResult

COLLECTION = "python-docs"

MODULES = (
    "abc argparse array ast asyncio asyncio.subprocess atexit base64 bdb binascii bisect builtins bz2 calendar cmath cmd "
    "code codecs codeop collections collections.abc colorsys compileall concurrent.futures configparser "
    "contextlib contextvars copy copyreg cProfile csv ctypes dataclasses datetime dbm decimal difflib dis "
    "doctest email email.message email.parser email.policy email.utils enum errno faulthandler fcntl "
    "filecmp fileinput fnmatch fractions ftplib functools gc getopt getpass gettext glob graphlib grp "
    "gzip hashlib heapq hmac html html.parser http http.client http.cookiejar http.cookies http.server "
    "imaplib importlib importlib.metadata importlib.resources importlib.util inspect io ipaddress "
    "itertools json keyword linecache locale logging logging.config logging.handlers lzma mailbox "
    "marshal math mimetypes mmap multiprocessing multiprocessing.shared_memory numbers operator os "
    "os.path pathlib pdb pickle pickletools pkgutil platform plistlib poplib pprint profile pstats pty "
    "pwd py_compile pyclbr queue quopri random re reprlib resource runpy sched secrets select selectors "
    "shelve shlex shutil signal site smtplib socket socketserver sqlite3 ssl stat statistics string "
    "struct subprocess symtable sys sysconfig tabnanny tarfile tempfile textwrap threading time timeit "
    "token tokenize tomllib trace traceback tracemalloc tty types typing unicodedata unittest "
    "unittest.mock urllib.error urllib.parse urllib.request urllib.robotparser uuid venv warnings wave "
    "weakref webbrowser wsgiref.simple_server wsgiref.util xml.dom.minidom xml.etree.ElementTree "
    "xml.sax xmlrpc.client xmlrpc.server zipapp zipfile zipimport zlib zoneinfo"
).split()
"""Modules of the standard library's documentation, in the order their members are claimed.

Left out: modules deprecated in 3.11 (``asyncore``, ``cgi``, ``telnetlib`` ...), GUI
and terminal-bound ones (``tkinter``, ``turtle``, ``curses``, ``readline``), Windows-only
ones, and the ``test`` package.
"""

_UNEXPORTED = {"asyncio.subprocess": ("Process",)}
"""Documented members a module's ``__all__`` leaves out."""
_ACCELERATORS = {"os": ("posix", "nt")}
"""C modules whose names do not follow the ``_<module>`` rule (``_csv``, ``_pickle`` ...)."""
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""Object addresses in default values' reprs: they would make the text differ on every run."""


@dataclass(frozen=True)
class Section:
    """One section of the corpus: a module's docstring, or one member's signature and docstring."""

    module: str
    """The listed module the section belongs to (``asyncio``)."""
    name: str
    """Its qualified name: the module's (``asyncio``) or the member's (``asyncio.Queue.get``)."""
    text: str
    """The name and signature on the first line, the docstring below it."""

    @property
    def source(self) -> str:
        """The document's source name: ``pydoc:asyncio``, ``pydoc:asyncio#Queue.get``."""
        if self.name == self.module:
            return f"pydoc:{self.module}"
        return f"pydoc:{self.module}#{self.name.removeprefix(self.module + '.')}"

    @property
    def metadata(self) -> dict[str, Any]:
        """Searched as ``title > section``: the module, then the member's qualified name."""
        kind = "module" if self.name == self.module else "member"
        return {"module": self.module, "kind": kind, "title": self.module, "section": self.name}

    def document(self) -> Document:
        """The section as a LangChain `Document` named by its source."""
        return Document(page_content=self.text, metadata={**self.metadata, "source": self.source})


@dataclass
class Documented:
    """What the corpus holds so far: objects (a bound method as its function) and docstrings."""

    objects: set[int] = field(default_factory=set)
    docs: set[str] = field(default_factory=set)

    def claim(self, obj: Any, doc: str = "") -> bool:
        """Record `obj` and its `doc`; `False` when either is documented already."""
        key = id(getattr(obj, "__func__", obj))
        if key in self.objects or (doc and doc in self.docs):
            return False
        self.objects.add(key)
        if doc:
            self.docs.add(doc)
        return True


def _doc(obj: Any) -> str:
    """The object's own docstring, cleaned.

    Not `inspect.getdoc`, which hands a class or method without one its base's:
    every exception would read "Common base class for all non-exit exceptions."
    """
    raw = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(raw) if isinstance(raw, str) and raw.strip() else ""


def _signature(obj: Any) -> str:
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):  # many C callables carry no signature
        return ""


def _bases(obj: Any) -> str:
    """``Bases: socketserver.ThreadingMixIn, http.server.HTTPServer`` for a class, else ``""``."""
    if not inspect.isclass(obj):
        return ""
    names = [
        b.__qualname__ if b.__module__ == "builtins" else f"{b.__module__}.{b.__qualname__}"
        for b in obj.__bases__
        if b is not object
    ]
    return f"Bases: {', '.join(names)}" if names else ""


def _section(module: str, name: str, obj: Any, documented: Documented) -> Section | None:
    """The member's section: its name and signature, its bases, its docstring.

    A class without a docstring still has one when it has bases, which say what
    it is (``ThreadingHTTPServer``: a ``ThreadingMixIn`` and an ``HTTPServer``).
    """
    doc, bases = _doc(obj), _bases(obj)
    if not (doc or bases) or not documented.claim(obj, doc):
        return None
    header = f"{'class ' if inspect.isclass(obj) else ''}{name}{_signature(obj)}"
    body = "\n\n".join(part for part in (bases, doc) if part)
    return Section(module, name, f"{header}\n\n{body}")


def _family(name: str, module: Any) -> tuple[set[str], str | None]:
    """The modules a listed module's own objects come from, and the prefix of its package's."""
    last = name.rsplit(".", 1)[-1]
    own = {name, module.__name__, f"_{last}", f"_{last.lower()}", *_ACCELERATORS.get(name, ())}
    package = f"{name}." if hasattr(module, "__path__") else None
    return own, package


def public_members(name: str, module: Any) -> list[tuple[str, Any]]:
    """The public classes and functions of a module, sorted by name (see the module docstring)."""
    exported = getattr(module, "__all__", None)
    if exported is not None:
        listed = [*exported, *_UNEXPORTED.get(name, ())]
        names = [n for n in listed if isinstance(n, str) and hasattr(module, n)]
        members = [(n, getattr(module, n)) for n in names]
    else:
        own, package = _family(name, module)
        members = [
            (n, value)
            for n, value in vars(module).items()
            if not n.startswith("_")
            and (
                (origin := getattr(value, "__module__", None)) in own
                or (package is not None and isinstance(origin, str) and origin.startswith(package))
            )
        ]
    return sorted(
        ((n, value) for n, value in members if inspect.isclass(value) or inspect.isroutine(value)),
        key=lambda item: item[0],
    )


def _method_sections(
    module: str, qualname: str, cls: type, documented: Documented
) -> Iterator[Section]:
    """A class's own public methods (and properties), each its own section."""
    for attr, raw in sorted(vars(cls).items()):
        if attr.startswith("_"):
            continue
        value = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
        if inspect.isroutine(value) or isinstance(value, property):
            section = _section(module, f"{qualname}.{attr}", value, documented)
            if section is not None:
                yield section


def module_sections(
    name: str, module: Any, documented: Documented | None = None
) -> Iterator[Section]:
    """Yield a module's docstring section, then one per documented public member.

    The module's functions and classes come before the classes' methods, so a
    module function that is a bound method (``random.randint`` of a hidden
    ``Random``) is documented under its module name.

    Args:
        name: The module's name as listed (``os.path``, not ``posixpath``).
        module: The imported module.
        documented: What other modules documented already: left out here, and
            what this one documents is added.
    """
    documented = Documented() if documented is None else documented
    if doc := inspect.getdoc(module):
        yield Section(name, name, f"{name}\n\n{doc}")
    classes = []
    for attr, member in public_members(name, module):
        qualname = f"{name}.{attr}"
        if inspect.isclass(member):
            if id(member) in documented.objects:
                continue
            classes.append((qualname, member))
        section = _section(name, qualname, member, documented)
        if section is not None:
            yield section
        elif inspect.isclass(member):  # undocumented, or its doc is a copy: its methods still count
            documented.claim(member)
    for qualname, cls in classes:
        yield from _method_sections(name, qualname, cls, documented)


def _import(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module(name)
    except Exception:  # a module missing from this build (e.g. no _ssl) is just left out
        return None


def stdlib_sections() -> Iterator[tuple[str, list[Section]]]:
    """Yield ``(module, sections)`` for each module of `MODULES` that imports here."""
    documented = Documented()
    for name in MODULES:
        module = _import(name)
        if module is not None:
            yield name, list(module_sections(name, module, documented))


def stdlib_documents() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield ``(source, text, metadata)`` per module: all its sections as one text.

    The corpus as label checks and benchmarks read it, one text per module; what
    is ingested is the sections apart (`stdlib_sections`).
    """
    for name, sections in stdlib_sections():
        text = "\n\n".join(section.text for section in sections)
        yield f"pydoc:{name}", text, {"module": name, "kind": "module"}


def ensure_python_docs(
    kb: KnowledgeBase,
    collection: str = COLLECTION,
    progress: Callable[[int, int], None] | None = None,
) -> IngestResult | None:
    """Ingest the demo corpus unless the collection already holds it; return the counts when it ran.

    Each module is one ingest call of its sections, each a `Document` whose
    ``section`` metadata places all its chunks; `progress` is told modules done.
    """
    if any(c.name == collection and c.chunks > 0 for c in kb.collections()):
        return None
    total = IngestResult()
    modules = list(stdlib_sections())
    for index, (_, sections) in enumerate(modules, start=1):
        result = kb.ingest([s.document() for s in sections], collection=collection)
        total.documents_added += result.documents_added
        total.documents_skipped += result.documents_skipped
        total.documents_replaced += result.documents_replaced
        total.chunks_added += result.chunks_added
        if progress:
            progress(index, len(modules))
    return total
