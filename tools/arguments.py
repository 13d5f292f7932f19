"""What a tool call's arguments may be: the bounds the model boundary holds replies to, and how a refused call is marked.

A reply's tool call whose arguments are too deep, too large or hold an integer a
checkpoint cannot store is refused at the model boundary (``nodes.models``): it becomes
an invalid call whose ``error`` starts with `REFUSED_MARK`, and planning
(``tools.execute``) answers it with `REFUSED_ARGUMENTS` instead of running it.
"""

from __future__ import annotations

import json
from typing import Any

from arcana_loop.core.context import MAX_STORED_INT
from arcana_loop.core.text import scrub

MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of a tool call's arguments the loop keeps (a checkpoint cannot store ~250 levels)."""
MAX_ARGUMENT_CHARS = 100_000
"""Most characters (string lengths plus one per value) in a tool call's arguments the loop keeps."""
KEPT_ARGUMENT_CHARS = 2_000
"""How much of refused arguments, as JSON text, the message and the tool history keep."""
REFUSED_MARK = "arguments refused: "
"""How the model boundary marks, in an invalid call's ``error``, a call whose arguments it would not keep."""


def oversized_arguments(args: Any) -> str | None:
    """Return why a tool call's arguments cannot be kept (too deep, too large, an integer past 64 bits), or ``None``.

    Walks the arguments without recursion, so any depth is measured safely, and stops
    as soon as a bound is crossed.
    """
    pending: list[tuple[Any, int]] = [(args, 1)]
    size = 0
    while pending:
        value, depth = pending.pop()
        size += len(value) if isinstance(value, str) else 1
        if size > MAX_ARGUMENT_CHARS:
            return f"the arguments are larger than {MAX_ARGUMENT_CHARS:,} characters"
        if isinstance(value, int) and not -MAX_STORED_INT - 1 <= value <= MAX_STORED_INT:
            # kept in the reply, it would fail the run when the state is checkpointed
            return "the arguments hold an integer beyond 64 bits"
        if isinstance(value, dict | list | tuple):
            if depth > MAX_ARGUMENT_DEPTH:
                return f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
    return None


def kept_arguments(args: Any) -> str:
    """Return refused arguments as bounded JSON text, what the message and the history keep of them."""
    try:
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
    except (RecursionError, TypeError, ValueError):
        text = f"<{type(args).__name__} that cannot be shown>"
    if len(text) > KEPT_ARGUMENT_CHARS:
        text = (
            text[:KEPT_ARGUMENT_CHARS]
            + f"... [{len(text) - KEPT_ARGUMENT_CHARS:,} more characters]"
        )
    return scrub(text)  # parts nested too deep for the reply's scrubbing may hold lone surrogates
