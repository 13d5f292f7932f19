"""Collection scoping: what a run may search, and what each search call receives.

The scope decides the ``search`` tool's schema (see ``tools.schemas``) and resolves
the controller's optional ``collection`` argument. A scope never widens: a locked
or empty scope ignores or refuses whatever collection the controller names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from arcana_loop.core.state import ResolvedScope
from arcana_loop.knowledge.names import MAX_COLLECTION_NAME_CHARS, new_collection_name

__all__ = ["ALL", "MAX_COLLECTION_NAME_CHARS", "Scope", "ScopeError", "normalize_scope", "scope_of"]

ALL = "all"
"""The collection value meaning "unrestricted".

It is reserved: no collection may be called ``all`` (in any case, with or without
surrounding spaces), so a scope naming it can never be read as "every collection"
by a search function further down.
"""


ScopeKind = Literal["all", "lock", "pick", "none"]

NOT_ALLOWED_TEMPLATE = 'collection "{name}" is not in the allowed list ({allowed})'


class ScopeError(ValueError):
    """A collection argument the scope does not allow; its text goes back to the controller."""


@dataclass(frozen=True, slots=True)
class Scope:
    """A normalised collection scope.

    Attributes:
        kind: ``all`` (unrestricted), ``lock`` (one collection), ``pick`` (the controller
            may choose among ``names``), or ``none`` (``[]``: matches nothing).
        names: the allowed collections, in the caller's order.
    """

    kind: ScopeKind
    names: tuple[str, ...] = ()

    @property
    def allowed_text(self) -> str:
        """The allowed names as the controller sees them: ``"a", "b"``."""
        return ", ".join(f'"{n}"' for n in self.names)

    def resolve(self, requested: Any) -> str | list[str] | None:
        """Return the collection value for one search call.

        Args:
            requested: the controller's ``collection`` argument, or ``None`` when absent.

        Returns:
            ``None`` for unrestricted, one name, or a list of names (``[]`` for none).

        Raises:
            ScopeError: when ``requested`` is outside the scope.
        """
        if self.kind == "lock":
            return self.names[0]  # the lock wins over anything the controller sends
        if requested is None:
            if self.kind == "all":
                return None
            return list(self.names)
        if self.kind == "all":
            # Only a custom schema offers the argument here; narrowing is harmless.
            if isinstance(requested, str) and requested and requested != ALL:
                return requested
            if requested == ALL:
                return None
        elif isinstance(requested, str) and requested in self.names:
            return requested
        raise ScopeError(
            NOT_ALLOWED_TEMPLATE.format(name=_shown(requested), allowed=self.allowed_text)
        )

    def as_data(self) -> ResolvedScope:
        """Return the scope as the state carries it."""
        return {"kind": self.kind, "names": list(self.names)}

    @classmethod
    def from_data(cls, data: ResolvedScope) -> Scope:
        """Return the scope the state carries (resolved by ``start``: not checked again)."""
        return cls(data["kind"], tuple(data["names"]))

    def to_value(self) -> str | list[str]:
        """Return the scope as the ``collection`` value a caller would pass."""
        if self.kind == "all":
            return ALL
        if self.kind == "lock":
            return self.names[0]
        return list(self.names)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_name(name: Any) -> str:
    """One spelling of a scope's name, the one the knowledge base stores (NFC), never ``all``."""
    return new_collection_name(name)


def normalize_scope(collection: Any) -> Scope:
    """Turn a ``collection`` option into a `Scope`.

    ``"all"`` or ``None``: unrestricted. A name or a one-element list: locked to it.
    Two or more names: the controller picks per call. ``[]``: matches nothing.
    ``all`` inside a list, or in another case or spacing (``"ALL"``, ``" all"``), is
    refused: it would otherwise reach a search function as the unrestricted value.

    Raises:
        TypeError: for a value that is not ``None``, a string, or a list/tuple of strings.
        ValueError: for blank, over-long, NUL- or surrogate-containing, or reserved
            names (names are compared in Unicode NFC, as the knowledge base stores them).
    """
    if collection is None or collection == ALL:
        return Scope("all")
    if isinstance(collection, str):
        return Scope("lock", (_check_name(collection),))
    if isinstance(collection, list | tuple):
        names = tuple(dict.fromkeys(_check_name(n) for n in collection))
        if not names:
            return Scope("none")
        if len(names) == 1:
            return Scope("lock", names)
        return Scope("pick", names)
    raise TypeError(
        "collection must be 'all', None, a collection name, or a list of names; "
        f"got {type(collection).__name__}"
    )


def scope_of(state: Mapping[str, Any]) -> Scope:
    """Return a question's collection scope from the loop's state, as ``start`` resolved it.

    A state written before the scope was carried (an older thread) has only its ``collection``.
    """
    setup = state.get("question_setup")
    if setup is None:
        return normalize_scope(state.get("collection"))
    return Scope.from_data(setup["scope"])
