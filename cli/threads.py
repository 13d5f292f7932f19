"""``arcana-loop trace``, ``replay`` and ``record``: read and re-run checkpointed threads.

`ask` stores each run as a thread in the knowledge base's PostgreSQL (``--checkpointer``)
and prints its id; these commands take that id.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from arcana_loop.cli.common import cell, fail, out, print_result, shown
from arcana_loop.cli.flags import FROM_FLAGS, Flag, loop_flags

DEFAULT_CHECKPOINTER = "postgres"
CheckpointerOption = Annotated[
    str,
    typer.Option(
        "--checkpointer", help="Where threads are stored: postgres, memory or sqlite:PATH."
    ),
]


def _existing_store(spec: str) -> str:
    """A SQLite file must hold threads already: these commands only read, and leave the database as it was.

    A file that is not there, is no SQLite database, or holds no checkpoint table is
    refused, rather than made one (LangGraph's saver writes its tables into any file it
    opens). Reading a database kept in WAL mode may leave SQLite's ``-wal`` and ``-shm``
    files beside it, as any reader does.
    """
    if not spec.startswith("sqlite:"):
        return spec
    named = spec.split(":", 1)[1]
    hint = "pass the --checkpointer sqlite:PATH your runs were stored with"
    path = Path(named).expanduser()
    if not path.is_file():
        fail(f"no checkpoint database at {named}.", hint)
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            found = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
            ).fetchone()
    except sqlite3.Error as exc:
        fail(f"{named} is not a checkpoint database ({exc}).", hint)
    if found is None:
        fail(f"{named} holds no checkpoints: it is no checkpoint database.", hint)
    return spec


StoredCheckpointerOption = Annotated[
    str,
    typer.Option(
        "--checkpointer",
        help="Where the threads are stored: postgres, memory or sqlite:PATH.",
        callback=_existing_store,
    ),
]
"""`CheckpointerOption` for commands that only read threads: a missing SQLite file is an error."""


QuestionOption = Annotated[
    int | None,
    typer.Option(
        "--question",
        help="Only this question of the thread's conversation (0 the first, -1 the last).",
    ),
]


def _steps(thread_id: str, checkpointer: str, question: int | None = None) -> list[Any]:
    from arcana_loop.graph.trace import ThreadNotFoundError, trace

    try:
        return trace(thread_id, checkpointer, question=question)
    except ThreadNotFoundError:
        fail(
            f"no thread {thread_id!r} in the {checkpointer} checkpointer.",
            "use the thread id that arcana-loop ask printed, and the same --checkpointer",
        )
    except ValueError as exc:  # a bad --checkpointer or --question
        fail(str(exc), "see arcana-loop trace --help")
    raise AssertionError("unreachable")


def trace_command(
    thread_id: Annotated[str, typer.Argument(help="The thread id that ask printed.")],
    checkpointer: StoredCheckpointerOption = DEFAULT_CHECKPOINTER,
    as_json: Annotated[bool, typer.Option("--json", help="Print the steps as JSON.")] = False,
    question: QuestionOption = None,
) -> None:
    """Show a thread step by step: node, turn, tool calls, searches and chunk ids, time and tokens."""
    rows = _steps(thread_id, checkpointer, question)
    if as_json:
        print(
            json.dumps([r.to_dict() for r in rows], ensure_ascii=False, indent=2)
        )  # machine output
        return
    conversation = len({row.question for row in rows}) > 1
    every = rows if question is None else _steps(thread_id, checkpointer)
    length = unique_prefix_length([row.checkpoint_id for row in every])
    # what happened is the one column that wraps, last and as wide as the terminal leaves it;
    # the others are a word each (tokens only when a model counted some: offline runs have none)
    with_tokens = any(row.tokens for row in rows)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for header in ("step", "node", "turn", "ms", *(("tokens",) if with_tokens else ())):
        table.add_column(header, no_wrap=True)
    # kept whole on one line, as short as the thread allows: `replay --from` takes it as shown
    table.add_column("checkpoint", no_wrap=True, min_width=length)
    table.add_column("what happened", overflow="fold", ratio=1, min_width=20)
    for row in rows:
        what = [
            f"{c['name']}({json.dumps(c['args'], ensure_ascii=False)[:80]})" for c in row.tool_calls
        ]
        what += [
            f"search {s['query']!r} -> {', '.join(s['returned_chunk_ids']) or 'nothing'}"
            + (" (duplicate)" if s["duplicate_of"] is not None else "")
            for s in row.searches
        ]
        what += [e for e in row.events if not e.startswith("search:")]
        if row.error:
            what.append(row.error)
        if row.terminated_by:
            what.append(f"ended: {row.terminated_by}")
        turn = row.iteration + 1  # turns from 1, as ask and chat count them
        table.add_row(
            str(row.step),
            row.node,
            f"q{row.question}.{turn}" if conversation else str(turn),
            f"{row.seconds * 1000:.1f}" if row.seconds is not None else "",
            *((str(row.tokens or ""),) if with_tokens else ()),
            row.checkpoint_id[:length],
            cell("\n".join(what)),
        )
    out.print(table)
    out.print(
        f"[dim]Re-run from a step into a new thread: arcana-loop replay {shown(thread_id)} --from CHECKPOINT[/]"
    )


def unique_prefix_length(ids: list[str], shortest: int = 8) -> int:
    """The fewest leading characters (at least `shortest`) that tell the ids apart.

    A thread's checkpoint ids begin with the time they were written, so their first
    characters are shared; the rest of an id is still shown by ``trace --json``.
    """
    longest = max(map(len, ids), default=shortest)
    for length in range(shortest, longest):
        if len({checkpoint[:length] for checkpoint in ids}) == len(set(ids)):
            return length
    return longest


def resolve_checkpoint(given: str, steps: list[Any]) -> str:
    """The checkpoint id that `given` names: itself, or the one id of the thread it begins.

    An id that begins no checkpoint is returned as given (the replay says it has none).
    """
    ids = [step.checkpoint_id for step in steps]
    if given in ids:
        return given
    matches = sorted({checkpoint for checkpoint in ids if checkpoint.startswith(given)})
    if len(matches) > 1:
        fail(
            f"checkpoint {given!r} is ambiguous: {len(matches)} checkpoints of the thread begin with it.",
            "give it as trace shows it",
        )
    return matches[0] if matches else given


@loop_flags(
    Flag("controller_model", "--model", "Controller model for the re-run (default the thread's)."),
    Flag("max_iterations", help="Override the thread's max_iterations."),
)
def replay_command(
    thread_id: Annotated[
        str | None, typer.Argument(help="The thread to re-run (omit with --record).")
    ] = None,
    checkpointer: CheckpointerOption = DEFAULT_CHECKPOINTER,
    from_checkpoint: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Checkpoint to re-run from, as trace shows it (or any unambiguous start of its id); default the start.",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option("--record", help="Replay a record file instead: no model, no database."),
    ] = None,
    options: dict[str, Any] = FROM_FLAGS,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Re-run a thread from a checkpoint into a new thread, or replay a record file exactly."""
    from arcana_loop.graph.replay import ReplayError, replay

    if record is not None and (thread_id is not None or from_checkpoint is not None):
        given = "a thread id" if thread_id is not None else "--from"
        fail(
            f"replay takes a thread id or --record FILE, not both: {given} was given with --record.",
            "arcana-loop replay THREAD_ID [--from CHECKPOINT], or arcana-loop replay --record run.json",
        )
    try:
        if record is not None:
            differences, result = _replay_file(record)
        elif thread_id is None:
            fail(
                "replay needs a thread id or --record FILE.",
                "arcana-loop replay THREAD_ID, or arcana-loop replay --record run.json",
            )
        else:
            steps = _steps(thread_id, checkpointer)
            start = (
                resolve_checkpoint(from_checkpoint, steps)
                if from_checkpoint is not None
                else steps[0].checkpoint_id
            )
            result = replay(thread_id, checkpointer=checkpointer, checkpoint_id=start, **options)
            differences = []
    except ReplayError as exc:
        hint = (
            "record one with arcana-loop record THREAD_ID --out FILE"
            if record is not None
            else "list checkpoints with arcana-loop trace THREAD_ID"
        )
        fail(str(exc), hint)
    if as_json:
        print(
            json.dumps(
                {**result.to_dict(), "differences": differences}, ensure_ascii=False, indent=2
            )
        )  # machine output
        return
    print_result(result)
    if record is not None:
        out.print(
            "[green]The replay matches the record.[/]"
            if not differences
            else "[red]The replay differs from the record:[/]\n" + shown("\n".join(differences))
        )
    else:
        out.print(f"New thread: {shown(result.thread_id)}")
    if differences:
        raise typer.Exit(1)


def _replay_file(path: Path) -> tuple[list[str], Any]:
    """Check and replay a record file; a file of the wrong shape is a one-line error naming it."""
    from arcana_loop.graph.replay import Record, ReplayError, replay_record, verify_record

    loaded = Record.load(path)
    try:
        return verify_record(loaded), replay_record(loaded)
    except ReplayError:
        raise
    except (
        AttributeError,
        KeyError,
        IndexError,
        TypeError,
        ValueError,
    ) as exc:  # a field of the wrong type or shape
        fail(
            f"{path} is not a replay record ({type(exc).__name__}: {exc}).",
            "replay a file written by arcana-loop record",
        )
        raise AssertionError("unreachable") from exc


def record_command(
    thread_id: Annotated[str, typer.Argument(help="A finished thread.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="The record file to write.")],
    checkpointer: StoredCheckpointerOption = DEFAULT_CHECKPOINTER,
    question: QuestionOption = None,
) -> None:
    """Save a finished question's model replies and search results (the thread's last by default), for an exact replay anywhere."""
    from arcana_loop.graph.replay import NothingToReplay, ReplayError, record_of

    asked = {
        row.question for row in _steps(thread_id, checkpointer)
    }  # an unknown thread fails here
    try:
        written = record_of(thread_id, checkpointer, question=question).save(out_path)
    except NothingToReplay as exc:
        fail(str(exc), "arcana-loop diff still compares it with another run")
    except ReplayError as exc:
        held = question is None or question in asked or 0 < -question <= len(asked)
        hint = (
            "record a thread once its run has ended"
            if held
            else "arcana-loop trace THREAD lists its questions (q0, q1...)"
        )
        fail(str(exc), hint)
    except OSError as exc:
        fail(f"cannot write {out_path} ({exc.strerror}).", "choose a writable path")
    out.print(
        f"Wrote {shown(written)}; replay it with arcana-loop replay --record {shown(written)}"
    )


def register(app: typer.Typer) -> None:
    """Add the thread commands to the CLI."""
    app.command("trace")(trace_command)
    app.command("replay")(replay_command)
    app.command("record")(record_command)
