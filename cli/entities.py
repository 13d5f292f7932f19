"""``arcana-loop entities``: build the knowledge graph (entities) of a collection."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer
from rich.table import Table

from arcana_loop.cli.common import err, fail, knowledge_base, out, shown
from arcana_loop.cli.flags import collection_name

entities_app = typer.Typer(
    help="Build the knowledge graph of a collection (entities, relationships, communities).",
    no_args_is_help=True,
)


@entities_app.command("build")
def build(
    collection: Annotated[
        str, typer.Argument(help="Collection whose entities to build.", callback=collection_name)
    ],
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild", help="Extract every chunk again, not only those not extracted yet."
        ),
    ] = False,
) -> None:
    """Build (or complete) a collection's entities with the offline extractor, then its communities."""
    from arcana_loop.knowledge.errors import CollectionNotFound, KnowledgeBaseError

    kb = knowledge_base()
    try:
        with err.status(f"Building the entities of {shown(repr(collection))}..."):
            result = kb.build_entities(collection, rebuild=rebuild)
    except CollectionNotFound:
        known = ", ".join(sorted(c.name for c in kb.collections())) or "none"
        fail(
            f"no collection named {collection!r}.",
            f"known collections: {known}; ingest with arcana-loop ingest PATH --collection {shlex.quote(collection)}",
        )
    except KnowledgeBaseError as exc:
        fail(
            f"could not build the entities of {collection!r}: {exc}",
            "run the command again: chunks already done are kept",
        )
    table = Table(
        "chunks processed", "skipped", "entities", "relationships", "mentions", "communities"
    )
    table.add_row(
        *(
            str(v)
            for v in (
                result.chunks_processed,
                result.chunks_skipped,
                result.entities,
                result.relationships,
                result.mentions,
                result.communities,
            )
        )
    )
    out.print(table)
