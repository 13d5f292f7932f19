"""Metadata filters: the operators langchain-postgres users know, compiled to parameterised SQL.

A filter is a mapping, read as langchain-postgres reads one:

* ``{"tag": "guide"}`` (equality), or ``{"tag": {"$op": value}}`` with ``$eq``, ``$ne``,
  ``$lt``, ``$lte``, ``$gt``, ``$gte``, ``$in``, ``$nin``, ``$between`` (``[low, high]``),
  ``$like``, ``$ilike`` (SQL patterns) or ``$exists`` (``True``/``False``);
* several keys in one mapping must all hold; ``{"$and": [...]}`` and ``{"$or": [...]}``
  combine filters.

It is matched against a chunk's metadata, which holds its document's metadata too
(``source``, ``title``, what ingest was given) and the chunk's own (``section``,
``page``, ``page_end``, ``start_index``). Decisions, as langchain-postgres makes them:
``$ne`` and ``$nin`` match only chunks that have the key; an ordering compares a number
with numbers and a string with strings (an ISO date is a string, so dates order), never
across types. Every value travels as a query parameter; keys too (``metadata -> %s``).
Equality is a jsonb containment (``@>``), which the metadata's GIN index serves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from arcana_loop.knowledge.names import check_text
from arcana_loop.knowledge.placed import MOVED_KEY

Scalar = str | int | float | bool | None

COMPARISONS = {"$lt": "<", "$lte": "<=", "$gt": ">", "$gte": ">="}
FIELD_OPERATORS = (
    "$eq",
    "$ne",
    *COMPARISONS,
    "$in",
    "$nin",
    "$between",
    "$like",
    "$ilike",
    "$exists",
)
LOGICAL_OPERATORS = ("$and", "$or")
MAX_FILTER_TERMS = 256
"""Most field conditions in one filter: a filter is a few conditions, never a list of ids."""
MAX_FILTER_VALUES = 1_000
"""Most values in the ``$in`` and ``$nin`` lists of one filter together, for the same reason."""
MAX_FILTER_DEPTH = 32
"""Most levels of ``$and``/``$or`` inside one another (each is a level of the SQL, and of its compiling)."""
MAX_FILTER_NUMBER = sys.float_info.max
"""The largest magnitude of a number in a filter: what a JSON number holds as a double (about 1.8e308)."""
_SHOWN_CHARS = 40


class FilterError(ValueError):
    """A filter that cannot be read: an unknown operator, or a value of the wrong kind."""


def check_filter(value: object) -> dict[str, Any] | None:
    """Return `value` as a filter after checking all of it, or ``None`` for no filter.

    Besides its operators, every key, string and number is checked to be one PostgreSQL
    can hold and compare (no NUL character, no lone surrogate, no number beyond
    `MAX_FILTER_NUMBER`), and its size is bounded (`MAX_FILTER_TERMS`,
    `MAX_FILTER_VALUES`, `MAX_FILTER_DEPTH`), so a bad filter fails here, in
    one line, before any statement runs.

    Raises:
        FilterError: naming the operator or key at fault.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FilterError(f"filter must be a mapping, got {type(value).__name__}")
    _check_node(value, "filter", 1, _Size())
    return dict(value) if value else None


@dataclass
class _Size:
    """What a filter holds so far: field conditions, and values in ``$in``/``$nin`` lists."""

    terms: int = 0
    values: int = 0

    def add_term(self) -> None:
        self.terms += 1
        if self.terms > MAX_FILTER_TERMS:
            raise FilterError(f"filter has more than {MAX_FILTER_TERMS} conditions")

    def add_values(self, where: str, op: str, count: int) -> None:
        self.values += count
        if self.values > MAX_FILTER_VALUES:
            raise FilterError(
                f"{where}: {op} holds {count:,} values; a filter holds at most"
                f" {MAX_FILTER_VALUES:,} in its $in and $nin lists together"
            )


def _check_node(node: Mapping[str, Any], where: str, depth: int, size: _Size) -> None:
    """Check one level of a filter (``$and``/``$or`` parts one level deeper), counting its size."""
    if depth > MAX_FILTER_DEPTH:  # before recursing further: a deeper filter is refused, not walked
        raise FilterError(f"filter nests $and/$or more than {MAX_FILTER_DEPTH} levels deep")
    for key, condition in node.items():
        if not isinstance(key, str):
            raise FilterError(f"{where}: keys must be strings, got {_shown(key)}")
        if key in LOGICAL_OPERATORS:
            if not isinstance(condition, Sequence) or isinstance(condition, str) or not condition:
                raise FilterError(f"{where}: {key} takes a non-empty list of filters")
            for n, part in enumerate(condition):
                if not isinstance(part, Mapping) or not part:
                    raise FilterError(f"{where}: {key}[{n}] must be a non-empty mapping")
                _check_node(part, f"{where}.{key}[{n}]", depth + 1, size)
        elif key.startswith("$"):
            raise FilterError(
                f"{where}: unknown operator {_shown(key)}; combine filters with {', '.join(LOGICAL_OPERATORS)}"
            )
        elif isinstance(condition, Mapping):
            _check_text(key, f"{where}: the key {_shown(key)}")
            if not condition:
                raise FilterError(f"{where}: the condition on {_shown(key)} is empty")
            for op, operand in condition.items():
                _check_operand(key, op, operand, size)
                size.add_term()
        else:
            _check_text(key, f"{where}: the key {_shown(key)}")
            _check_operand(key, "$eq", condition, size)
            size.add_term()


def _is_number(value: object) -> bool:
    # a comparison, not math.isfinite: that overflows on an int too large for a float
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and abs(value) <= MAX_FILTER_NUMBER
    )


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | bool) or _is_number(value)


def _is_orderable(value: object) -> bool:
    return isinstance(value, str) or _is_number(value)


def _check_operand(key: str, op: object, operand: object, size: _Size) -> None:
    """Check one operator's operand (one check per operator), counting its list's values."""
    where = f"filter on {_shown(key)}"
    if op not in FIELD_OPERATORS:
        raise FilterError(
            f"{where}: unknown operator {_shown(op)}; known: {', '.join(FIELD_OPERATORS)}"
        )
    values = _listed(where, str(op), operand, size)
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and not _is_number(value):
            raise FilterError(
                f"{where}: {op} takes numbers within ±{MAX_FILTER_NUMBER:.1e} (a JSON number),"
                f" got an integer of {value.bit_length():,} bits"
            )
        if isinstance(value, str):
            _check_text(value, f"{where}: the {op} value")
    if op in ("$eq", "$ne") and not _is_scalar(operand):
        raise FilterError(
            f"{where}: {op} takes a string, number, boolean or null, got {_shown(operand)}"
        )
    if op in COMPARISONS and not _is_orderable(operand):
        raise FilterError(f"{where}: {op} takes a number or a string, got {_shown(operand)}")
    if op in ("$in", "$nin") and not all(_is_scalar(v) for v in values):
        raise FilterError(f"{where}: {op} takes a list of strings, numbers or booleans")
    if op == "$between" and (
        len(values) != 2
        or not all(_is_orderable(v) for v in values)
        or isinstance(values[0], str) != isinstance(values[1], str)
    ):
        raise FilterError(f"{where}: $between takes [low, high], two numbers or two strings")
    if op in ("$like", "$ilike") and not isinstance(operand, str):
        raise FilterError(f"{where}: {op} takes a pattern string, got {_shown(operand)}")
    if op == "$exists" and not isinstance(operand, bool):
        raise FilterError(f"{where}: $exists takes true or false, got {_shown(operand)}")


def _listed(where: str, op: str, operand: object, size: _Size) -> Sequence[object]:
    """The values an operand holds: the items of an ``$in``/``$nin``/``$between`` list, else itself."""
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple):
            raise FilterError(f"{where}: {op} takes a list of strings, numbers or booleans")
        # counted before any is read: a huge list is refused at once
        size.add_values(where, op, len(operand))
        return operand
    if op == "$between":
        if not isinstance(operand, list | tuple):
            raise FilterError(f"{where}: $between takes [low, high], two numbers or two strings")
        return operand[:3]  # a third value is refused by the length check
    return (operand,)


def _check_text(value: str, what: str) -> None:
    """Refuse a string PostgreSQL text cannot hold (NUL) or UTF-8 cannot encode (a lone surrogate)."""
    try:
        check_text(value, what)
    except ValueError as exc:
        raise FilterError(str(exc)) from None


def _shown(value: object) -> str:
    """A value as a message quotes it: on one line, and short however large the value."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"  # its repr may be refused (int_max_str_digits)
    if isinstance(value, list | tuple | Mapping):
        return f"a {type(value).__name__} of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."


class _Params:
    """Named placeholders for a filter's values, added to a statement's parameters."""

    def __init__(self, params: dict[str, Any], prefix: str) -> None:
        self.params = params
        self.prefix = prefix

    def __call__(self, value: Any) -> sql.Placeholder:
        name = f"{self.prefix}{len(self.params)}"  # no other parameter starts with the prefix
        self.params[name] = value
        return sql.Placeholder(name)


def filter_sql(
    checked: Mapping[str, Any],
    column: sql.Composable,
    params: dict[str, Any],
    placed: sql.Composable | None = None,
) -> sql.Composable:
    """Compile a checked filter into a condition on the jsonb `column`; its values go into `params`.

    `placed`: the metadata as readers see it (`placed.PLACED_CHUNK_SQL`), matched
    instead of `column` for `placed.MOVED_KEY`; it costs a lookup a row and no
    index serves it, so only conditions on that key use it.
    """

    def column_for(key: str) -> sql.Composable:
        return placed if placed is not None and key == MOVED_KEY else column

    return _node(checked, column_for, _Params(params, "filter_"))


def _node(
    node: Mapping[str, Any], column_for: Callable[[str], sql.Composable], p: _Params
) -> sql.Composable:
    parts: list[sql.Composable] = []
    for key, condition in node.items():
        if key in LOGICAL_OPERATORS:
            joiner = " AND " if key == "$and" else " OR "
            inner = [_node(part, column_for, p) for part in condition]
            parts.append(sql.SQL("({})").format(sql.SQL(joiner).join(inner)))
        elif isinstance(condition, Mapping):
            parts.extend(
                _field(key, op, operand, column_for(key), p) for op, operand in condition.items()
            )
        else:
            parts.append(_field(key, "$eq", condition, column_for(key), p))
    return sql.SQL("({})").format(sql.SQL(" AND ").join(parts))


def _field(  # one branch per operator
    key: str, op: str, operand: Any, column: sql.Composable, p: _Params
) -> sql.Composable:
    named = p(key)  # one parameter, however many times the condition names the key
    value = sql.SQL("({} -> {})").format(column, named)
    has_key = sql.SQL("({} ? {})").format(column, named)
    if op == "$eq":
        return sql.SQL("({} @> {})").format(column, p(Jsonb({key: operand})))
    if op == "$ne":
        return sql.SQL("({} AND NOT {} @> {})").format(has_key, column, p(Jsonb({key: operand})))
    if op in ("$in", "$nin"):
        options = [Jsonb({key: v}) for v in operand]
        if not options:
            return sql.SQL("FALSE") if op == "$in" else has_key
        contained = sql.SQL("({} @> ANY({}::jsonb[]))").format(column, p(options))
        return contained if op == "$in" else sql.SQL("({} AND NOT {})").format(has_key, contained)
    if op in COMPARISONS:
        return _ordered(value, COMPARISONS[op], operand, p)
    if op == "$between":
        low, high = operand
        return sql.SQL("({} AND {})").format(
            _ordered(value, ">=", low, p), _ordered(value, "<=", high, p)
        )
    if op in ("$like", "$ilike"):
        return sql.SQL("({} ->> {} {} {})").format(
            column, named, sql.SQL("LIKE" if op == "$like" else "ILIKE"), p(operand)
        )
    return has_key if operand else sql.SQL("(NOT {})").format(has_key)  # $exists


def _ordered(value: sql.Composable, symbol: str, operand: Any, p: _Params) -> sql.Composable:
    """A comparison within one JSON type: numbers with numbers, strings with strings."""
    kind = "string" if isinstance(operand, str) else "number"
    return sql.SQL("(jsonb_typeof({v}) = {kind} AND {v} {symbol} {operand})").format(
        v=value, kind=sql.Literal(kind), symbol=sql.SQL(symbol), operand=p(Jsonb(operand))
    )
