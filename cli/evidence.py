"""``arcana-loop stale`` and ``diff``: answers whose evidence changed since, and how two runs differ.

Also what an ingest says of the answers it made stale (`StaleWatch`).
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from arcana_loop.cli.common import (
    database_errors,
    fail,
    knowledge_base,
    out,
    require_collection,
    shown,
    shown_path,
)
from arcana_loop.cli.threads import DEFAULT_CHECKPOINTER, StoredCheckpointerOption

logger = logging.getLogger(__name__)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for tools.")]


def _chunks(chunks: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(
        f"{c['chunk_id']} {shown_path(c['source']) if c['source'] else '(no source)'}"
        for c in chunks
    )


def stale_command(
    collection: Annotated[
        str | None,
        typer.Option("--collection", "-c", help="Only answers resting on this collection."),
    ] = None,
    checkpointer: StoredCheckpointerOption = DEFAULT_CHECKPOINTER,
    as_json: JsonOption = False,
) -> None:
    """List the finished threads whose answer rests on text that has changed or been deleted since."""
    from arcana_loop.graph.stale import stale_answers
    from arcana_loop.knowledge.names import means_every_collection, normalize_collection_name

    every = collection is None or means_every_collection(collection)
    if collection is not None and not every:
        try:
            normalize_collection_name(collection)
        except ValueError as exc:
            fail(str(exc), "name a collection, or -c all for every one")
    kb = knowledge_base()
    try:
        with database_errors("could not check the answers"):
            stale = stale_answers(checkpointer, collection=collection, knowledge_base=kb)
    except ValueError as exc:
        fail(str(exc), "pass --checkpointer postgres, memory or sqlite:PATH")
    if collection is not None and not every and not stale:
        # a deleted collection's answers are listed above; a name never stored is a typo
        require_collection(kb, collection, "could not check the answers")
    if as_json:
        print(json.dumps([s.to_dict() for s in stale], ensure_ascii=False, indent=2))
        return
    if not stale:
        out.print("No answer rests on text that has changed since.")
        return
    # a block per thread, its id whole on its own line: it is what the next command takes
    for answer in stale:
        out.print(
            f"Thread {shown(answer.thread_id)}: {shown(repr(answer.question))}", soft_wrap=True
        )
        for kind, chunks in (("changed", answer.changed), ("deleted", answer.deleted)):
            for line in _chunks(chunks).splitlines():
                out.print(f"  {kind}: {shown(line)}", soft_wrap=True, highlight=False)
    out.print(
        "[dim]Ask again on a thread: arcana-loop ask QUESTION --thread-id THREAD (it says what changed)[/]"
    )


def _side(value: Any, label: str) -> str:
    return f"  {label}: {shown(json.dumps(value, ensure_ascii=False, default=str))}"


def _print_diff(diff: Any) -> None:
    out.print(f"A: {shown(diff.a)}\nB: {shown(diff.b)}")
    if diff.questions[0] != diff.questions[1]:
        out.print(
            _side(diff.questions[0], "question A") + "\n" + _side(diff.questions[1], "question B")
        )
    first = diff.first_difference
    if first is None:
        out.print("Decisions: the same every turn.")
    else:
        out.print(f"Decisions differ first at turn {first['turn']}:")
        out.print(_side(first["a"], "A") + "\n" + _side(first["b"], "B"))
    for title, searches in (
        ("Searches only in A", diff.searches_only_in_a),
        ("Searches only in B", diff.searches_only_in_b),
    ):
        for search in searches:
            scope = "" if search["collection"] is None else f" in {search['collection']!r}"
            out.print(f"{title}: {shown(repr(search['query']))}{shown(scope)}")
    for search in diff.searches_changed:
        out.print(
            f"Search {shown(repr(search['query']))} found other chunks: "
            f"only in A {shown(', '.join(search['only_in_a']) or '-')}; "
            f"only in B {shown(', '.join(search['only_in_b']) or '-')}"
        )
    out.print(f"Chunks only in A: {shown(', '.join(diff.chunks_only_in_a) or '-')}")
    out.print(f"Chunks only in B: {shown(', '.join(diff.chunks_only_in_b) or '-')}")
    for claim in diff.claims:
        out.print(
            f"Claim {shown(repr(claim['text']))}: A {claim['a'] or 'absent'}, B {claim['b'] or 'absent'}"
        )
    out.print("Answers:\n" + _side(diff.answers[0], "A") + "\n" + _side(diff.answers[1], "B"))
    out.print(
        f"Tokens: A {diff.tokens[0] if diff.tokens[0] is not None else '-'}, "
        f"B {diff.tokens[1] if diff.tokens[1] is not None else '-'}; "
        f"seconds: A {diff.seconds[0] if diff.seconds[0] is not None else '-'}, "
        f"B {diff.seconds[1] if diff.seconds[1] is not None else '-'}"
    )


def diff_command(
    a: Annotated[str, typer.Argument(help="A thread id (its last question) or a record file.")],
    b: Annotated[str, typer.Argument(help="The run to compare with, the same way.")],
    checkpointer: StoredCheckpointerOption = DEFAULT_CHECKPOINTER,
    as_json: JsonOption = False,
) -> None:
    """Show how two runs differ: decisions, searches, chunks, claims' support, answers, tokens, time."""
    from arcana_loop.graph.diff import diff_runs
    from arcana_loop.graph.replay import ReplayError
    from arcana_loop.graph.trace import ThreadNotFoundError

    try:
        with database_errors("could not read the runs"):
            diff = diff_runs(a, b, checkpointer=checkpointer)
    except ThreadNotFoundError as exc:
        fail(f"{exc} in the {checkpointer} checkpointer.", "give a thread id or a record file")
    except (ReplayError, ValueError) as exc:
        fail(str(exc), "give a finished thread's id or a file written by arcana-loop record")
    if as_json:
        print(json.dumps(diff.to_dict(), ensure_ascii=False, indent=2))
        return
    _print_diff(diff)


@dataclass
class StaleWatch:
    """The answers resting on a collection before an ingest, to say how many it makes stale.

    A courtesy of the ingest, never its failure: a checkpointer that cannot be read is
    logged and the count left out.
    """

    answers: list[Any]
    kb: Any

    @classmethod
    def before(cls, kb: Any, collection: str) -> StaleWatch | None:
        """The collection's pinned answers not stale yet; ``None`` for a new collection (nothing rests on it)."""
        from arcana_loop.graph.stale import pinned_answers, stale_among

        try:
            if not any(c.name == collection and c.documents for c in kb.collections()):
                return None
            answers = pinned_answers(DEFAULT_CHECKPOINTER, collection=collection)
            already = {s.thread_id for s in stale_among(answers, kb.chunk_versions)}
        except Exception as exc:  # see the class docstring
            logger.warning("could not read the answers resting on %r: %s", collection, exc)
            return None
        return cls([a for a in answers if a.thread_id not in already], kb)

    def report(self, collection: str) -> None:
        """Say how many of the answers rest on text the ingest changed or removed."""
        from arcana_loop.graph.stale import stale_among

        try:
            made = len(stale_among(self.answers, self.kb.chunk_versions))
        except Exception as exc:  # see the class docstring
            logger.warning("could not check the answers resting on %r: %s", collection, exc)
            return
        if made:
            plural = "s" if made != 1 else ""
            out.print(
                f"Made {made} past answer{plural} stale: {'they rest' if plural else 'it rests'} on"
                f" text this ingest changed or removed"
                f" (arcana-loop stale -c {shown(shlex.quote(collection))})."
            )
        else:
            out.print("Made no past answer stale.")


def register(app: typer.Typer) -> None:
    """Add the evidence commands to the CLI."""
    app.command("stale")(stale_command)
    app.command("diff")(diff_command)
