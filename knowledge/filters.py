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

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

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


class FilterError(ValueError):
    """A filter that cannot be read: an unknown operator, or a value of the wrong kind."""


def check_filter(value: object) -> dict[str, Any] | None:
    """Return `value` as a filter after checking all of it, or ``None`` for no filter.

    Raises:
        FilterError: naming the operator or key at fault.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FilterError(f"filter must be a mapping, got {type(value).__name__}")
    terms = _count_terms(value, "filter")
    if terms > MAX_FILTER_TERMS:
        raise FilterError(f"filter has {terms} conditions; at most {MAX_FILTER_TERMS}")
    return dict(value) if value else None


def _count_terms(node: Mapping[str, Any], where: str) -> int:
    """Check one level of a filter; return how many field conditions it holds."""
    count = 0
    for key, condition in node.items():
        if not isinstance(key, str):
            raise FilterError(f"{where}: keys must be strings, got {key!r}")
        if key in LOGICAL_OPERATORS:
            if not isinstance(condition, Sequence) or isinstance(condition, str) or not condition:
                raise FilterError(f"{where}: {key} takes a non-empty list of filters")
            for n, part in enumerate(condition):
                if not isinstance(part, Mapping) or not part:
                    raise FilterError(f"{where}: {key}[{n}] must be a non-empty mapping")
                count += _count_terms(part, f"{where}.{key}[{n}]")
        elif key.startswith("$"):
            raise FilterError(
                f"{where}: unknown operator {key!r}; combine filters with {', '.join(LOGICAL_OPERATORS)}"
            )
        elif isinstance(condition, Mapping):
            if not condition:
                raise FilterError(f"{where}: the condition on {key!r} is empty")
            for op, operand in condition.items():
                _check_operand(key, op, operand)
                count += 1
        else:
            _check_operand(key, "$eq", condition)
            count += 1
    return count


def _is_scalar(value: object) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return value is None or isinstance(value, str | int | float | bool)


def _is_orderable(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


def _check_operand(key: str, op: object, operand: object) -> None:  # one check per operator
    where = f"filter on {key!r}"
    if op not in FIELD_OPERATORS:
        raise FilterError(f"{where}: unknown operator {op!r}; known: {', '.join(FIELD_OPERATORS)}")
    if op in ("$eq", "$ne") and not _is_scalar(operand):
        raise FilterError(f"{where}: {op} takes a string, number, boolean or null, got {operand!r}")
    if op in COMPARISONS and not _is_orderable(operand):
        raise FilterError(f"{where}: {op} takes a number or a string, got {operand!r}")
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple) or not all(_is_scalar(v) for v in operand):
            raise FilterError(f"{where}: {op} takes a list of strings, numbers or booleans")
    if op == "$between":
        if (
            not isinstance(operand, list | tuple)
            or len(operand) != 2
            or not all(_is_orderable(v) for v in operand)
            or isinstance(operand[0], str) != isinstance(operand[1], str)
        ):
            raise FilterError(f"{where}: $between takes [low, high], two numbers or two strings")
    if op in ("$like", "$ilike") and not isinstance(operand, str):
        raise FilterError(f"{where}: {op} takes a pattern string, got {operand!r}")
    if op == "$exists" and not isinstance(operand, bool):
        raise FilterError(f"{where}: $exists takes true or false, got {operand!r}")


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
