"""Collection names and the text checks every stored string goes through.

A collection name is compared in Unicode NFC: `"café"` typed with a combining
accent (NFD) and with a precomposed `é` (NFC) print identically, so they must
name one collection, not two. Ingest, lookup, delete and search scopes all pass
names through `normalize_collection_name`, which also bounds their length with
the same limit a run's scope uses.
"""

from __future__ import annotations

import unicodedata
from typing import Any

MAX_COLLECTION_NAME_CHARS = 200
"""The longest collection name, in characters after NFC normalisation."""

_CONTROL_CATEGORIES = frozenset({"Cc", "Cf"})
"""Unicode categories a new collection name may not hold: controls and invisible format marks."""

RESERVED_COLLECTION_NAME = "all"
"""Means "every collection" in a search or run scope, so no collection may be called that."""


def composed(text: str) -> str:
    """`text` in Unicode NFC: the one spelling names, words and paths are compared in (ASCII as it is)."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def check_text(value: str, what: str) -> None:
    r"""Raise `ValueError` if `value` cannot be stored as PostgreSQL text.

    PostgreSQL text holds no NUL character, and UTF-8 cannot encode a lone
    surrogate (`"\ud800"`), which a Python str may hold: both would fail only
    inside the database, after earlier statements had run.

    Args:
        value: The string to check.
        what: What the string is, for the message (e.g. `"collection name"`).
    """
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} contains a lone surrogate {value[exc.start]!r} at index {exc.start}"
            " (not valid Unicode text)"
        ) from exc


def normalize_collection_name(name: Any) -> str:
    """Return `name` in NFC, the one spelling under which a collection is stored and found.

    Raises:
        TypeError: if `name` is not a str.
        ValueError: if it is blank, holds NUL or a lone surrogate, or is longer than
            `MAX_COLLECTION_NAME_CHARS`.
    """
    if not isinstance(name, str):
        raise TypeError(f"collection name must be a str, got {type(name).__name__}")
    if not name.strip():
        raise ValueError(f"collection name must not be empty or blank, got {name!r}")
    check_text(name, "collection name")
    normal = composed(name)
    if len(normal) > MAX_COLLECTION_NAME_CHARS:
        raise ValueError(
            f"collection names are at most {MAX_COLLECTION_NAME_CHARS} characters,"
            f" got one of {len(normal)}: {normal[:40]!r}..."
        )
    return normal


def means_every_collection(name: str) -> bool:
    """Whether `name` is the reserved ``all`` (any case or spacing): every collection, in a scope."""
    return name.strip().casefold() == RESERVED_COLLECTION_NAME


def new_collection_name(name: Any) -> str:
    """Return `name` normalised like `normalize_collection_name`, refusing the reserved `"all"`.

    Raises:
        TypeError: if `name` is not a str.
        ValueError: as `normalize_collection_name`, if the name holds a control or
            format character (an escape sequence, a newline, a bidirectional
            override), or if it is `"all"` in any case or spacing.

    Lookups use `normalize_collection_name` alone, so a collection stored under
    such a name before this check existed can still be found and deleted.
    """
    normal = normalize_collection_name(name)
    control = next((c for c in normal if unicodedata.category(c) in _CONTROL_CATEGORIES), None)
    if control is not None:
        # a name is printed by `collections`, in hints and in traces: an escape sequence
        # in it would drive the terminal of whoever lists the knowledge base
        raise ValueError(
            f"collection names must not contain control characters; {normal!r} holds"
            f" {control!r} at index {normal.index(control)}"
        )
    if means_every_collection(normal):
        raise ValueError(
            f"{normal!r} is reserved (it means every collection in a search scope)"
            " and cannot name a collection"
        )
    return normal


def created_collection_name(name: Any) -> str:
    """Return the name a new collection is stored under: `new_collection_name`'s, with no space at either end.

    ' docs' beside 'docs' would be two collections that read alike in every list and
    hint. A scope may still name one stored before this check (`new_collection_name`).

    Raises:
        TypeError, ValueError: as `new_collection_name`, or for a name that starts or
            ends with whitespace.
    """
    normal = new_collection_name(name)
    if normal != normal.strip():
        raise ValueError(
            f"collection names must not start or end with a space; got {normal!r}"
            f" (did you mean {normal.strip()!r}?)"
        )
    return normal
