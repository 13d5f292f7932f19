"""Re-embedding a collection in place: every vector of the new model, nothing lost when killed."""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
import psycopg
import pytest
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    MINILM_MODEL,
    minilm_embeddings,
)
from arcana_loop.knowledge.errors import EmbeddingMismatch
from arcana_loop.knowledge.sections import context_line, searchable_text
from tests.fixtures.postgres import temporary_collection
from tests.fixtures.processes import child_env, kill_when

TOPICS = {
    "timeouts": "asyncio.wait_for runs a coroutine and cancels it after a timeout.",
    "bread": "Knead the dough, let it rise overnight, and bake it in a hot oven.",
    "logs": "math.log2 returns the base-2 logarithm of a number.",
}


def _rows(kb: KnowledgeBase, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with kb.pool().connection() as conn:
        return conn.execute(query, params or None).fetchall()


def _vectors_of(kb: KnowledgeBase, collection: str, dimension: int) -> int:
    """Chunks of `collection` with a vector in the `dimension` table; fails if any has none."""
    (coll_id,) = _rows(kb, "SELECT id FROM kb_collections WHERE name = %s", collection)[0]
    missing = _rows(
        kb,
        f"SELECT count(*) FROM kb_chunks c LEFT JOIN kb_embeddings_{dimension} e"
        " ON e.chunk_id = c.id WHERE c.collection_id = %s AND e.chunk_id IS NULL",
        coll_id,
    )[0][0]
    assert missing == 0, f"{missing} chunks of {collection!r} have no {dimension}-dim vector"
    return int(
        _rows(
            kb, f"SELECT count(*) FROM kb_embeddings_{dimension} WHERE collection_id = %s", coll_id
        )[0][0]
    )


def test_reembed_swaps_every_vector_and_the_entities(kb: KnowledgeBase) -> None:
    for name, text in TOPICS.items():
        kb.ingest(text, collection="notes", name=name, entities=True)
    entities = _rows(kb, "SELECT count(*) FROM kb_graph_entity_vectors_256")[0][0]
    assert entities > 0

    result = kb.reembed("notes", "minilm")

    assert (result.chunks, result.embedded, result.resumed) == (3, 3, 0)
    assert (result.previous_model, result.embedding_model) == (
        DEFAULT_EMBEDDING_MODEL,
        MINILM_MODEL,
    )
    assert result.entities == entities
    [info] = kb.collections()
    assert (info.embedding_model, info.dimension) == (MINILM_MODEL, 384)
    assert _vectors_of(kb, "notes", 384) == 3
    assert _rows(kb, "SELECT count(*) FROM kb_embeddings_256")[0][0] == 0
    assert _rows(kb, "SELECT count(*) FROM kb_graph_entity_vectors_384")[0][0] == entities
    assert _rows(kb, "SELECT count(*) FROM kb_graph_entity_vectors_256")[0][0] == 0
    hits = kb.search("stop a coroutine that runs too long", collection="notes", mode="semantic")
    assert hits[0]["text"] == TOPICS["timeouts"]
    # an HNSW index of its own, as every partition has
    assert (
        _rows(
            kb, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'kb_embeddings_384_c%_hnsw'"
        )[0][0]
        == 1
    )
    assert kb.reembed("notes", "minilm").model_unchanged  # nothing left to do
    with pytest.raises(EmbeddingMismatch, match="minilm"):
        KnowledgeBase(kb.url, embeddings="wordllama", schema=kb.schema).ingest(
            "more text", collection="notes"
        )


CHILD_REEMBED = textwrap.dedent(
    """
    import sys
    from arcana_loop.knowledge import KnowledgeBase

    KnowledgeBase(sys.argv[1], schema=sys.argv[2]).reembed("many", "minilm", batch_size=4)
    """
)


def test_a_killed_reembed_loses_nothing_and_resumes(kb: KnowledgeBase) -> None:
    texts = [
        f"Note {i}: the {word} of item {i} is kept in section {i % 7}."
        for i, word in enumerate(["colour", "weight", "price", "size", "owner"] * 12)
    ]
    kb.ingest([_doc(i, t) for i, t in enumerate(texts)], collection="many")
    (coll_id,) = _rows(kb, "SELECT id FROM kb_collections WHERE name = 'many'")[0]

    def staged() -> int:
        with psycopg.connect(kb.url, options=f"-c search_path={kb.schema}") as conn:
            if conn.execute("SELECT to_regclass(%s)", (f"kb_reembed_c{coll_id}",)).fetchone() == (
                None,
            ):
                return 0
            return int(conn.execute(f"SELECT count(*) FROM kb_reembed_c{coll_id}").fetchone()[0])

    kill_when(
        lambda: staged() >= 8,
        CHILD_REEMBED,
        kb.url,
        kb.schema,
        env=child_env(),
        reaching="its third batch",
    )
    done = staged()
    assert 8 <= done < len(texts), "killed mid-way"
    # killed: the collection is as it was, and searches it as before
    [info] = kb.collections()
    assert (info.embedding_model, info.chunks) == (DEFAULT_EMBEDDING_MODEL, len(texts))
    assert _vectors_of(kb, "many", 256) == len(texts)
    assert kb.search("the price of item 2", collection="many", limit=1)

    result = kb.reembed("many", "minilm", batch_size=16)

    assert result.resumed >= done and result.resumed + result.embedded == len(texts)
    assert _vectors_of(kb, "many", 384) == len(texts)
    # each vector is the new model's, of the chunk's searchable text
    chunk_id, text = _rows(kb, "SELECT id, text FROM kb_chunks ORDER BY id LIMIT 1")[0]
    stored = _rows(kb, "SELECT embedding FROM kb_embeddings_384 WHERE chunk_id = %s", chunk_id)[0][
        0
    ]
    expected = minilm_embeddings().embed_query(
        searchable_text(context_line(_title_of(kb, chunk_id), ""), text)
    )
    assert float(np.dot(np.asarray(stored), expected)) > 0.9999
    hits = kb.search("what does item 2 cost", collection="many", mode="semantic", limit=3)
    assert any("price of item 2" in h["text"] for h in hits)


def _doc(i: int, text: str) -> Any:
    from langchain_core.documents import Document

    return Document(page_content=text, metadata={"source": f"note-{i}.txt"})


def _title_of(kb: KnowledgeBase, chunk_id: str) -> str:
    from arcana_loop.knowledge.sections import document_title

    source, meta = _rows(
        kb,
        "SELECT d.source, d.metadata FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
        " WHERE c.id = %s",
        chunk_id,
    )[0]
    return document_title(source, meta or {})


def test_reembed_on_the_command_line(pg_url: str) -> None:
    runner = CliRunner()
    with temporary_collection(pg_url, "reembed", [(TOPICS["bread"], {})]) as name:
        done = runner.invoke(app, ["reembed", name, "--embeddings", "minilm"])
        assert done.exit_code == 0, done.output
        assert (
            f"Re-embedded '{name}' with {MINILM_MODEL} (was {DEFAULT_EMBEDDING_MODEL}): 1 chunk."
            in " ".join(done.output.split())
        )
        again = runner.invoke(app, ["reembed", name, "--embeddings", "minilm"])
        assert "already" in again.output and "(1 chunk)." in " ".join(again.output.split())

        bad = runner.invoke(app, ["reembed", name, "--embeddings", "nosuch"])
        assert bad.exit_code == 1 and "unknown embedding model 'nosuch'" in bad.output
        # ingest --embeddings picks a new collection's embedder, never another's
        other = runner.invoke(app, ["ingest", __file__, "-c", name, "--embeddings", "wordllama"])
        said = " ".join(other.output.split())
        assert other.exit_code == 1 and MINILM_MODEL in said and DEFAULT_EMBEDDING_MODEL in said
        assert f"arcana-loop reembed {name} --embeddings wordllama" in said
    gone = runner.invoke(app, ["reembed", name, "--embeddings", "wordllama"])
    assert gone.exit_code == 1 and f"no collection named {name!r}" in gone.output


def test_ask_over_collections_of_two_embedders_says_so_before_it_runs(pg_url: str) -> None:
    # every search would fail alike, and the answer read as though nothing was found
    runner = CliRunner()
    with (
        temporary_collection(pg_url, "bread", [(TOPICS["bread"], {})]) as plain,
        temporary_collection(pg_url, "logs", [(TOPICS["logs"], {})]) as other,
    ):
        assert runner.invoke(app, ["reembed", other, "--embeddings", "minilm"]).exit_code == 0
        asked = runner.invoke(app, ["ask", "How is bread baked?", "-c", plain, "-c", other])
        said = " ".join(asked.output.split())
        assert asked.exit_code == 1, asked.output
        assert "were embedded with different models" in said
        assert plain in said and other in said and "arcana-loop reembed" in said
        alone = runner.invoke(app, ["ask", "How is bread made?", "-c", plain, "--json"])
        assert alone.exit_code == 0, alone.output


def test_a_reembed_into_the_embedder_it_has_drops_what_another_staged(kb: KnowledgeBase) -> None:
    for name, text in TOPICS.items():
        kb.ingest(text, collection="notes", name=name)

    def stop(done: int, total: int) -> None:
        if done:
            raise RuntimeError("stopped after the first batch")

    with pytest.raises(RuntimeError, match="first batch"):
        kb.reembed("notes", "minilm", batch_size=1, progress=stop)
    assert _rows(kb, "SELECT embedding_model FROM kb_reembeds") == [(MINILM_MODEL,)]

    assert kb.reembed("notes", "wordllama").model_unchanged
    assert _rows(kb, "SELECT count(*) FROM kb_reembeds") == [(0,)]
    (coll_id,) = _rows(kb, "SELECT id FROM kb_collections WHERE name = 'notes'")[0]
    assert _rows(kb, "SELECT to_regclass(%s)", f"{kb.schema}.kb_reembed_c{coll_id}") == [(None,)]
    assert _vectors_of(kb, "notes", 256) == 3
