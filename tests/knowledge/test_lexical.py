"""The lexical side: code-aware terms, BM25 in PostgreSQL, exact document frequencies, operators."""

from __future__ import annotations

import random
import string
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from arcana_loop.knowledge import KnowledgeBase, lexical, writer
from arcana_loop.knowledge.sections import context_line, document_title

pytestmark = pytest.mark.postgres


def test_terms_keep_identifiers_whole_and_split_them():
    assert lexical.terms("asyncio.wait_for(aw, timeout)") == [
        "asyncio.wait_for",
        "asyncio",
        "wait_for",
        "wait",
        "aw",
        "timeout",
    ]
    assert lexical.terms("ThreadPoolExecutor") == [
        "threadpoolexecutor",
        "thread",
        "pool",
        "executor",
    ]
    # stop words and question filler go; stems meet their inflections
    assert lexical.terms("How do I use the timeouts?") == lexical.terms("timeout")


def test_words_of_any_script_are_terms_and_accents_are_one_spelling():
    assert lexical.terms("Le café résumé, Straße") == ["le", "café", "résumé", "straße"]
    # an accent typed as its own mark is the composed letter
    assert lexical.terms("cafe\u0301") == lexical.terms("café") == ["café"]
    # CamelCase is split in ASCII only; underscores split any script
    assert lexical.terms("Crème_Brûlée") == ["crème_brûlée", "crème", "brûlée"]
    assert lexical.terms("東京都の地図") == ["東京都の地図"]
    # vowel signs are marks: a word goes on through them
    assert lexical.terms("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert lexical.terms("שָׁלוֹם") == ["שָׁלוֹם"]


def test_a_word_beyond_ascii_is_found_by_the_lexical_side(kb: KnowledgeBase):
    kb.ingest("Отчёт о проекте занимает одну страницу.", collection="ru", name="report")
    kb.ingest("Совещание начинается в девять часов.", collection="ru", name="meeting")
    kb.ingest("Le résumé du projet tient en une page.", collection="ru", name="resume")
    hits = kb.search("совещание", collection="ru", mode="fulltext", limit=3)
    assert [h["metadata"]["source"] for h in hits][:1] == ["meeting"]
    # typed with combining accents, the word is the one stored composed
    hits = kb.search("re\u0301sume\u0301", collection="ru", mode="fulltext", limit=3)
    assert [h["metadata"]["source"] for h in hits][:1] == ["resume"]


def test_two_threads_stem_at_once_as_one_does():
    # an ingest's two writer threads weigh their batches' terms at the same time
    rng = random.Random(3)
    texts = [
        " ".join(
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 13)))
            for _ in range(50)
        )
        for _ in range(4000)
    ]
    lexical._stem.cache_clear()  # every word stemmed anew, not read from the cache
    results: dict[int, list[list[str]]] = {}
    errors: list[BaseException] = []

    def weigh(half: int) -> None:
        try:
            results[half] = [lexical.terms(t) for t in texts[half::2]]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=weigh, args=(half,)) for half in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    lexical._stem.cache_clear()
    assert results[0] == [lexical.terms(t) for t in texts[0::2]]
    assert results[1] == [lexical.terms(t) for t in texts[1::2]]


def test_operators_are_quoted_phrases_and_exclusions_only():
    assert lexical.has_operators('a "quoted phrase"') and lexical.has_operators("python -snake")
    assert not any(
        lexical.has_operators(q) for q in ("C++ threads", "x - y", "well-known", '"', "-5 degrees")
    )


def test_titles_and_context_lines():
    assert document_title("pydoc:asyncio.tasks", {}) == "asyncio.tasks"
    assert document_title("docs/deploy-guide.md", {}) == "deploy-guide"
    assert document_title("x", {"title": "The Title"}) == "The Title"
    assert context_line("guide", "guide > Install") == "guide > Install"


def _df(kb: KnowledgeBase) -> dict[int, int]:
    with kb.pool().connection() as conn:
        return dict(
            conn.execute(
                "SELECT key, sum(df)::int FROM kb_lex_terms WHERE df > 0 GROUP BY key"
            ).fetchall()
        )


def _chunks(kb: KnowledgeBase) -> int:
    with kb.pool().connection() as conn:
        row = conn.execute("SELECT coalesce(sum(chunks), 0) FROM kb_lex_stats").fetchone()
    assert row is not None
    return int(row[0])


def test_document_frequencies_follow_inserts_replacements_and_deletes(kb: KnowledgeBase):
    kb.ingest("zebra crossings stripe the road", collection="a", name="zebra")
    kb.ingest("a zebra grazes", collection="b", name="grazing")
    assert _df(kb)[lexical.key("zebra")] == 2 and _chunks(kb) == 2
    kb.ingest("a horse grazes", collection="b", name="grazing")  # replaced
    assert _df(kb)[lexical.key("zebra")] == 1 and _df(kb)[lexical.key("hors")] == 1
    kb.delete_collection("a")
    assert lexical.key("zebra") not in _df(kb) and _chunks(kb) == 1


def _recounted(kb: KnowledgeBase) -> tuple[dict[int, int], int]:
    """Document frequencies and chunk count counted afresh from the chunks' stored terms."""
    with kb.pool().connection() as conn:
        df = conn.execute(
            "SELECT k, count(*)::int FROM kb_chunks, unnest(lex_keys) AS k GROUP BY k"
        ).fetchall()
        row = conn.execute("SELECT count(*) FROM kb_chunks WHERE lex_keys IS NOT NULL").fetchone()
    assert row is not None
    return dict(df), int(row[0])


def test_chunks_moved_by_an_edit_keep_the_counts_exact(kb: KnowledgeBase, tmp_path: Path):
    guide = tmp_path / "guide.md"
    sections = [f"## Berth {n}\n\nBerth {n} takes ships of {n + 40} metres." for n in range(30)]
    guide.write_text("# Guide\n\n" + "\n\n".join(sections))
    kb.ingest(guide, collection="port", chunk_size=120, chunk_overlap=0)
    kb.ingest("A zebra grazes by the quay.", collection="port", name="zebra")
    guide.write_text("# Guide\n\nPilots board at the buoy.\n\n" + "\n\n".join(sections[1:]))
    moved = kb.ingest(guide, collection="port", chunk_size=120, chunk_overlap=0)
    assert moved.chunks_reused >= 25  # kept rows, their offsets rewritten
    assert (_df(kb), _chunks(kb)) == _recounted(kb)
    with kb.pool().connection() as conn:  # an update that does change terms is still counted
        conn.execute("UPDATE kb_chunks SET lex_keys = lex_keys[1:1] WHERE text LIKE '%zebra%'")
    assert (_df(kb), _chunks(kb)) == _recounted(kb)


@pytest.mark.parametrize("pipeline_max", [0, 64], ids=["copied", "pipelined"])
def test_an_edit_counts_its_own_terms_exactly(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline_max: int
):
    # an edit counts the terms it deletes and inserts itself, once, net (the triggers stand
    # aside): beside a new document in the same batch, written by COPY or in a pipeline
    monkeypatch.setattr(writer, "PIPELINE_MAX_CHUNKS", pipeline_max)
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    sections = [f"## Berth {n}\n\nBerth {n} takes ships of {n + 40} metres." for n in range(30)]
    (shelf / "guide.md").write_text("# Guide\n\n" + "\n\n".join(sections))
    kb.ingest(shelf, collection="port", chunk_size=120, chunk_overlap=0)
    sections[3] = "## Berth 3\n\nBerth 3 was dredged for tankers and zebra barges."
    del sections[20]
    (shelf / "guide.md").write_text("# Guide\n\n" + "\n\n".join(sections))
    (shelf / "pilots.md").write_text("# Pilots\n\nPilots board at the buoy.")
    edit = kb.ingest(shelf, collection="port", chunk_size=120, chunk_overlap=0)
    assert (edit.documents_replaced, edit.documents_added, edit.chunks_removed) == (1, 1, 2)
    assert (_df(kb), _chunks(kb)) == _recounted(kb)
    assert _df(kb)[lexical.key("dredg")] == 1 and _df(kb)[lexical.key("pilot")] == 1


def test_an_earlier_counting_function_is_replaced_on_open(kb: KnowledgeBase, pg_url: str):
    kb.ingest("The sourdough starter needs flour and water.", collection="bread", name="starter")
    with kb.pool().connection() as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION kb_lex_count() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RETURN NULL; END $$"
        )
    kb.close()
    reopened = KnowledgeBase(pg_url, embeddings=kb.embeddings, schema=kb.schema)
    try:
        reopened.ingest("Rye bread rises slowly.", collection="bread", name="rye")
        assert (_df(reopened), _chunks(reopened)) == _recounted(reopened) and _chunks(reopened) == 2
    finally:
        reopened.close()


def test_chunks_stored_before_the_lexical_index_are_backfilled(kb: KnowledgeBase, pg_url: str):
    kb.ingest("The sourdough starter needs flour and water.", collection="bread", name="starter")
    before = _df(kb)
    with kb.pool().connection() as conn:
        conn.execute("UPDATE kb_chunks SET lex = NULL, lex_keys = NULL")
    assert _df(kb) == {} and kb.search("sourdough", mode="fulltext") == []
    kb.close()
    reopened = KnowledgeBase(pg_url, embeddings=kb.embeddings, schema=kb.schema)
    try:
        assert [h["text"] for h in reopened.search("sourdough", mode="fulltext")] == [
            "The sourdough starter needs flour and water."
        ]
        assert _df(reopened) == before
    finally:
        reopened.close()


def _weights(kb: KnowledgeBase, collection: str, text: str) -> str:
    with kb.pool().connection() as conn:
        row = conn.execute(
            "SELECT c.lex::text FROM kb_chunks c JOIN kb_collections k ON k.id = c.collection_id"
            " WHERE k.name = %s AND c.text = %s",
            (collection, text),
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_length_normalisation_is_the_collections_not_the_ingest_calls(kb: KnowledgeBase):
    short = "Tides turn at six."
    probe = "The harbour crane lifts forty tonnes of cargo."
    long = " ".join(f"Berth {n} is dredged to {n + 9} metres every spring." for n in range(30))
    for collection in ("with-long", "alone"):
        kb.ingest(short, collection=collection, name="short")
    kb.ingest(
        [
            Document(probe, metadata={"source": "probe"}),
            Document(long, metadata={"source": "long"}),
        ],
        collection="with-long",
    )
    kb.ingest(probe, collection="alone", name="probe")
    # weighed against the average its collection's first ingest set, whatever came with it
    assert _weights(kb, "with-long", probe) == _weights(kb, "alone", probe)
    with kb.pool().connection() as conn:
        rows = conn.execute("SELECT lex_avg_len, lex_version FROM kb_collections").fetchall()
    assert {version for _, version in rows} == {lexical.LEXICAL_VERSION}
    assert len({avg for avg, _ in rows}) == 1


def test_a_collection_weighed_under_another_version_is_weighed_again_on_opening(
    kb: KnowledgeBase, pg_url: str
):
    texts = ["Tides turn at six.", "The harbour crane lifts forty tonnes of cargo every day."]
    for n, text in enumerate(texts):
        kb.ingest(text, collection="port", name=f"t{n}")
    garbage = "{1:9}/1000000000"
    with kb.pool().connection() as conn:
        # as an earlier weighting left it, under another version
        conn.execute("UPDATE kb_chunks SET lex = %s::sparsevec", (garbage,))
        conn.execute("UPDATE kb_collections SET lex_version = 'terms0-k1=2-b=0.5'")
    kb.close()
    reopened = KnowledgeBase(pg_url, embeddings=kb.embeddings, schema=kb.schema)
    try:
        with reopened.pool().connection() as conn:
            row = conn.execute(
                "SELECT lex_version, lex_avg_len FROM kb_collections WHERE name = 'port'"
            ).fetchone()
        assert row is not None and row[0] == lexical.LEXICAL_VERSION
        lengths = [
            len(lexical.terms(f"{context_line(document_title(f't{n}', {}), '')}\n{t}"))
            for n, t in enumerate(texts)
        ]
        assert row[1] == pytest.approx(sum(lengths) / len(lengths), abs=1.0)
        assert all(_weights(reopened, "port", t) != garbage for t in texts)
        hits = reopened.search("crane tonnes", collection="port", mode="fulltext")
        assert [h["text"] for h in hits] == [texts[1]]
    finally:
        reopened.close()


def test_bm25_ranks_by_rare_terms_and_term_frequency(kb: KnowledgeBase):
    for i in range(20):
        kb.ingest(f"note {i}: the function returns a value", collection="c", name=f"n{i}")
    kb.ingest(
        "heapq.merge merges sorted inputs; the function returns an iterator",
        collection="c",
        name="merge",
    )
    kb.ingest("merge merge merge: merging things, merged", collection="c", name="spam")
    hits = kb.search("which function merges sorted inputs", mode="fulltext", limit=3)
    assert hits[0]["metadata"]["source"] == "merge"
    assert hits[0]["score"] > hits[1]["score"] > 0


def test_a_chunk_is_found_by_its_document_title_and_section(kb: KnowledgeBase):
    doc = "# Deployment\n\n## Rollback\n\n" + "Run the previous release again. " * 3
    kb.ingest(doc, collection="ops", name="runbook.md")
    kb.ingest("Rolling forward is preferred over rolling back.", collection="ops", name="notes")
    hits = kb.search("rollback runbook", mode="fulltext")
    assert hits[0]["metadata"]["source"] == "runbook.md"
    assert hits[0]["metadata"]["section"] == "Deployment > Rollback"
    assert "runbook" not in hits[0]["text"]  # the context is searched, not shown


@pytest.mark.parametrize("mode", ["fulltext", "hybrid"])
@pytest.mark.parametrize("ranking", ["bm25", "ts_rank"])
def test_operators_never_fall_back_to_any_word(kb: KnowledgeBase, mode: str, ranking: str):
    from dataclasses import replace

    kb.ranking = replace(kb.ranking, lexical=ranking)
    kb.ingest("python snake facts: pythons are constrictors", collection="z", name="snake")
    kb.ingest("python programming facts: python runs scripts", collection="z", name="code")
    fulltext = {h["metadata"]["source"] for h in kb.search("python -snake", mode="fulltext")}
    assert fulltext == {"code"}
    # an exclusion that opens the query excludes too (it was read as the word itself)
    for query in ("-snake python", "-snake"):
        found = {h["metadata"]["source"] for h in kb.search(query, mode="fulltext")}
        assert found <= {"code"} and (query == "-snake" or found == {"code"}), query
    assert kb.search('"constrictor programming"', mode="fulltext") == []
    if mode == "hybrid":  # the semantic side may still find things; the lexical side adds none
        hits: list[Any] = kb.search('"zzqx nowhere phrase"', mode="hybrid")
        assert all(
            h["score"] <= kb.ranking.semantic_weight / (kb.ranking.rrf_k + 1) + 1e-9 for h in hits
        )
