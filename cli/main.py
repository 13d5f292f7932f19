"""``arcana-loop``: ingest documents, ask questions, list and delete collections.

Every error a user can cause ends with one sentence (and a hint where one helps)
on stderr and a non-zero exit code, never a traceback. Database errors have their
passwords masked (`knowledge.redact`).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, NamedTuple, NoReturn

import typer
from rich import box
from rich.table import Table

from arcana_loop.cli import evidence, threads
from arcana_loop.cli.chat import chat
from arcana_loop.cli.common import (
    MODEL_HINT,
    StreamedAnswer,
    announce_offline,
    cell,
    check_question,
    checkpointer_spec_of,
    configure_logging,
    controller_spec,
    database_errors,
    err,
    fail,
    follow_up_scope,
    knowledge_base,
    out,
    prepare_scope,
    print_ingest_summary,
    print_result,
    progress_bar,
    require_collection,
    shown,
    shown_path,
    stale_line,
    step_note,
    where_filter,
)
from arcana_loop.cli.doctor import doctor, merge_pending
from arcana_loop.cli.documents import documents_app
from arcana_loop.cli.entities import entities_app
from arcana_loop.cli.eval import eval_app
from arcana_loop.cli.evidence import StaleWatch
from arcana_loop.cli.flags import (
    FROM_FLAGS,
    RUN_FLAGS,
    SCOPE_FLAG,
    THREAD_FLAG,
    collection_name,
    loop_flags,
)
from arcana_loop.cli.help import FlagHelpGroup
from arcana_loop.cli.reembed import reembed
from arcana_loop.cli.server import server_app

app = typer.Typer(
    help="An agentic RAG loop over a PostgreSQL + pgvector knowledge base.",
    no_args_is_help=True,
    add_completion=False,
    cls=FlagHelpGroup,
)
app.add_typer(eval_app, name="eval")


def _print_version(value: bool) -> None:
    if value:
        from arcana_loop import __version__

        out.print(f"arcana-loop {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Show the INFO logs of arcana-loop and its dependencies."
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """An agentic RAG loop over a PostgreSQL + pgvector knowledge base."""
    configure_logging(verbose=verbose)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or directories to ingest.")],
    collection: Annotated[
        str, typer.Option("--collection", "-c", help="Collection to ingest into.")
    ] = "default",
    entities: Annotated[
        bool,
        typer.Option(
            "--entities",
            help="Also build the knowledge graph (entities) of the new chunks (offline extractor).",
        ),
    ] = False,
    sync: Annotated[
        bool,
        typer.Option(
            "--sync",
            help="Make the collection match each directory: also remove the documents whose file is gone.",
        ),
    ] = False,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            help="Glob of the files to read (repeatable); a file named directly must match it too.",
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            help="Glob of the files to leave out (repeatable), named directly or found in a directory.",
        ),
    ] = None,
    embeddings: Annotated[
        str | None,
        typer.Option(
            "--embeddings",
            metavar="NAME",
            help="Embedder of a new collection: minilm (the default with the onnx extra),"
            " wordllama or provider:model; an existing collection keeps its own.",
        ),
    ] = None,
) -> None:
    """Ingest files or directories (text, Markdown, reStructuredText, HTML, PDF, Word, Excel) into a collection.

    Unchanged files are skipped; a changed file re-embeds only its changed chunks.
    """
    from arcana_loop.knowledge.names import created_collection_name

    if collection.startswith("-"):  # `-c --sync`: the flag took the next option as its value
        fail(
            f"--collection was given {collection!r}, which reads as an option, not a name",
            "give the collection's name right after --collection",
        )
    try:
        collection = created_collection_name(collection)
    except ValueError as exc:
        fail(str(exc), "choose another --collection name")
    for path in paths:
        if not path.exists():
            fail(f"{path} does not exist.", "check the path")
        if sync and not path.is_dir():
            fail(f"--sync needs directories; {path} is not one.", "see arcana-loop ingest --help")
    rows: list[tuple[str, Any]] = []
    try:
        _ingest_paths(paths, rows, _Asked(collection, embeddings, entities, sync, include, exclude))
    except KeyboardInterrupt as exc:
        _report_interrupted(collection, rows, exc)


class _Asked(NamedTuple):
    """What an ``ingest`` command asks of every path: its collection, embedder, entities and files."""

    collection: str
    embeddings: str | None
    entities: bool
    sync: bool
    include: list[str] | None
    exclude: list[str] | None


def _ingest_paths(paths: list[Path], rows: list[tuple[str, Any]], asked: _Asked) -> None:
    """Ingest each path in turn, appending its result to `rows`, then print the summary.

    A path that would store nothing (a folder without a file the globs keep, a file they
    leave out) fails before anything is written. A path that fails as it is read (a file
    named directly that is empty or binary) fails after the paths before it were stored:
    the error says which of them are kept.
    """
    from arcana_loop.knowledge.errors import (
        DatabaseUnavailable,
        EmbedderFailed,
        EmbeddingMismatch,
        IngestError,
        KnowledgeBaseError,
    )

    collection, embeddings, entities, sync, include, exclude = asked
    for path in paths:
        _check_finds_files(path, include, exclude)
    kb = knowledge_base(embeddings)
    watch = StaleWatch.before(kb, collection)
    with progress_bar() as progress:
        for path in paths:
            task = progress.add_task(shown(path.name or path), total=None)
            failed = f"could not ingest {path}{_kept_before(rows)}"
            with database_errors(
                failed,
                "check that PostgreSQL is running, then ingest again: what was stored is kept",
            ):
                try:
                    result = kb.ingest(
                        path,
                        collection=collection,
                        entities=True if entities else None,
                        sync=sync,
                        include=include or None,
                        exclude=exclude or None,
                        progress=lambda done, total, t=task: progress.update(
                            t, completed=done, total=total
                        ),
                    )
                except DatabaseUnavailable:
                    raise  # database_errors words it
                except EmbeddingMismatch as exc:  # --embeddings for a collection of another
                    fail(
                        f"{failed}: {exc}",
                        f"leave out --embeddings, or re-embed the collection first:"
                        f" arcana-loop reembed {shlex.quote(collection)} --embeddings {embeddings}",
                    )
                except EmbedderFailed as exc:  # a provider's service or key
                    fail(
                        f"{failed}: {exc}",
                        "check the embedder's service and key (--embeddings, OPENAI_API_KEY,"
                        " OPENAI_BASE_URL), then ingest again: what was stored is kept",
                    )
                except IngestError as exc:  # says what is wrong with the file, and the fix
                    fail(f"{failed}: {str(exc).removeprefix(f'{path}: ')}")
                except (TypeError, ValueError) as exc:  # a bad glob, typically
                    fail(f"{failed}: {exc}", "see arcana-loop ingest --help")
                except (KnowledgeBaseError, OSError) as exc:
                    fail(
                        f"{failed}: {exc}",
                        "text (UTF-8), Markdown, reStructuredText, HTML, PDF, Word and Excel files can be ingested",
                    )
            rows.append((str(path), result))
    print_ingest_summary(collection, rows, sync=sync)
    if watch is not None:
        watch.report(collection)


def _kept_before(rows: list[tuple[str, Any]]) -> str:
    """What a failing path's error adds when paths before it were stored: they are kept."""
    if not rows:
        return ""
    return f" ({', '.join(path for path, _ in rows)} stored before it, and kept)"


def _report_interrupted(
    collection: str, rows: list[tuple[str, Any]], exc: BaseException
) -> NoReturn:
    """Say on one line what an ingest stopped by Ctrl-C stored, then exit with status 130.

    Each batch of a path is one transaction: the paths done and the batches committed
    are kept (`IngestInterrupted.result`); running the same command again skips them.
    """
    from arcana_loop.knowledge.errors import IngestInterrupted

    results = [result for _, result in rows]
    if isinstance(exc, IngestInterrupted):  # else the path under way had written nothing
        results.append(exc.result)
    stored = sum(r.documents_added + r.documents_replaced for r in results)
    removed = sum(r.documents_removed for r in results)
    if stored or removed:
        kept = f"{_documents(stored)} stored" + (
            f" and {_documents(removed)} removed" if removed else ""
        )
        said = f"{kept} in {collection!r} before it stopped; run it again to finish (it skips them)"
    else:
        said = "nothing of this run was stored; run it again to finish"
    err.print(f"Interrupted: {shown(said)}.", highlight=False)
    raise typer.Exit(130)


def _documents(count: int) -> str:
    return f"{count} document{'s' * (count != 1)}"


GLOBS_HINT = "check --include and --exclude (globs such as '*.md' or 'guides/**')"


def _check_finds_files(path: Path, include: list[str] | None, exclude: list[str] | None) -> None:
    """Fail, before anything is written, when a path holds no file to ingest.

    A directory with no file the globs keep, or a file named directly that they leave
    out: `KnowledgeBase.ingest` would read nothing there. A directory that cannot be
    listed is left to the ingest, which says why.
    """
    from arcana_loop.knowledge.errors import IngestError
    from arcana_loop.knowledge.loading import glob_patterns, globs_keep, walk_directory

    try:
        if not path.is_dir():
            keep, drop = glob_patterns(include, "include"), glob_patterns(exclude, "exclude")
            if globs_keep(PurePosixPath(path.as_posix()), keep, drop):
                return
            left_out = _left_out_by(path, include or [], exclude or [])
            fail(f"{path} {left_out}: nothing was ingested.", GLOBS_HINT)
        if walk_directory(path, include=include or None, exclude=exclude or None):
            return
    except (IngestError, OSError, ValueError):
        return  # the ingest says what is wrong with the folder or the globs
    given = [f"--include {p!r}" for p in include or []] + [
        f"--exclude {p!r}" for p in exclude or []
    ]
    fail(
        f"no file under {path} matched {' '.join(given) or 'the formats ingest reads'}:"
        " nothing was ingested.",
        GLOBS_HINT if given else None,
    )


def _left_out_by(path: Path, include: list[str], exclude: list[str]) -> str:
    """Which globs leave out the file `path`: ``does not match --include ...`` or ``matches --exclude ...``."""
    from arcana_loop.knowledge.loading import globs_keep

    name = PurePosixPath(path.as_posix())
    if not globs_keep(name, include, []):
        return "does not match " + " or ".join(f"--include {p!r}" for p in include)
    dropping = [p for p in exclude if not globs_keep(name, [], [p])]
    return "matches " + " and ".join(f"--exclude {p!r}" for p in dropping)


@app.command()
@loop_flags(*RUN_FLAGS)
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    collection: SCOPE_FLAG = None,
    options: dict[str, Any] = FROM_FLAGS,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole result as JSON.")
    ] = False,
    checkpointer: Annotated[
        str,
        typer.Option(
            "--checkpointer",
            help="Store the run as a thread: postgres, memory, sqlite:PATH or none.",
        ),
    ] = "postgres",
    thread_id: THREAD_FLAG = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            metavar="KEY=VALUE",
            help="Search only chunks whose metadata has KEY=VALUE (repeatable; all must hold). "
            "A VALUE that reads as a JSON number, true, false or null is one; quote it for a string.",
        ),
    ] = None,
) -> None:
    """Ask a question; the demo corpus (python-docs) is ingested on first use. --thread-id asks a follow-up."""
    from arcana_loop.core.text import check_thread_id
    from arcana_loop.graph import run
    from arcana_loop.nodes.models import ModelSpecError

    check_question(question)
    try:
        check_thread_id(thread_id)  # refused before the demo corpus is ingested on a first run
    except (ValueError, TypeError) as exc:
        fail(str(exc), "see arcana-loop ask --help")
    search_filter = where_filter(where or [])
    saver = checkpointer_spec_of(checkpointer)
    if saver is None and thread_id is not None:
        fail(
            "--thread-id needs a checkpointer to keep the thread in.",
            "leave out --checkpointer none (postgres keeps threads), or pass sqlite:PATH",
        )
    asked = follow_up_scope(collection, saver, thread_id)
    scope, kb = prepare_scope(asked.collections, thread_id=asked.thread_id)
    model = options.pop("controller_llm", None)
    spec = controller_spec(model, announce=False)

    said: list[str] = []

    def on_event(event: dict[str, Any], status: Any) -> None:
        if event.get("event") == "loop_start":  # the run passed its checks: now say which model
            announce_offline(model, spec)
            note = None if as_json else stale_line(event.get("stale_evidence"))
            if note:  # before the answer, which may stream
                err.print(note)
                said.append(note)
        if not streamed.started:  # once the answer prints, the spinner has stopped
            status.update(step_note(event))

    streamed = StreamedAnswer()
    try:
        with err.status("Running the loop...") as status, database_errors("the run failed"):
            streamed.status = status
            result = run(
                question,
                collection=scope,
                controller_llm=spec,
                search_fn=kb.search,
                search_opts={"filter": search_filter} if search_filter else None,
                checkpointer=saver,
                thread_id=thread_id,
                on_event=lambda event: on_event(event, status),
                # on a terminal the answer prints as it is written; a pipe or --json gets it whole
                on_token=streamed.token if out.is_terminal and not as_json else None,
                **options,
            )
    except ModelSpecError as exc:
        fail(str(exc), MODEL_HINT)
    except (ValueError, TypeError) as exc:  # an option the loop refused (grounder, thread id, ...)
        fail(str(exc), "see arcana-loop ask --help")
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))  # machine output
        return
    print_result(result, answer_shown=streamed.close(result.answer), stale_shown=bool(said))
    if result.thread_id:
        out.print(f"[dim]{shown(_thread_note(result.thread_id, saver))}[/]")


def _thread_note(thread_id: str, checkpointer: str | None) -> str:
    """Where the run's thread is kept, and the commands that read it and ask on, as they must be typed."""
    if checkpointer == "memory":
        return (
            f"Thread {thread_id} was kept in memory and ends with this command"
            " (--checkpointer postgres or sqlite:PATH keeps it)."
        )
    where = (
        "" if checkpointer in (None, "postgres") else f" --checkpointer {shlex.quote(checkpointer)}"
    )
    quoted = shlex.quote(thread_id)
    return (
        f"Thread {thread_id} (arcana-loop trace {quoted}{where}; a follow-up:"
        f" arcana-loop ask QUESTION --thread-id {quoted}{where})"
    )


@app.command()
def collections(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every field of every collection as JSON.")
    ] = False,
) -> None:
    """List collections with document and chunk counts and their embedding model."""
    kb = knowledge_base()
    with database_errors("cannot list the collections"):
        infos = kb.collections()
    if as_json:
        print(json.dumps([i.to_dict() for i in infos], ensure_ascii=False, indent=2))
        return
    # a name is what the user types next, so it is kept on one line up to 40 characters
    # (a longer one folds: kept whole, it left the counts no room); the model name folds
    names = [cell(info.name) for info in infos]
    width = min(max(map(len, names), default=4), 40)
    table = Table(box=box.HEAVY_HEAD)
    table.add_column("name", overflow="fold", min_width=width, max_width=40)
    table.add_column("documents", justify="right")
    table.add_column("chunks", justify="right")
    table.add_column("embedding model", overflow="fold")
    table.add_column("dimension", justify="right")
    for info, name in zip(infos, names, strict=True):
        table.add_row(
            name,
            str(info.documents),
            str(info.chunks),
            cell(info.embedding_model),
            str(info.dimension),
        )
    out.print(table)
    if infos:
        out.print("[dim]List a collection's documents with arcana-loop documents -c NAME[/]")


@app.command()
def delete(
    collection_argument: Annotated[
        str | None,
        typer.Argument(
            metavar="COLLECTION",
            help="Collection to delete (or the collection of --source).",
            callback=collection_name,
        ),
    ] = None,
    collection_option: Annotated[
        str | None,
        typer.Option(
            "--collection",
            "-c",
            help="The same collection, as an option.",
            callback=collection_name,
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="Delete only these documents: a path as ingested (absolute, or relative to here"
            " or to the ingested directory) or, when no document has that name, a glob such as"
            " 'guides/*.md'.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted, delete nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a collection, or the documents of it that --source names."""
    if collection_argument and collection_option and collection_argument != collection_option:
        fail(
            f"two collections given: {collection_argument!r} and {collection_option!r}.",
            "give the collection once, as COLLECTION or -c NAME",
        )
    collection = collection_argument or collection_option
    if collection is None:
        fail("which collection?", "arcana-loop delete -c NAME [--source PATH_OR_GLOB]")
    kb = knowledge_base()
    if source is None:
        _delete_collection(kb, collection, dry_run=dry_run, yes=yes)
    else:
        _delete_documents(kb, collection, source, dry_run=dry_run, yes=yes)


def _delete_collection(kb: Any, collection: str, *, dry_run: bool, yes: bool) -> None:
    from arcana_loop.knowledge.errors import KnowledgeBaseError

    what = f"collection {collection!r}"
    if dry_run or not yes:  # nobody is asked to confirm deleting what is not there
        require_collection(kb, collection, f"could not read {what}")
    if dry_run:
        out.print(f"Would delete {shown(what)}.")
        return
    if not yes and not typer.confirm(f"Delete {what}?"):
        raise typer.Exit(1)
    try:
        with database_errors(f"could not delete {what}"):
            kb.delete_collection(collection)
    except KnowledgeBaseError as exc:
        fail(str(exc), "list collections with arcana-loop collections")
    out.print(f"Deleted {shown(what)}.")


def _delete_documents(kb: Any, collection: str, source: str, *, dry_run: bool, yes: bool) -> None:
    from arcana_loop.knowledge.errors import KnowledgeBaseError

    try:
        with database_errors(f"could not delete {source!r} of {collection!r}"):
            matches = kb.find_documents(source, collection=collection)
    except KnowledgeBaseError as exc:
        fail(
            str(exc), f"list the documents with arcana-loop documents -c {shlex.quote(collection)}"
        )
    names = [shown_path(d.source) for d in matches]
    # several documents are listed even with --yes: a pattern can reach further than meant
    if dry_run or not yes or len(names) > 1:
        out.print(f"{'Would delete' if dry_run else 'Deleting'} {len(names)} of {collection!r}:")
        for name in names:
            out.print(f"  {shown(name)}", highlight=False, soft_wrap=True)  # a path whole
    if dry_run:
        return
    if not yes and not typer.confirm(f"Delete {len(names)} document{'s' * (len(names) != 1)}?"):
        raise typer.Exit(1)
    with database_errors(f"could not delete {source!r} of {collection!r}"):
        gone = kb.delete_documents(source, collection=collection)
    if len(gone) == 1:
        out.print(f"Deleted document {shown(repr(names[0]))} of {shown(repr(collection))}.")
    else:
        out.print(f"Deleted {len(gone)} documents of {shown(repr(collection))}.")


@app.command("mcp")
@loop_flags(*RUN_FLAGS)
def mcp_server(
    collection: Annotated[
        list[str] | None,
        typer.Option(
            "--collection",
            "-c",
            help="Lock the server to this collection (repeatable): clients read only these.",
        ),
    ] = None,
    options: dict[str, Any] = FROM_FLAGS,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio.")
    ] = False,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on with --http (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on with --http.")] = 8000,
) -> None:
    """Serve the knowledge base and the loop to MCP clients (desktop agents): stdio, or --http.

    Tools: search, ask, list_collections, list_documents, read_document (JSON results).
    """
    try:
        from arcana_loop.cli.mcp import serve
    except ImportError as exc:
        fail(f"the MCP server needs the mcp package ({exc}).", "pip install 'arcana-loop[mcp]'")
    model = options.pop("controller_llm", None)
    serve(
        collections=collection,
        http=http,
        host=host,
        port=port,
        controller_llm=controller_spec(model, announce=False),
        **options,
    )


threads.register(app)
evidence.register(app)


app.command("chat")(chat)
app.command("doctor")(doctor)
# folded into doctor --fix (and the writes that merge on their own); kept for scripts that call it
app.command("merge-pending", hidden=True)(merge_pending)
app.command("reembed")(reembed)


app.add_typer(documents_app, name="documents")
app.add_typer(entities_app, name="entities")
app.add_typer(server_app, name="server")

if __name__ == "__main__":
    app(prog_name="arcana-loop")  # `python -m` would otherwise name the module in usage and hints
