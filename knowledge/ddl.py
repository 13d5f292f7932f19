"""Schema statements run on every opening, only where they would change something.

`CREATE INDEX IF NOT EXISTS` and `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` take their
table's lock before they look (SHARE, ACCESS EXCLUSIVE), and a knowledge base runs its
schema's statements each time it opens. Run as they were, an opening waited for the
writes under way and deadlocked with a collection's delete cascading through the same
tables (an open beside a loop of ingests and deletes failed with ``deadlock detected``).
The catalog is read instead, which locks no table, and only what is missing is created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import psycopg

_CREATES = re.compile(
    r"\s*CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.IGNORECASE
)
_ADDS_COLUMN = re.compile(
    r"\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.IGNORECASE
)


def run_missing(conn: psycopg.Connection[Any], statements: Iterable[str]) -> None:
    """Run each statement, in order, unless the table, index or column it creates is already in the current schema.

    Any other statement (a function replaced, say) always runs. Only the names the
    statements create are looked up.
    """
    statements = list(statements)
    relations = present(conn, [found[1] for s in statements if (found := _CREATES.match(s))])
    tables = [found[1] for s in statements if (found := _ADDS_COLUMN.match(s))]
    columns = {
        (table, column)
        for table, column in conn.execute(
            "SELECT c.relname, a.attname FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = ANY(%s)"
            " AND a.attnum > 0 AND NOT a.attisdropped",
            (tables,),
        ).fetchall()
    }
    for statement in statements:
        if (found := _CREATES.match(statement)) and found[1] in relations:
            continue
        if (found := _ADDS_COLUMN.match(statement)) and (found[1], found[2]) in columns:
            continue
        conn.execute(statement)


def present(conn: psycopg.Connection[Any], names: list[str]) -> set[str]:
    """Those of `names` that are tables or indexes in the current schema (the catalog read: no lock)."""
    return {
        name
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = ANY(%s)",
            (names,),
        ).fetchall()
    }
