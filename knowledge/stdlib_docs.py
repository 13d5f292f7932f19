"""The demo corpus: the Python standard library's own docstrings, read from the running interpreter.

Each module of a curated list becomes one document named ``pydoc:<module>``: the
module docstring followed by the docstrings of its public classes, functions and
methods. Nothing is downloaded; the text is whatever this interpreter ships.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from arcana_loop.knowledge.base import KnowledgeBase
from arcana_loop.knowledge.types import IngestResult

COLLECTION = "python-docs"

MODULES = (
    "abc argparse array asyncio asyncio.tasks asyncio.queues asyncio.locks asyncio.subprocess asyncio.streams base64 bisect "
    "calendar collections collections.abc concurrent.futures configparser contextlib copy csv dataclasses datetime decimal "
    "difflib enum fnmatch fractions functools gc getpass glob gzip hashlib heapq hmac html http.client http.server "
    "importlib inspect io ipaddress itertools json logging logging.handlers math mimetypes multiprocessing operator os "
    "os.path pathlib pickle platform pprint queue random re secrets select shelve shlex shutil signal socket sqlite3 "
    "ssl statistics string struct subprocess sys tarfile tempfile textwrap threading time timeit traceback types "
    "typing unicodedata unittest urllib.parse urllib.request uuid warnings weakref xml.etree.ElementTree zipfile zlib"
).split()


def _member_docs(module: Any) -> Iterator[str]:
    for name, member in sorted(vars(module).items()):
        if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(member) or inspect.isfunction(member) or inspect.isbuiltin(member):
            doc = inspect.getdoc(member)
            if doc:
                yield f"{module.__name__}.{name}\n{doc}"
            if inspect.isclass(member):
                for attr, value in sorted(vars(member).items()):
                    if (
                        not attr.startswith("_")
                        and callable(value)
                        and (doc := inspect.getdoc(value))
                    ):
                        yield f"{module.__name__}.{name}.{attr}\n{doc}"


def stdlib_documents() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield ``(source, text, metadata)`` per module of the curated list that imports here."""
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:  # a module missing from this build (e.g. no _ssl) is just left out
            continue
        parts = [f"{name}\n{inspect.getdoc(module) or ''}", *_member_docs(module)]
        yield f"pydoc:{name}", "\n\n".join(parts), {"module": name, "kind": "module"}


def ensure_python_docs(
    kb: KnowledgeBase,
    collection: str = COLLECTION,
    progress: Callable[[int, int], None] | None = None,
) -> IngestResult | None:
    """Ingest the demo corpus unless the collection already holds it; return the counts when it ran."""
    if any(c.name == collection and c.chunks > 0 for c in kb.collections()):
        return None
    total = IngestResult()
    documents = list(stdlib_documents())
    for index, (source, text, metadata) in enumerate(documents, start=1):
        result = kb.ingest(text, collection=collection, name=source, metadata=metadata)
        total.documents_added += result.documents_added
        total.documents_skipped += result.documents_skipped
        total.documents_replaced += result.documents_replaced
        total.chunks_added += result.chunks_added
        if progress:
            progress(index, len(documents))
    return total
