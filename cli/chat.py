"""``arcana-loop chat``: a conversation on one thread, question after question.

Each line is a question on the same thread, so a follow-up ("and what about its
timeout?") is read with the questions before it; ``/new`` starts a fresh thread,
``/help`` lists the commands and ``/exit`` (or end of input) ends the chat. The
loop's steps are printed as they happen, then the answer and its sources.

A line that the loop refuses (blank after cleaning, too long, not valid text) is
reported on one line and the chat goes on; a line that looks like a command
(``/word``) but is not one is reported, never sent as a question. To ask a
question that starts with ``/``, double it: ``//usr/lib holds what?`` is sent as
``/usr/lib holds what?``. A model or database error ends the chat, as it ends
``ask``.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from arcana_loop.cli.common import (
    MODEL_HINT,
    StreamedAnswer,
    announce_offline,
    checkpointer_spec_of,
    controller_spec,
    database_errors,
    err,
    fail,
    follow_up_scope,
    found_note,
    out,
    prepare_scope,
    print_kind,
    print_sources,
    readable_text,
    report,
    shown,
    shown_again,
    stale_line,
)
from arcana_loop.cli.flags import (
    FROM_FLAGS,
    RUN_FLAGS,
    SCOPE_FLAG,
    THREAD_FLAG,
    loop_flags,
    with_help,
)
from arcana_loop.cli.threads import DEFAULT_CHECKPOINTER, CheckpointerOption

NEW = "/new"
HELP = "/help"
EXIT = ("/exit", "/quit")
PROMPT = "You> "
COMMANDS_HELP = (
    f"{NEW} starts a fresh thread, {HELP} shows this, {EXIT[0]} (or Ctrl-D) ends the chat;"
    " a question starting with / is written with two (//...)"
)
_COMMAND_SHAPE = re.compile(r"/[A-Za-z][\w-]*")


def _step_line(event: dict[str, Any]) -> str | None:
    """A step as it happens, on one line (``None`` for the events the chat does not show)."""
    if event.get("event") == "loop_start":
        return stale_line(event.get("stale_evidence"))  # a follow-up's earlier evidence changed
    if event.get("event") != "tool_call":
        return None
    turn = f"[cyan]{event['iteration'] + 1}[/]"
    if event.get("tool") == "search":
        found = found_note(list(event.get("returned_chunk_ids") or []))
        note = " (duplicate)" if "duplicate_of" in event else ""
        return f"  {turn} search{note} {shown(repr(event['args'].get('query')))} -> {found}"
    if event.get("tool") in ("answer", "synthesis"):
        return f"  {turn} {event['tool']}"
    return f"  {turn} {shown(event.get('tool'))}: {shown(str(event.get('summary'))[:120])}"


def _show_step(event: dict[str, Any]) -> None:

    line = _step_line(event)
    if line is not None:
        err.print(line, highlight=False)


def _read_line() -> str | None:
    """The next line typed, or ``None`` at the end of input (Ctrl-D)."""
    try:
        return input(PROMPT)
    except EOFError:
        return None


@loop_flags(
    *with_help(
        RUN_FLAGS,
        answer_model="Optional model that rewrites each answer.",
        max_iterations="Most controller turns per question (default 10).",
    )
)
def chat(
    collection: SCOPE_FLAG = None,
    options: dict[str, Any] = FROM_FLAGS,
    checkpointer: CheckpointerOption = DEFAULT_CHECKPOINTER,
    thread_id: THREAD_FLAG = None,
) -> None:
    """Chat: ask question after question on one thread (/new for a fresh thread, /exit to stop)."""
    from arcana_loop.core.text import check_thread_id

    saver = checkpointer_spec_of(checkpointer)
    if saver is None:
        fail(
            "a chat needs a checkpointer to keep its conversation.",
            "pass --checkpointer postgres, memory or sqlite:PATH",
        )
    try:
        check_thread_id(thread_id)
    except ValueError as exc:
        fail(str(exc), "pass the thread id that ask or chat printed")
    asked = follow_up_scope(collection, saver, thread_id)
    scope, kb = prepare_scope(asked.collections, thread_id=asked.thread_id)
    model = options.pop("controller_llm", None)
    spec = controller_spec(model, announce=False)
    options |= {  # every question's, checked once before the first
        "collection": scope,
        "controller_llm": spec,
        "search_fn": kb.search,
        "checkpointer": saver,
    }
    _check_options(options)
    announce_offline(model, spec)  # once the options passed: never before their error
    thread = thread_id or str(uuid.uuid4())
    out.print(f"[dim]Thread {shown(thread)}: ask a question; {COMMANDS_HELP}.[/]")
    while (line := _read_line()) is not None:
        question = line.strip()
        if question in EXIT:
            break
        if question == NEW:
            thread = str(uuid.uuid4())
            out.print(f"[dim]New thread {thread}.[/]")
            continue
        if question == HELP:
            out.print(f"[dim]Commands: {COMMANDS_HELP}.[/]")
            continue
        if _COMMAND_SHAPE.fullmatch(question.split(maxsplit=1)[0] if question else ""):
            report(f"unknown command {question.split()[0]!r}.", f"commands: {COMMANDS_HELP}")
            continue
        if question.startswith("//"):
            question = question[1:]
        if not question:
            continue
        streamed = StreamedAnswer(heading=False)
        result = _ask(question, thread, options, streamed)
        if result is None:
            streamed.close(None)
        else:
            _show(result, streamed)


def _check_options(options: dict[str, Any]) -> None:
    """Refuse, before the first question, options every question would be refused for."""
    from arcana_loop.graph.run import check_run_options
    from arcana_loop.nodes.models import ModelSpecError

    try:
        check_run_options(**options)
    except ModelSpecError as exc:
        fail(str(exc), MODEL_HINT)
    except (ValueError, TypeError) as exc:
        fail(str(exc), "see arcana-loop chat --help")


def _show(result: Any, streamed: StreamedAnswer) -> None:
    """The answer (unless it streamed), its sources, and how the question ended unless answered."""
    print_kind(result)
    if not shown_again(result, streamed.close(result.answer)):
        text = readable_text(result)
        out.print(shown(text) if text else "[dim](no answer)[/]", highlight=False)
    print_sources(result)
    if result.terminated_by != "answered":
        out.print(
            f"[dim]Ended: {result.terminated_by}"
            + (f" ({shown(result.error)})" if result.error else "")
            + "[/]"
        )


def _ask(
    question: str, thread: str, options: dict[str, Any], streamed: StreamedAnswer
) -> Any | None:
    """Run one question of the conversation.

    A question the loop refuses is reported and gives `None` (the chat goes on); a
    model spec or database error ends the chat on one line.
    """
    from arcana_loop.graph import run
    from arcana_loop.nodes.models import ModelSpecError

    try:
        with database_errors("the run failed"):
            return run(
                question,
                thread_id=thread,
                on_event=_show_step,
                # on a terminal the answer prints as it is written
                on_token=streamed.token if out.is_terminal else None,
                **options,
            )
    except ModelSpecError as exc:
        fail(str(exc), MODEL_HINT)
    except (ValueError, TypeError) as exc:  # the line the loop refused; the options were checked
        report(str(exc), "ask another question, or /exit")
        return None
    raise AssertionError("unreachable")
