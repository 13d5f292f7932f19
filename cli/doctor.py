"""``arcana-loop doctor``: the knowledge base's server, its settings, its indexes and its collections.

For the embedded server (ours to tune, `knowledge.tuning`) each setting shows its value
now, the value chosen for this host and where that came from; ``pending restart`` means
it applies when the server next starts. For a server given by ``DATABASE_URL`` the chosen
values are advice for a server on a host like this one: nothing is changed.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from arcana_loop.cli.common import (
    cell,
    collection_errors,
    database_errors,
    err,
    knowledge_base,
    out,
    shown,
)

SEARCH_INDEXES = ["kb_chunks_tsv_idx", "kb_chunks_lex_keys_idx", "kb_chunks_metadata_idx"]
"""The GIN indexes searches use, shown beside each HNSW index."""


def _report(kb: Any) -> dict[str, Any]:
    from arcana_loop.knowledge.redact import redact
    from arcana_loop.knowledge.schema import missing_indexes, pending_vectors
    from arcana_loop.knowledge.server import DATABASE_URL_ENV, pgdata_dir
    from arcana_loop.knowledge.tuning import current_settings, host_settings

    owned = not os.environ.get(DATABASE_URL_ENV)
    chosen = host_settings()
    with kb.pool().connection() as conn:
        version = conn.execute("SHOW server_version").fetchone()
        vector = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        now = current_settings(conn)
        indexes = conn.execute(
            "SELECT c.relname, t.relname, i.indisvalid AND i.indisready,"
            " pg_size_pretty(pg_relation_size(c.oid))"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND t.relname LIKE 'kb\\_%%'"
            # the search indexes, and any other one that is not usable
            " AND (c.relname LIKE '%%hnsw' OR c.relname = ANY(%s)"
            " OR NOT (i.indisvalid AND i.indisready))"
            " ORDER BY t.relname, c.relname",
            (SEARCH_INDEXES,),
        ).fetchall()
        dimensions = [
            d for (d,) in conn.execute("SELECT DISTINCT dimension FROM kb_collections").fetchall()
        ]
        missing = sorted({m for d in dimensions for m in missing_indexes(conn, d)})
        waiting = {
            name: pending_vectors(conn, dim, coll_id)
            for coll_id, name, dim in conn.execute(
                "SELECT id, name, dimension FROM kb_collections WHERE stored ORDER BY name"
            ).fetchall()
        }
    return {
        "server": {
            "kind": "embedded" if owned else "DATABASE_URL (advice only: not changed)",
            "where": str(pgdata_dir()) if owned else redact(os.environ[DATABASE_URL_ENV]),
            "postgresql": version[0] if version else None,
            "pgvector": vector[0] if vector else None,
        },
        "settings": [
            {
                "name": name,
                "now": now[name].value if name in now else None,
                "chosen": c.value,
                "from": c.source,
                "pending_restart": bool(name in now and now[name].pending_restart),
            }
            for name, c in chosen.items()
        ],
        "indexes": [
            {"index": r[0], "table": r[1], "valid": bool(r[2]), "size": r[3]} for r in indexes
        ],
        "missing_indexes": missing,
        "pending_vectors": {name: n for name, n in waiting.items() if n},
        "collections": [c.to_dict() for c in kb.collections()],
    }


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix", help="First merge the vectors waiting outside the HNSW graphs into them."
        ),
    ] = False,
) -> None:
    """Show the knowledge base's server, its settings for this host, its indexes and collections.

    Each finding says whether it is normal; --fix does what a finding asks for.
    """
    kb = knowledge_base()
    if fix:
        with database_errors("cannot merge the pending vectors"):
            moved = kb.merge_pending()
        # the report is machine output with --json: the note goes to stderr
        (err if as_json else out).print(f"Merged {moved:,} pending vectors into the HNSW graphs.")
    with database_errors("cannot read the server's state"):
        report = _report(kb)
    if as_json:
        print(json.dumps(report, indent=2))  # machine output
        return
    _print_report(report)


def _print_report(report: dict[str, Any]) -> None:
    """The report in words: each table, then each finding, saying what is normal and what to do."""
    from arcana_loop.knowledge.schema import PENDING_MAX_ROWS

    server = report["server"]
    out.print(
        f"Server: {shown(server['kind'])}, PostgreSQL {shown(server['postgresql'])},"
        f" pgvector {shown(server['pgvector'])}"
    )
    out.print(f"  {shown(server['where'])}", highlight=False)
    settings = Table(box=box.SIMPLE_HEAD, title="Settings", title_justify="left")
    for column in ("setting", "now", "chosen", "from"):
        settings.add_column(column, overflow="fold")
    for s in report["settings"]:
        now = cell(f"{s['now']} (pending restart)" if s["pending_restart"] else str(s["now"]))
        settings.add_row(cell(s["name"]), now, cell(s["chosen"]), cell(s["from"]))
    out.print(settings)
    indexes = Table(box=box.SIMPLE_HEAD, title="Indexes", title_justify="left")
    for column in ("index", "table", "valid", "size"):
        indexes.add_column(column, overflow="fold")
    for i in report["indexes"]:
        state = "yes" if i["valid"] else "[red]NO: rebuilt on the next opening[/]"
        indexes.add_row(cell(i["index"]), cell(i["table"]), state, cell(i["size"]))
    out.print(indexes)
    to_do = 0
    if any(s["pending_restart"] for s in report["settings"]):
        out.print(
            "A setting pending restart applies when the server next starts (normal after a"
            " change; arcana-loop server stop, then any command, starts it with them)."
        )
    for name in report["missing_indexes"]:
        to_do += 1
        out.print(
            f"[red]The {name} index is missing:[/] it is rebuilt the next time the knowledge base opens."
        )
    for name, count in report["pending_vectors"].items():
        waiting = f"{count:,} vectors of {shown(name)} wait outside its HNSW graph"
        if count <= PENDING_MAX_ROWS:
            out.print(
                f"{waiting}: normal below {PENDING_MAX_ROWS:,} (searched exactly beside it;"
                " the write that leaves more merges them, arcana-loop doctor --fix now)."
            )
        else:
            to_do += 1
            out.print(
                f"[yellow]{waiting}[/]: more than the {PENDING_MAX_ROWS:,} a write leaves, so"
                " every search scans them; arcana-loop doctor --fix merges them."
            )
    names = ", ".join(f"{c['name']} ({c['chunks']:,} chunks)" for c in report["collections"])
    out.print(f"Collections: {shown(names) or 'none'}")
    out.print("Nothing to fix." if not to_do else f"[yellow]{to_do} thing(s) to fix, above.[/]")


def merge_pending(
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="Only this collection.")
    ] = None,
) -> None:
    """Move the vectors waiting outside a collection's HNSW graph into it (now doctor --fix)."""
    err.print("[dim]merge-pending is now part of arcana-loop doctor --fix (every collection).[/]")
    kb = knowledge_base()
    with collection_errors(kb, collection, "cannot merge the pending vectors"):
        moved = kb.merge_pending(collection)
    out.print(f"Merged {moved:,} pending vectors into the HNSW graph.")
