"""Entity tables: entities, relationships, mentions, communities, per-collection state.

The SQL names keep their `kb_graph_` prefix: renaming a table would break the
databases already created with it.

Design. Everything hangs off `kb_collections` and `kb_chunks` with `ON DELETE
CASCADE`, so deleting a collection, a document or a chunk can never leave a
mention or a relationship pointing at nothing:

* `kb_graph_entities`: one row per (collection, normalised name).
* `kb_graph_entity_vectors_<dim>`: the entity embeddings, one narrow table per
  dimension with an HNSW cosine index, for the same reasons as the chunk
  embeddings (`knowledge.schema`).
* `kb_graph_mentions`: (entity, chunk, start, end). A chunk's mentions vanish with it.
* `kb_graph_relationships`: (source, target, type) *per chunk* that evidences it,
  so a relationship's strength is the sum over the chunks that still exist and
  a re-ingested chunk takes its evidence with it. Traversal sums by pair.
* `kb_graph_chunks`: which chunks the extractor has seen (with a reason when it
  skipped one), so `build_entities` only does the chunks still missing.
* `kb_graph_collections`: a collection has a knowledge graph once it has a row here;
  `dirty` says its communities are stale, `version` counts changes so a
  community job that raced with a write does not clear the flag.
* `kb_graph_communities`: Louvain communities per level, with their members and summary.

An entity that no chunk mentions any more is deleted by `store.prune` (a
foreign key cannot express "at least one mention").
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from arcana_loop.knowledge.ddl import present, run_missing
from arcana_loop.knowledge.types import checked_dimension

ENTITY_DDL = (
    """
    CREATE TABLE IF NOT EXISTS kb_graph_collections (
        collection_id bigint PRIMARY KEY REFERENCES kb_collections (id) ON DELETE CASCADE,
        extractor text NOT NULL,
        dirty boolean NOT NULL DEFAULT true,
        version bigint NOT NULL DEFAULT 1,
        updated_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kb_graph_entities (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        name text NOT NULL,
        norm_name text NOT NULL,
        type text NOT NULL DEFAULT '',
        description text NOT NULL DEFAULT '',
        UNIQUE (collection_id, norm_name)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kb_graph_mentions (
        entity_id bigint NOT NULL REFERENCES kb_graph_entities (id) ON DELETE CASCADE,
        chunk_id text NOT NULL REFERENCES kb_chunks (id) ON DELETE CASCADE,
        start_offset integer NOT NULL CHECK (start_offset >= 0),
        end_offset integer NOT NULL CHECK (end_offset >= start_offset),
        PRIMARY KEY (entity_id, chunk_id, start_offset)
    )
    """,
    "CREATE INDEX IF NOT EXISTS kb_graph_mentions_chunk_idx ON kb_graph_mentions (chunk_id)",
    """
    CREATE TABLE IF NOT EXISTS kb_graph_relationships (
        source_id bigint NOT NULL REFERENCES kb_graph_entities (id) ON DELETE CASCADE,
        target_id bigint NOT NULL REFERENCES kb_graph_entities (id) ON DELETE CASCADE,
        chunk_id text NOT NULL REFERENCES kb_chunks (id) ON DELETE CASCADE,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        type text NOT NULL,
        description text NOT NULL DEFAULT '',
        strength double precision NOT NULL CHECK (strength > 0),
        PRIMARY KEY (source_id, target_id, type, chunk_id),
        CHECK (source_id <> target_id)
    )
    """,
    "CREATE INDEX IF NOT EXISTS kb_graph_relationships_target_idx"
    " ON kb_graph_relationships (target_id)",
    "CREATE INDEX IF NOT EXISTS kb_graph_relationships_chunk_idx"
    " ON kb_graph_relationships (chunk_id)",
    """
    CREATE TABLE IF NOT EXISTS kb_graph_chunks (
        chunk_id text PRIMARY KEY REFERENCES kb_chunks (id) ON DELETE CASCADE,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        skipped_reason text
    )
    """,
    "CREATE INDEX IF NOT EXISTS kb_graph_chunks_collection_idx ON kb_graph_chunks (collection_id)",
    """
    CREATE TABLE IF NOT EXISTS kb_graph_communities (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        collection_id bigint NOT NULL REFERENCES kb_collections (id) ON DELETE CASCADE,
        level integer NOT NULL CHECK (level >= 0),
        members bigint[] NOT NULL,
        summary text NOT NULL DEFAULT ''
    )
    """,
    "CREATE INDEX IF NOT EXISTS kb_graph_communities_collection_idx"
    " ON kb_graph_communities (collection_id, level)",
)


def entity_vectors_table(dimension: int) -> sql.Identifier:
    """Return the identifier of the entity embeddings table for `dimension` (validated)."""
    return sql.Identifier(f"kb_graph_entity_vectors_{checked_dimension(dimension)}")


def create_entity_tables(conn: psycopg.Connection[Any]) -> None:
    """Create the dimension-free entity tables (called inside the schema transaction)."""
    run_missing(conn, ENTITY_DDL)


def create_entity_vectors(conn: psycopg.Connection[Any], dimension: int, hnsw: bool) -> None:
    """Create the entity embeddings table of `dimension` and its indexes if missing."""
    table = entity_vectors_table(dimension)
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " entity_id bigint PRIMARY KEY REFERENCES kb_graph_entities (id) ON DELETE CASCADE,"
            " collection_id bigint NOT NULL,"
            " embedding vector({d}) NOT NULL)"
        ).format(t=table, d=sql.Literal(dimension))
    )
    by_collection = f"kb_graph_entity_vectors_{dimension}_collection_idx"
    graph = f"kb_graph_entity_vectors_{dimension}_hnsw"
    # looked up first: IF NOT EXISTS locks the table before it looks (`knowledge.ddl`)
    indexes = present(conn, [by_collection, graph])
    if by_collection not in indexes:
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (collection_id)").format(
                i=sql.Identifier(by_collection), t=table
            )
        )
    if hnsw and graph not in indexes:
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {i} ON {t} USING hnsw (embedding vector_cosine_ops)"
            ).format(i=sql.Identifier(graph), t=table)
        )
