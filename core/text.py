r"""Text the loop can always store: lone surrogates found and replaced.

A JSON ``"\ud800"`` escape decodes to a lone surrogate, a Python string that cannot
be encoded as UTF-8. Such a string passes through a model call, then breaks whatever
encodes it next (message ids, the PostgreSQL checkpointer, a JSON dump). Run inputs
holding one are refused; model replies and search results get U+FFFD in its place.
"""

from __future__ import annotations

import os
import re
from typing import Any

REPLACEMENT = "\ufffd"
MAX_SCRUB_DEPTH = 100
"""Containers nested deeper than this are left as they are (tool-call arguments that deep are refused anyway)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether a string holds a surrogate code point (never valid on its own in UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def check_text(name: str, value: Any) -> None:
    """Raise a clear error when a string input holds a lone surrogate (the value is not echoed).

    Raises:
        ValueError: naming the input.
    """
    if isinstance(value, str) and has_lone_surrogate(value):
        raise ValueError(
            f"{name} holds a lone surrogate (an unpaired \\ud800-\\udfff code point), which is not valid text"
        )


MAX_THREAD_ID_CHARS = 256
"""The longest thread id: the PostgreSQL checkpointer indexes it (a btree row holds ~2.7 kB)."""
_THREAD_ID_CHARS = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")


def check_thread_id(thread_id: Any) -> None:
    """Raise a clear error for a thread id no checkpointer should be handed.

    Allowed: any string of 1 to `MAX_THREAD_ID_CHARS` characters without control
    characters (UUIDs, slugs, user names, e-mail addresses, non-ASCII text).
    `None` passes: it means "no thread" or "a new one".

    Raises:
        TypeError: if it is not a str.
        ValueError: if it is empty, too long, or holds a control character or a
            lone surrogate; the message gives the length, not the id.
    """
    if thread_id is None:
        return
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id must be a str, got {type(thread_id).__name__}")
    if not thread_id.strip():  # a blank id prints as nothing, and cannot be copied back
        raise ValueError("thread_id must not be empty or blank")
    if len(thread_id) > MAX_THREAD_ID_CHARS:
        raise ValueError(
            f"thread_id is at most {MAX_THREAD_ID_CHARS} characters, got {len(thread_id)}"
        )
    if not _THREAD_ID_CHARS.fullmatch(thread_id):
        raise ValueError("thread_id must not contain control characters (newlines, escapes, NUL)")
    check_text("thread_id", thread_id)


def scrub(text: str) -> str:
    """Return the string with each lone surrogate replaced by U+FFFD."""
    return _SURROGATE.sub(REPLACEMENT, text) if has_lone_surrogate(text) else text


def scrub_deep(value: Any, _depth: int = 0) -> Any:
    """Return JSON-like data with lone surrogates replaced in every string, keys included.

    Unchanged containers are returned as they are, so the common case copies nothing:
    data is first only looked through (`_holds_surrogate`), which builds nothing.
    """
    if isinstance(value, str):
        return scrub(value)
    if _depth == 0 and not _holds_surrogate(value, 0):
        return value
    if _depth >= MAX_SCRUB_DEPTH:
        return value
    if isinstance(value, dict):
        items = [(scrub_deep(k, _depth + 1), scrub_deep(v, _depth + 1)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        scrubbed = [scrub_deep(v, _depth + 1) for v in value]
        if all(a is b for a, b in zip(scrubbed, value, strict=True)):
            return value
        return type(value)(scrubbed) if isinstance(value, tuple) else scrubbed
    return value


def _holds_surrogate(value: Any, depth: int) -> bool:
    """Whether JSON-like data holds a lone surrogate in a string or key `scrub_deep` would reach."""
    if isinstance(value, str):
        return has_lone_surrogate(value)
    if depth >= MAX_SCRUB_DEPTH:
        return False
    if isinstance(value, dict):
        return any(
            _holds_surrogate(k, depth + 1) or _holds_surrogate(v, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_holds_surrogate(v, depth + 1) for v in value)
    return False


MAX_QUESTION_CHARS = 32_000
"""Longest question accepted: past this it is a document, not a question, and would crowd the model's context."""


def check_question(question: Any) -> str:
    """Return the question, or raise a clear error for one that cannot be asked."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question must not be empty or blank")
    if len(question) > MAX_QUESTION_CHARS:
        raise ValueError(
            f"question is {len(question):,} characters; the most accepted is {MAX_QUESTION_CHARS:,}"
        )
    if "\x00" in question:
        raise ValueError("question must not contain NUL characters")
    check_text("question", question)
    return question


def describe_error(exc: BaseException) -> str:
    """Return a one-line, readable description of an exception: ``TypeName: message``, secrets masked."""
    message = mask_secrets(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


SECRET_MASK = "***"
_KEY_SHAPED = re.compile(
    r"\b(?:sk|pk|rk|sess|ghp|gho|xox[abp])[-_][A-Za-z0-9_\-]{12,}|(?<=Bearer )[^\s'\"]+",
    re.IGNORECASE,
)
_SECRET_ENV = re.compile(r"(?:API_KEY|TOKEN|SECRET|PASSWORD)$")


def mask_secrets(text: str) -> str:
    """Return text with key-shaped strings masked, and the value of every secret-named variable in the environment.

    A provider's error may echo the request's key (a 401 body quoting it): what the
    loop keeps of an error (``result.error``, traces, LangSmith) must not hold it.
    """
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_ENV.search(name) and value in text:
            text = text.replace(value, SECRET_MASK)
    return _KEY_SHAPED.sub(SECRET_MASK, text)


def frame_text(text: str, tag: str) -> str:
    """Return text to place inside a ``<tag ...>...</tag>`` element so that it cannot end it or open another.

    Material the loop frames (chunk texts in search results and in the judge's
    prompt) may hold anything, lines shaped like the frame included: every ``<tag``
    and ``</tag`` in it (any case) gets its ``<`` written as ``&lt;``. Nothing else
    changes, so code and prose read as stored.
    """
    if "<" not in text:  # nothing to escape: most chunks, and a search frames five of them a turn
        return text
    return re.sub(rf"<(?=/?{re.escape(tag)}\b)", "&lt;", text, flags=re.IGNORECASE)
