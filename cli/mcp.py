"""``arcana-loop mcp``: the knowledge base and the loop as an MCP server, on the official SDK.

Over stdio (what a desktop agent launches) or streamable HTTP (``--http``, on
loopback unless ``--host`` says otherwise), on the knowledge base the CLI uses
(``DATABASE_URL``, or the embedded server) and with the options `ask` takes. Tools:

- `search`: chunks with their id, text, title, source, section, pages, score and collection;
- `ask`: the loop's answer, how it ended, and the chunks it cites (`LoopResult.sources`);
- `list_collections`, `list_documents`;
- `read_document`: a stored document's chunks in order, as search shows them.

Every result is JSON (structured content, with the tool's output schema). What a
caller can get wrong (an empty question, an unknown collection, a source naming no
document, a database that went away) is a tool error carrying one sentence; the SDK
words anything else as "Error executing tool <name>" and logs it.

A file's source is served as `ask`'s sources are (`core.sources.relative_sources`):
relative to the deepest folder holding its collection's files, never where the files
lie on the server; `read_document` takes it back as given.

A server started with ``--collection`` is locked to those collections: a call that
names another one is a tool error, a call that names none reads them, and
`list_collections` and `list_documents` show only them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from arcana_loop.cli.common import shortened
from arcana_loop.cli.stored import StoredChunk, document_chunks, find_document, place_of
from arcana_loop.core.sources import Source, relative_sources

SERVER_NAME = "arcana-loop"
INSTRUCTIONS = """\
A knowledge base of ingested documents, and a loop that answers questions from it.
Use `search` to read chunks yourself, or `ask` to have the loop search and answer with
the chunks it cites (its answer cites chunk ids in square brackets). `list_collections`
and `list_documents` show what is stored; `read_document` reads one document whole, in
order. {scope}"""
"""What a client's model is told about the server; ``{scope}`` says which collections it reads."""
LOCKED_SCOPE = "This server reads only the collection(s) {names}."
OPEN_SCOPE = "Name a collection to read only it; by default every collection is read."
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Addresses only this machine reaches (the SDK also guards them against DNS rebinding)."""
DEFAULT_CHUNKS_SHOWN = 50
"""Chunks `read_document` returns unless asked for more (a long PDF holds hundreds)."""


class FoundChunk(TypedDict):
    """One search hit."""

    id: str
    text: str
    title: str
    source: str | None
    section: str | None
    pages: str | None
    score: float
    collection: str | None


class SearchResult(TypedDict):
    """What `search` returns: the hits, best first."""

    chunks: list[FoundChunk]
    unmatched: list[str]
    """The query's words no chunk of the searched collections holds: what the knowledge base never mentions."""


class Answer(TypedDict):
    """What `ask` returns."""

    answer: str | None
    terminated_by: str | None
    """``answered``, ``gave_up``, ``max_iterations`` or ``error``."""
    answer_kind: str | None
    """``extracted``: passages quoted as found, no model wrote them (the offline controller); ``written``: a model's."""
    iterations: int
    error: str | None
    sources: list[Source]
    """Each chunk the answer cites, once, in the order first cited."""


class CollectionRow(TypedDict):
    """A collection and its sizes."""

    name: str
    documents: int
    chunks: int
    embedding_model: str


class Collections(TypedDict):
    """What `list_collections` returns."""

    collections: list[CollectionRow]


class DocumentRow(TypedDict):
    """A stored document."""

    collection: str
    source: str
    title: str
    chunks: int
    bytes: int
    updated_at: str
    """ISO 8601."""


class Documents(TypedDict):
    """What `list_documents` returns."""

    documents: list[DocumentRow]


class DocumentText(TypedDict):
    """What `read_document` returns: the document and its chunks from ``start``, in order."""

    document: DocumentRow
    chunks: list[StoredChunk]
    start: int
    total: int
    """How many chunks the document has."""


CollectionArg = Annotated[
    str | None,
    Field(description="A collection to read (see list_collections); none: the server's scope."),
]


class ServerScope:
    """The collections the server reads: those it was locked to, or every one."""

    def __init__(self, kb: Any, locked: tuple[str, ...]) -> None:
        self.kb = kb
        self.locked = locked

    def names(self, requested: str | None) -> list[str] | None:
        """The collections a call reads (`None`: every one); a name outside the scope is a tool error."""
        if requested is None or requested.strip() in ("", "all"):
            return list(self.locked) or None
        if self.locked and requested not in self.locked:
            raise ToolError(
                f"this server reads only {_listed(self.locked)}: {_said(requested)} is not one of them"
            )
        known = [c.name for c in self.kb.collections()]
        if requested not in known:
            raise ToolError(
                _one_sentence(
                    f"no collection named {_said(requested)}; known collections: {_listed(known) or 'none'}"
                )
            )
        return [requested]

    def collections(self, requested: str | None) -> list[str]:
        """The names of the collections a call reads, every one spelled out."""
        names = self.names(requested)
        return names if names is not None else [c.name for c in self.kb.collections()]


def _listed(names: Any) -> str:
    return ", ".join(repr(n) for n in names)


MAX_ERROR_CHARS = 500
"""Longest tool error: a message echoing a caller's 100,000-character name is cut here."""


def _said(name: str) -> str:
    """A name a caller gave, quoted as an error repeats it: cut when long."""
    return repr(name) if len(name) <= 80 else repr(name[:77]) + "..."


def _one_sentence(message: str) -> str:
    """A message on one line, at most `MAX_ERROR_CHARS` long."""
    return shortened(" ".join(message.split()), MAX_ERROR_CHARS)


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """Turn what a caller can cause, or a database that went away, into a tool error of one sentence."""
    import psycopg

    from arcana_loop.cli.common import masked
    from arcana_loop.knowledge.errors import DatabaseUnavailable, KnowledgeBaseError

    try:
        yield
    except ToolError:
        raise
    except (DatabaseUnavailable, psycopg.Error) as exc:
        raise ToolError(f"the knowledge base is unreachable or went away: {masked(exc)}") from exc
    except (ValueError, TypeError, LookupError, KnowledgeBaseError) as exc:
        raise ToolError(_one_sentence(str(exc))) from exc


def served_sources(infos: list[Any]) -> dict[str, str]:
    """Each document's source as served: a file relative to the deepest folder of its collection's files."""
    shown = relative_sources(
        [{"collection": d.collection, "metadata": {"source": d.source}} for d in infos]
    )
    return {d.id: c["metadata"]["source"] for d, c in zip(infos, shown, strict=True)}


def _as_served(message: str, kb: Any, collections: Sequence[str]) -> str:
    """`message` with each stored source of `collections` written as served (`served_sources`)."""
    shown: dict[str, str] = {}
    for name in collections:
        infos = kb.documents(name)
        served = served_sources(infos)
        shown.update({d.source: served[d.id] for d in infos})
    for stored in sorted(shown, key=len, reverse=True):  # a path before any path it begins
        message = message.replace(stored, shown[stored])
    return message


def _document_row(info: Any, source: str) -> DocumentRow:
    return {
        "collection": info.collection,
        "source": source,
        "title": info.title,
        "chunks": info.chunks,
        "bytes": info.bytes,
        "updated_at": info.updated_at.isoformat(),
    }


def build_server(kb: Any, *, collections: tuple[str, ...] = (), **run_options: Any) -> MCPServer:
    """The MCP server over `kb`, locked to `collections` when given; `run_options` go to every `ask`.

    Args:
        kb: The `KnowledgeBase`.
        collections: The collections the server reads (none: every one).
        run_options: `run()` keywords for every question (``controller_llm``,
            ``answer_llm``, ``max_iterations``, ``grounder``...).
    """
    from arcana_loop import __version__

    scope = ServerScope(kb, collections)
    described = LOCKED_SCOPE.format(names=_listed(collections)) if collections else OPEN_SCOPE
    server: MCPServer = MCPServer(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS.format(scope=described),
        log_level="WARNING",  # the CLI's --verbose sets the root logger; the SDK adds nothing
    )

    @server.tool(annotations=READ_ONLY)
    def search(
        query: Annotated[str, Field(description="What to look for, in words or code names.")],
        collection: CollectionArg = None,
        limit: Annotated[int, Field(ge=1, le=50, description="Most chunks returned.")] = 5,
        mode: Annotated[
            Literal["hybrid", "semantic", "fulltext"],
            Field(description="hybrid (default), semantic (vectors) or fulltext (BM25)."),
        ] = "hybrid",
    ) -> SearchResult:
        """Search the knowledge base's chunks; returns them best first with their place and score."""
        with tool_errors():
            found = kb.search(query, collection=scope.names(collection), limit=limit, mode=mode)
            hits = relative_sources(found)
        return {
            "chunks": [
                {
                    "id": hit["id"],
                    "text": hit["text"],
                    **place_of(hit.get("metadata") or {}, hit.get("collection") or ""),
                    "score": hit["score"],
                    "collection": hit.get("collection"),
                }
                for hit in hits
            ],
            "unmatched": list(found.unmatched),
        }

    @server.tool(annotations=READ_ONLY)
    def ask(
        question: Annotated[str, Field(description="The question, as a person would ask it.")],
        collection: CollectionArg = None,
    ) -> Answer:
        """Ask the loop: it searches until it can answer, then answers citing chunk ids; returns the answer, how it ended and the cited sources."""
        from arcana_loop.graph import run

        with tool_errors():
            names = scope.names(collection)
            result = run(
                question,
                collection="all" if names is None else names[0] if len(names) == 1 else names,
                search_fn=kb.search,
                **run_options,
            )
        return {
            "answer": result.answer,
            "terminated_by": result.terminated_by,
            "answer_kind": result.answer_kind,
            "iterations": result.iterations,
            "error": result.error,
            "sources": result.sources,
        }

    @server.tool(annotations=READ_ONLY)
    def list_collections() -> Collections:
        """List the collections this server reads, with their document and chunk counts."""
        with tool_errors():
            readable = set(scope.collections(None))
            infos = [c for c in kb.collections() if c.name in readable]
        return {
            "collections": [
                {
                    "name": c.name,
                    "documents": c.documents,
                    "chunks": c.chunks,
                    "embedding_model": c.embedding_model,
                }
                for c in infos
            ]
        }

    @server.tool(annotations=READ_ONLY)
    def list_documents(collection: CollectionArg = None) -> Documents:
        """List the stored documents (source, title, chunks, size, last written), by collection."""
        with tool_errors():
            infos = [d for name in scope.collections(collection) for d in kb.documents(name)]
            sources = served_sources(infos)
        return {"documents": [_document_row(d, sources[d.id]) for d in infos]}

    @server.tool(annotations=READ_ONLY)
    def read_document(
        source: Annotated[
            str,
            Field(
                description="The document's source as list_documents gives it (or its file name,"
                " or a glob naming one document)."
            ),
        ],
        collection: CollectionArg = None,
        start: Annotated[int, Field(ge=0, description="First chunk to return (0-based).")] = 0,
        limit: Annotated[
            int, Field(ge=1, le=1000, description="Most chunks returned.")
        ] = DEFAULT_CHUNKS_SHOWN,
    ) -> DocumentText:
        """Read a stored document: its chunks in order, each with title, section path, pages, text and id."""
        with tool_errors():
            searched = scope.collections(collection)
            try:
                document = find_document(kb, source, searched)
            except LookupError as exc:
                # it names documents: as served, not where the server keeps them
                raise LookupError(_as_served(str(exc), kb, searched)) from None
            chunks = document_chunks(kb, document.id)
            served = served_sources(kb.documents(document.collection))[document.id]
        return {
            "document": _document_row(document, served),
            "chunks": [{**c, "source": served} for c in chunks[start : start + limit]],
            "start": start,
            "total": len(chunks),
        }

    return server


def serve(
    *,
    collections: list[str] | None,
    http: bool,
    host: str,
    port: int,
    **run_options: Any,
) -> None:
    """Check the options and the collections as `ask` would, then serve until stopped.

    A bad option or a collection that does not exist ends the command on one line
    before anything is served.
    """
    from arcana_loop.cli.common import MODEL_HINT, err, fail, knowledge_base, prepare_scope
    from arcana_loop.graph.run import check_run_options
    from arcana_loop.knowledge.names import RESERVED_COLLECTION_NAME
    from arcana_loop.nodes.models import ModelSpecError

    if collections:
        _, kb = prepare_scope(collections, one_search=False)  # a call may search one of them
        if collections == [RESERVED_COLLECTION_NAME]:
            collections = None  # "all" (checked alone above) is every collection: no lock
    else:
        kb = knowledge_base()
    try:
        check_run_options(search_fn=kb.search, **run_options)
    except ModelSpecError as exc:
        fail(str(exc), MODEL_HINT)
    except (ValueError, TypeError) as exc:
        fail(str(exc), "see arcana-loop mcp --help")
    server = build_server(kb, collections=tuple(collections or ()), **run_options)
    scope = ", ".join(collections) if collections else "every collection"
    if http:
        err.print(f"[dim]MCP server ({scope}) at http://{host}:{port}/mcp; Ctrl-C stops it.[/]")
        if host not in LOOPBACK_HOSTS:
            err.print(
                f"[yellow]Listening on {host}: the server has no authentication, so anyone who"
                " can reach this address can read the knowledge base and run questions.[/]"
            )
        server.run("streamable-http", host=host, port=port)
    else:
        # stdout carries the protocol: what a person should see goes to stderr
        err.print(f"[dim]MCP server ({scope}) on stdio.[/]")
        server.run("stdio")
