"""Search SQL, as pure builders shared by the sync and async paths.

Raw parameterised SQL rather than `langchain-postgres`: measured on the same 10k
table, its `PGVectorStore` took 3.3x the time of the equivalent raw query, and we
need statement-level control it does not give (transaction-local `hnsw.*`
settings, one-statement hybrid fusion, the exact-scan fallback). User text (the
query, collection names) only ever travels as parameters; identifiers come from
our own constants (`knowledge.schema`).

Modes:

* `semantic`: cosine similarity (`1 - (embedding <=> q)`), HNSW with
  `hnsw.iterative_scan = relaxed_order` so a collection filter still yields
  `limit` rows, beside an exact scan of the vectors still pending outside the graph
  (`_SEMANTIC_GRAPH`); an exact scan of all when the scoped rows are few (`exact_max_rows`).
* `fulltext`: BM25 (`_BM25`), or `websearch_to_tsquery('english', q)` ranked by `ts_rank_cd`; when
  that AND-query matches nothing in scope, the query's words are OR-ed instead,
  ranking only the rows that match its rarest words (`_FULLTEXT`).
* `hybrid`: weighted reciprocal-rank fusion (`Ranking`) of the semantic and fulltext
  top-N in one statement, with a mild prior against chunks shorter than 300
  characters. A semantic-only candidate must reach `hybrid_min_similarity`, and a
  fulltext candidate exists only if it matched, so a chunk that matches neither side
  well is never returned.

A search may read each hit whole (`knowledge.whole`): the ranked rows then carry, in the
same statement, the chunks of the best hit's section (`_WHOLE_SELECT`).
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from arcana_loop.knowledge import lexical, whole
from arcana_loop.knowledge.errors import EmbeddingMismatch
from arcana_loop.knowledge.filters import check_filter, filter_sql
from arcana_loop.knowledge.names import check_text
from arcana_loop.knowledge.placed import PLACED_CHUNK_SQL, PLACED_POSITION_SQL, PLACED_START_SQL
from arcana_loop.knowledge.schema import embeddings_table
from arcana_loop.knowledge.types import SEARCH_MODES, Chunk, SearchMode

RRF_K = 10
"""The fusion constant: small, so a chunk either side ranks near the top counts most. Tuned
on the realistic set's tune half with the sections a search returns (evaluation/README.md):
with all-MiniLM-L6-v2, k 5-10 at lexical weight 0.6 gave hit@5 0.79-0.80 against 0.72 at
k 60 and 1.3; k 10 keeps the lookup set whole with WordLlama, where k 5 moved one question
to second."""
MAX_QUERY_CHARS = 2000
"""Longer queries are cut to this many characters (at a word's end), for embedding and for tsquery."""
MAX_OR_WORDS = 32
DEFAULT_OR_BUDGET = 500
"""Estimated rows the OR fallback of full-text search ranks (see `_FULLTEXT`)."""
DEFAULT_EF_SEARCH = 300
"""HNSW candidate list of a search, each collection's index walked with it.

Recall@5 against an exact scan (`bench.kb_bench`, 2 cores; p50 of the search call):

| corpus, scope | 200 | 300 |
|---|---|---|
| 100k, both collections | 0.980, 8.2 ms | 0.988, 8.8 ms |
| 100k, 10k-vector collection | 0.987, 4.8 ms | 1.000, 5.0 ms |
| 1M, both collections | 0.936-0.944, 12-15 ms | 0.952-0.953, 17 ms |
| 1M, 96k-vector collection | 0.944-0.949, 7.9 ms | 0.963, 7.3 ms |

200 missed 0.95 at 1M, in a collection of 96k short texts as well as over everything: how
hard a graph is to search depends on its texts more than on its size, so one default,
at a fraction of a millisecond on small collections, rather than a size threshold."""
MAX_EF_SEARCH = 1000
DEFAULT_EXACT_MAX_ROWS = 20_000
PARALLEL_EXACT_MIN_ROWS = 50_000
"""Exact scans estimated at this many rows or more may use parallel workers."""
DEFAULT_HYBRID_MIN_SIMILARITY = 0.35
_WORD = re.compile(r"[^\W_]+")
_JUNK = re.compile(r"[^\w\s\"-]+")
_STRAY_DASH = re.compile(r"(?<=[^\s\"])-+|-+(?![^\W_])|-{2,}")

Statement = tuple[sql.Composable, dict[str, Any]]


@dataclass(frozen=True)
class SearchRequest:
    """A validated search call."""

    query: str
    names: list[str] | None
    """`None` for unrestricted, else the collection names to search (never empty)."""
    limit: int
    mode: SearchMode
    threshold: float | None
    ef_search: int
    filter: dict[str, Any] | None = None
    """A checked metadata filter (`knowledge.filters`), or ``None``."""
    section_chars: int | None = None
    """Each hit is read as its whole section up to this many characters (`knowledge.whole`);
    ``None``: each hit is its chunk alone."""


@dataclass(frozen=True)
class ResolvedCollections:
    """The collection ids one request may search, with the embedding dimension they share.

    Not a scope as callers give it (`None`, `"all"`, names): the ids those names
    resolved to in the database, for this request only.
    """

    ids: list[int]
    dimension: int
    vectors: int = 0
    """The planner's estimate of the vectors they hold (`scope_statement`): exact scan or HNSW.

    A metadata filter does not change the choice: an exact scan still reads every
    row of the scope to test the filter (a 10 % ``$like`` filter at 100k rows: 77 ms
    exact, 7 ms through HNSW's iterative scan)."""
    present_word_keys: frozenset[int] = frozenset()
    """Which of the query's word terms some chunk of these collections holds (`scope_statement`)."""


MAX_SEARCH_LIMIT = 10_000
"""Most chunks one search returns (PostgreSQL's LIMIT takes a bigint; nobody reads more)."""


def check_limit_and_threshold(limit: object, threshold: object) -> None:
    """Refuse what PostgreSQL would reject late (a huge limit) or compare silently wrong (NaN).

    Raises:
        ValueError: for a limit outside 1..`MAX_SEARCH_LIMIT` or a non-finite threshold.
        TypeError: for a threshold that is not a real number (`bool` is not one here).
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be an int in 1..{MAX_SEARCH_LIMIT}, got {limit!r}")
    if threshold is None:
        return
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(
            f"threshold must be a number or None, got {type(threshold).__name__} {threshold!r}"
        )
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")


def make_request(
    query: str,
    *,
    collection: str | Sequence[str] | None,
    limit: int,
    mode: str,
    threshold: float | None,
    ef_search: int | None,
    filter: Any = None,
    whole_sections: bool = False,
    section_chars: int | None = None,
) -> SearchRequest | None:
    """Validate arguments; return `None` when the scope is an empty list (match nothing).

    Raises:
        ValueError: for a blank query, a bad mode, limit, ef_search or section budget.
        TypeError: for a query or collection of the wrong type, or a `whole_sections`
            that is not a bool.
    """
    check_limit_and_threshold(limit, threshold)
    value: object = query  # the loop passes model-written arguments
    if not isinstance(value, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("search query is empty or blank")
    check_text(query, "search query")  # a lone surrogate cannot be embedded or sent
    if mode not in SEARCH_MODES:
        raise ValueError(f"invalid search mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}")
    if not _is_int(limit) or limit < 1:
        raise ValueError(f"limit must be a positive int, got {limit!r}")
    ef = DEFAULT_EF_SEARCH if ef_search is None else ef_search
    if not _is_int(ef) or not 1 <= ef <= MAX_EF_SEARCH:
        raise ValueError(f"ef_search must be an int in 1..{MAX_EF_SEARCH}, got {ef_search!r}")
    checked = check_filter(filter)  # a bad filter fails before anything runs
    if not isinstance(whole_sections, bool):
        raise TypeError(f"whole_sections must be a bool, got {whole_sections!r}")
    budget = whole.DEFAULT_SECTION_CHARS if section_chars is None else section_chars
    budget = whole.check_budget(budget)
    names = scope_names(collection)
    if names == []:
        return None
    return SearchRequest(
        query=cut_query(query.strip()),
        names=names,
        limit=limit,
        mode=mode,
        threshold=None if threshold is None else float(threshold),
        ef_search=ef,
        filter=checked,
        section_chars=budget if whole_sections else None,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def scope_names(collection: str | Sequence[str] | None) -> list[str] | None:
    """Normalise `collection`: `None`/`"all"` is unrestricted, a name or a list of names.

    Raises:
        TypeError: for names that are not strings.
        ValueError: for a name with a NUL character (PostgreSQL text cannot hold one).
    """
    if collection is None or collection == "all":
        return None
    if not isinstance(collection, str | Sequence):
        raise TypeError(
            "collection must be None, 'all', a name, or a list of names,"
            f" got {type(collection).__name__}"
        )
    names = [collection] if isinstance(collection, str) else list(collection)
    if not all(isinstance(n, str) for n in names):
        raise TypeError("collection must be None, 'all', a name, or a list of names")
    if any("\x00" in n for n in names):
        raise ValueError("collection names must not contain NUL characters")
    # names are stored in NFC: an NFD spelling of the same name must find it
    return [unicodedata.normalize("NFC", n) for n in names]


def cut_query(query: str) -> str:
    """The query cut to `MAX_QUERY_CHARS`, before a word the cut would split.

    Half a word is no word of the question: searched for, it matched nothing, and the
    knowledge base was said never to mention it (``deplo`` of ``deployment``).
    """
    if len(query) <= MAX_QUERY_CHARS:
        return query
    cut = query[:MAX_QUERY_CHARS]
    if query[MAX_QUERY_CHARS].isspace():
        return cut
    return cut.rsplit(None, 1)[0]  # one word longer than the cut is kept as its start


def scope_statement(req: SearchRequest) -> Statement:
    """Return the statement listing the collections a request may search.

    Each row: id, name, embedding model, dimension, whether the collection has
    entities (a knowledge graph), the planner's estimate of its vectors
    (`_ESTIMATED_VECTORS`), and which of the query's word terms its chunks hold
    (`_PRESENT_WORDS`). They are asked here rather than in statements of their
    own: each statement is a round trip, 0.3-0.6 ms on a search of 2-4 ms.
    """
    base = (
        "SELECT k.id, k.name, k.embedding_model, k.dimension,"
        " EXISTS (SELECT 1 FROM kb_graph_entities g WHERE g.collection_id = k.id),"
        " (" + _ESTIMATED_VECTORS + "), (" + _PRESENT_WORDS + ") FROM kb_collections k"
    )
    params: dict[str, Any] = {
        "word_keys": sorted({lexical.key(t) for t in lexical.word_terms(req.query).values()})
    }
    if req.names is None:
        return sql.SQL(base), params
    return sql.SQL(base + " WHERE k.name = ANY(%(names)s)"), {**params, "names": req.names}


_PRESENT_WORDS = """
SELECT coalesce(array_agg(t.key), '{}') FROM kb_lex_terms t
WHERE t.collection_id = k.id AND t.key = ANY(%(word_keys)s::integer[]) AND t.df > 0
"""
"""The keys of the query's word terms (`lexical.word_terms`) some chunk of the collection
holds: an index lookup per word on `kb_lex_terms`' primary key."""


_ESTIMATED_VECTORS = """
SELECT sum(CASE WHEN c.reltuples > 0 AND c.relpages > 0 THEN c.reltuples / c.relpages
                ELSE greatest(1, 8168 / (4 * k.dimension + 64)) END
           * pg_relation_size(c.oid) / current_setting('block_size')::int)::bigint
FROM pg_class p JOIN pg_namespace n ON n.oid = p.relnamespace
JOIN pg_inherits i ON i.inhparent = p.oid JOIN pg_class c ON c.oid = i.inhrelid
WHERE n.nspname = current_schema() AND p.relname = 'kb_embeddings_' || k.dimension || '_c' || k.id
"""
"""The vectors of a collection's segments as the planner would estimate them: the
density their statistics last measured (rows a page; before any, what fits a page at
this dimension) times the pages they have now, so a segment that grew since its last
ANALYZE is estimated at its size now. The partition is named as
`schema.partition_table` names it, its segments are its partitions. A real bounded count cost 5-7 ms at 100k
rows, more than the HNSW search itself. A wrong estimate only changes speed or
recall a little, never which rows are eligible."""


def resolve_collections(
    req: SearchRequest, rows: Sequence[tuple[Any, ...]], model: str, dimension: int
) -> ResolvedCollections:
    """Keep the collections a request may search, checking the embedder for named ones.

    Unrestricted semantic and hybrid searches cover the collections built with this
    embedder; a named collection built with another one is an error. Fulltext
    needs no embedder and covers every collection in scope.

    Raises:
        EmbeddingMismatch: if a named collection was embedded differently.
    """
    if req.mode == "fulltext":
        return ResolvedCollections(
            ids=[r[0] for r in rows],
            dimension=dimension,
            present_word_keys=frozenset(k for r in rows for k in r[6] or ()),
        )
    ids = []
    vectors = 0
    present: set[int] = set()
    for coll_id, name, coll_model, coll_dim, _, estimate, word_keys in rows:
        if coll_model == model and coll_dim == dimension:
            ids.append(coll_id)
            vectors += int(estimate or 0)
            present.update(word_keys or ())
        elif req.names is not None:
            raise EmbeddingMismatch(
                f"collection {name!r} was embedded with {coll_model!r} ({coll_dim} dims); "
                f"this knowledge base uses {model!r} ({dimension} dims)"
            )
    return ResolvedCollections(
        ids=ids, dimension=dimension, vectors=vectors, present_word_keys=frozenset(present)
    )


def candidate_pool(req: SearchRequest) -> int:
    """Return how many candidates each side of a search ranks."""
    return req.limit if req.mode == "semantic" else max(4 * req.limit, 40)


FILTERED_EF_FACTOR = 3
"""How much wider the HNSW candidate list of a metadata-filtered search is. The iterative scan walks the graph until enough
candidates pass the filter, but it starts from the candidates ``ef_search`` keeps; at 100k
chunks a 10 % metadata filter recalled 0.894 at ``ef_search`` 200 against an exact scan,
at 600 (three times as wide) it recalled 0.962, its p50 6 -> 12 ms (`bench.lifecycle_bench`).
A collection scope is left at ``ef_search``: each collection's vectors have an index of
their own (a partition each, `knowledge.schema`), searched as if the collection were alone."""


def settings_statement(req: SearchRequest) -> Statement:
    """Return transaction-local HNSW settings for an index search.

    The candidate list is wider under a metadata filter (`FILTERED_EF_FACTOR`).
    """
    ef = max(req.ef_search, candidate_pool(req))
    if req.filter:
        ef *= FILTERED_EF_FACTOR
    ef = min(MAX_EF_SEARCH, ef)
    query = sql.SQL(
        "SELECT set_config('hnsw.ef_search', %(ef)s, true),"
        " set_config('hnsw.iterative_scan', 'relaxed_order', true)"
    )
    return query, {"ef": str(ef)}


def scan_settings(req: SearchRequest, *, exact: bool, rows: int) -> Statement | None:
    """Return the transaction-local settings a semantic search needs, if any.

    HNSW searches get `settings_statement`; exact scans of at least
    `PARALLEL_EXACT_MIN_ROWS` (estimated) rows get `exact_settings_statement`;
    smaller exact scans none, since starting workers costs more than they save.
    """
    if not exact:
        return settings_statement(req)
    return exact_settings_statement() if rows >= PARALLEL_EXACT_MIN_ROWS else None


def exact_settings_statement() -> Statement:
    """Return transaction-local settings that let a large exact scan run in parallel.

    With the default costs the planner kept a 100k-row exact scan on one process
    (68 ms); cheaper parallel start-up and tuple transfer give it two workers
    (48 ms, same machine, same run). On a 9k-row collection the same settings
    started workers too and made the scan slower, hence `scan_settings`.
    """
    query = sql.SQL(
        "SELECT set_config('parallel_setup_cost', '100', true),"
        " set_config('parallel_tuple_cost', '0.001', true)"
    )
    return query, {}


def and_query(text: str) -> str:
    """Return the query for `websearch_to_tsquery`, keeping only its `"phrase"` and `-word` syntax.

    Runs of punctuation (a reStructuredText table rule of `-` signs, for one) can
    overflow PostgreSQL's tsquery stack ("tsquery stack too small"); only a `-`
    directly before a word, at the start of a word, keeps its meaning.
    """
    kept = _JUNK.sub(" ", text)
    return _STRAY_DASH.sub(" ", kept)


def or_query(text: str) -> str:
    """Return the query's words OR-ed, in `websearch_to_tsquery` syntax (never a syntax error)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:MAX_OR_WORDS]
    return " or ".join(w for w in words if w != "or")


_SELECT = """
SELECT c.id, c.text, {score}::float8, k.name, c.document_id, {placed}
FROM ranked r
JOIN kb_chunks c ON c.id = r.chunk_id
JOIN kb_collections k ON k.id = c.collection_id
JOIN kb_documents d ON d.id = c.document_id
WHERE (%(threshold)s::float8 IS NULL OR {score} >= %(threshold)s::float8)
ORDER BY {score} DESC, c.id
LIMIT %(limit)s
"""
_LENGTH_PRIOR = (
    "r.score * power(least(1.0, length(c.text) / %(prior_chars)s::float8), %(prior_power)s::float8)"
)
"""A hybrid score with `Ranking`'s length prior: a chunk shorter than ``prior_chars`` loses a
little (a 119-character ``hashlib.sha256`` signature, 9 % at 300 and 0.1), so a member that
answers can pass the short namesakes whose titles match the question's words."""

_SECTION = """
(SELECT json_agg(json_build_array(s.id, s.text, s.pos, s.start, s.n) ORDER BY s.pos)
 FROM (SELECT c.id, c.text, {pos} AS pos, {start} AS start,
              count(*) OVER () AS n, row_number() OVER (ORDER BY {pos}) AS nth
       FROM kb_documents d CROSS JOIN LATERAL (
         SELECT c.id, c.text, c.position, c.metadata FROM kb_chunks c WHERE c.document_id = d.id
           AND coalesce(c.metadata ->> 'section', '') = coalesce(h.metadata ->> 'section', '')
           AND coalesce(c.metadata ->> 'page', '') = coalesce(h.metadata ->> 'page', '')
           {where}) c
       WHERE d.id = h.document_id) s
 WHERE s.nth = 1 OR s.pos BETWEEN h.position - %(window)s AND h.position + %(window)s)
"""
"""The section of hit ``h`` (`knowledge.whole`): its document's chunks under the same section
path and on the same page (a PDF has pages, not sections), and the search's metadata filter, read as ``[id, text, position, start_index, total]``:
the section's first chunk and those within `whole.SIBLING_WINDOW` of the hit; found through
the chunks' document index. The document row comes first, read once: joined per chunk, it
was looked up again for each of a section's chunks (200 lookups for a 200-chunk document)."""
_WHOLE_SELECT = """,
hits (id, text, score, collection, document_id, position, metadata) AS ({select}),
ranked_hits AS (
  SELECT f.*, sum((f.rank = f.section_rank)::int) OVER (ORDER BY f.rank) AS section_no
  FROM (SELECT r.*, min(r.rank) OVER (
          PARTITION BY r.document_id, coalesce(r.metadata ->> 'section', ''),
            coalesce(r.metadata ->> 'page', '')) AS section_rank
        FROM (SELECT h.*, row_number() OVER (ORDER BY h.score DESC, h.id) AS rank FROM hits h) r) f)
SELECT h.id, h.text, h.score, h.collection, h.document_id, h.position, h.metadata,
  CASE WHEN h.rank = h.section_rank AND h.section_no <= %(sections)s THEN {section} END
FROM ranked_hits h ORDER BY h.rank
"""
"""The ranked rows, with the section (`_SECTION`) of each of the first ``sections`` sections
in one more column, on its best row. The search ranks more rows than it returns
(`whole.ROWS_PER_RESULT`), which fall in more sections than it returns: reading every
one of them took 11 section reads instead of 5 on a 100k-chunk collection, about 1 ms
each. A section past the first ones that a fused ranking still needs is read
afterwards (`sections_statement`)."""
_SECTIONS_OF = """
SELECT h.id, '', 0::float8, '', h.document_id, h.position, h.metadata, {section}
FROM (SELECT c.id, c.document_id, {placed}
      FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id
      WHERE c.id = ANY(%(hit_ids)s)) h (id, document_id, position, metadata)
"""
"""The sections of chunks found another way (by the knowledge graph alone), as `_WHOLE_SELECT` rows."""

_SEMANTIC = """
SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s) AS sim
FROM {t} e {join} WHERE e.collection_id = ANY(%(ids)s) {where}
ORDER BY sim DESC LIMIT %(pool)s
"""
"""An exact scan. Ordering by the selected similarity, not the distance, computes one
distance a row instead of two (the sort key and the output were separate expressions)
and is no index order, so the scan is exact: 6.5 -> 5.7 ms on a 10k-row collection."""
_SEMANTIC_GRAPH = """
SELECT chunk_id, sim FROM (
  (SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s) AS sim
   FROM {t} e {join} WHERE e.collection_id = ANY(%(ids)s) AND NOT e.pending {where}
   ORDER BY e.embedding <=> %(q)s LIMIT %(pool)s)
  UNION ALL
  (SELECT e.chunk_id, 1 - (e.embedding <=> %(q)s) AS sim
   FROM {t} e {join} WHERE e.collection_id = ANY(%(ids)s) AND e.pending {where}
   ORDER BY sim DESC LIMIT %(pool)s)) v
ORDER BY sim DESC LIMIT %(pool)s
"""
"""An index search: the HNSW graph's nearest (its partial index holds no pending
vector), and the pending vectors, which wait outside it, scanned exactly
(`knowledge.schema`); with none pending the second branch is an empty index scan."""
_FILTER_JOIN = "JOIN kb_chunks fc ON fc.id = e.chunk_id"
"""A filtered semantic search reads each candidate's metadata (`fc`): the HNSW scan
iterates (``hnsw.iterative_scan``) until enough candidates pass."""

_FULLTEXT = """
ftq AS MATERIALIZED (
  SELECT websearch_to_tsquery('english', %(text)s) AS q_and,
         websearch_to_tsquery('english', %(or_text)s) AS q_or),
ft_and AS MATERIALIZED (
  SELECT id AS chunk_id, ts_rank_cd(tsv, (SELECT q_and FROM ftq)) AS rank
  FROM kb_chunks WHERE tsv @@ (SELECT q_and FROM ftq) AND collection_id = ANY(%(ids)s) {where}
  ORDER BY rank DESC, id LIMIT %(pool)s),
ft_stats AS MATERIALIZED (
  SELECT (SELECT reltuples FROM pg_class WHERE oid = 'kb_chunks'::regclass) AS n,
         s.most_common_elems::text::text[] AS elems, s.most_common_elem_freqs AS freqs
  FROM (SELECT 1) AS one
  LEFT JOIN pg_stats s
    ON s.schemaname = current_schema() AND s.tablename = 'kb_chunks' AND s.attname = 'tsv'),
ft_words AS (
  SELECT w.lexeme,
         coalesce(st.freqs[array_position(st.elems, w.lexeme)],
                  st.freqs[array_length(st.freqs, 1) - 2], 0) AS freq
  FROM unnest(tsvector_to_array(to_tsvector('english', %(or_text)s))) AS w(lexeme)
  CROSS JOIN ft_stats st),
ft_rare AS MATERIALIZED (
  SELECT CASE
    WHEN (SELECT reltuples FROM pg_class WHERE oid = 'kb_chunks'::regclass) <= %(or_budget)s
      THEN (SELECT q_or FROM ftq)
    ELSE (
      SELECT string_agg(quote_literal(r.lexeme), ' | ')::tsquery
      FROM (SELECT lexeme, freq, sum(freq) OVER (ORDER BY freq, lexeme) - freq AS before
            FROM ft_words) r
      CROSS JOIN ft_stats st
      WHERE r.before = 0 OR r.before * coalesce(st.n, 0) < %(or_budget)s)
    END AS q),
ft_or AS (
  SELECT id AS chunk_id, ts_rank_cd(tsv, (SELECT q_or FROM ftq)) AS rank
  FROM kb_chunks
  WHERE %(plain)s AND NOT EXISTS (SELECT 1 FROM ft_and)
    AND tsv @@ (SELECT q FROM ft_rare) AND collection_id = ANY(%(ids)s) {where}
  ORDER BY rank DESC, id LIMIT %(pool)s),
fts AS (SELECT chunk_id, rank FROM ft_and UNION ALL SELECT chunk_id, rank FROM ft_or)
"""
"""Full-text candidates, as CTEs ending in `fts (chunk_id, rank)`.

The AND query (`ft_and`) is tried first. Only when it matches nothing in scope
does `ft_or` run: it keeps the rows matching the query's rarest words, the
rarest first while the planner statistics (`pg_stats` of `kb_chunks.tsv`)
estimate fewer than `or_budget` matching rows (always at least one word), and
ranks them with `ts_rank_cd` against all the words OR-ed. Ranking every row
that matches any word cost 0.2-1.5 s at 100k chunks, since common words match a
quarter of the table; rows sharing only common words with the query were the
weakest matches anyway. A word missing from the statistics' most common
elements counts at the least common one's frequency (an upper bound). Without
statistics (a table never analysed) every word is kept, as before; so it is
when the whole table holds no more than `or_budget` rows, without reading the
statistics (1.2 ms).
"""

_BM25 = """
lexq AS MATERIALIZED (
  SELECT q.key, coalesce(t.df, 0) AS df,
         ln(1 + (st.n - coalesce(t.df, 0) + 0.5) / (coalesce(t.df, 0) + 0.5)) AS idf
  FROM unnest(%(lex_keys)s::integer[]) AS q(key)
  LEFT JOIN (SELECT key, sum(df)::bigint AS df FROM kb_lex_terms
             WHERE collection_id = ANY(%(ids)s) AND key = ANY(%(lex_keys)s::integer[])
             GROUP BY key) t ON t.key = q.key
  CROSS JOIN (SELECT greatest(coalesce(sum(chunks), 0), 1)::float8 AS n FROM kb_lex_stats
              WHERE collection_id = ANY(%(ids)s)) st),
lexv AS MATERIALIZED (
  SELECT ('{{' || string_agg((key + 1) || ':' || idf, ',' ORDER BY key) || '}}/1000000000')::sparsevec AS v
  FROM lexq WHERE df > 0),
lexsel AS MATERIALIZED (
  SELECT array_agg(key) AS keys
  FROM (SELECT key, df, sum(df) OVER (ORDER BY df, key) - df AS before FROM lexq WHERE df > 0) r
  WHERE r.before = 0 OR r.before < %(or_budget)s),
bm AS MATERIALIZED (
  SELECT id AS chunk_id, coalesce(-(lex <#> (SELECT v FROM lexv)), 0) AS rank
  FROM kb_chunks
  WHERE {candidates} AND collection_id = ANY(%(ids)s) {where}
  ORDER BY rank DESC, id LIMIT %(pool)s),
fts AS (SELECT chunk_id, rank FROM bm WHERE rank >= %(lex_ratio)s * (SELECT max(rank) FROM bm))
"""
"""BM25 candidates (`knowledge.lexical`), as CTEs ending in `fts (chunk_id, rank)`.

The query's terms get their IDF from `kb_lex_terms`, summed over the scope's collections
(so no other collection's content moves a score); the chunks scored are those
holding one of the query's rarer terms, taking terms from the rarest while the
rows they match stay under `or_budget` (always at least one term), so a query
of common words does not score a quarter of the table; every term still counts
in the score of the rows scored. A query with full-text operators (a quoted
phrase, a ``-word``) scores only the rows its `websearch_to_tsquery` matches,
and never falls back to any of its words. Rows scoring below `lexical_min_ratio`
of the best row are dropped: they share only common words with the query, and
reciprocal-rank fusion would otherwise rank them as if they matched as well.
"""
_BM25_WORDS = "lex_keys && (SELECT keys FROM lexsel)"
_BM25_OPERATORS = "tsv @@ websearch_to_tsquery('english', %(text)s)"

_HYBRID = """
WITH sem AS (SELECT chunk_id, sim, row_number() OVER (ORDER BY sim DESC, chunk_id) AS rnk
             FROM ({semantic}) s),
{fulltext},
ft AS (SELECT chunk_id, row_number() OVER (ORDER BY rank DESC, chunk_id) AS rnk FROM fts),
ranked AS (
  SELECT coalesce(sem.chunk_id, ft.chunk_id) AS chunk_id,
         coalesce(%(w_sem)s::float8 / (%(rrf_k)s + sem.rnk), 0)
           + coalesce(%(w_lex)s::float8 / (%(rrf_k)s + ft.rnk), 0) AS score
  FROM sem FULL OUTER JOIN ft ON ft.chunk_id = sem.chunk_id
  WHERE ft.chunk_id IS NOT NULL OR sem.sim >= %(floor)s)
"""


@dataclass(frozen=True)
class Ranking:
    """How the lexical side ranks and how hybrid search fuses the two sides.

    Attributes:
        lexical: ``"bm25"`` (code-aware terms, `knowledge.lexical`) or ``"ts_rank"``
            (PostgreSQL's English full-text search ranked by ``ts_rank_cd``, the
            ranking before BM25, kept for comparison).
        rrf_k: The reciprocal-rank-fusion constant: larger flattens the ranks.
        semantic_weight: Weight of the semantic side's reciprocal rank.
        lexical_weight: Weight of the lexical side's reciprocal rank.
        hybrid_min_similarity: Cosine floor a semantic-only hybrid candidate must reach.
        or_budget: Rows the lexical side scores at most, estimated (see `_BM25`).
        lexical_min_ratio: BM25 rows scoring below this share of the best row are
            not lexical candidates.
        short_chunk_chars: A hybrid chunk shorter than this many characters has its
            fused score multiplied by ``(length / short_chunk_chars) ** short_chunk_power``.
        short_chunk_power: The power of that length prior (0: no prior).
    """

    lexical: str = "bm25"
    rrf_k: float = RRF_K
    semantic_weight: float = 1.0
    lexical_weight: float = 0.6
    hybrid_min_similarity: float = DEFAULT_HYBRID_MIN_SIMILARITY
    or_budget: int = DEFAULT_OR_BUDGET
    lexical_min_ratio: float = 0.3
    short_chunk_chars: int = 300
    short_chunk_power: float = 0.1

    def __post_init__(self) -> None:
        if self.lexical not in LEXICAL_RANKINGS:
            raise ValueError(
                f"lexical must be one of {', '.join(LEXICAL_RANKINGS)}, got {self.lexical!r}"
            )
        for name in ("rrf_k", "semantic_weight", "lexical_weight"):
            value: Any = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value < 1e6
            ):
                raise ValueError(f"{name} must be a number in [0, 1e6), got {value!r}")
        ratio: Any = self.lexical_min_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise ValueError(f"lexical_min_ratio must be a number in [0, 1], got {ratio!r}")
        chars: Any = self.short_chunk_chars
        if not _is_int(chars) or chars < 1:
            raise ValueError(f"short_chunk_chars must be a positive int, got {chars!r}")
        power: Any = self.short_chunk_power
        if isinstance(power, bool) or not isinstance(power, int | float) or not 0 <= power <= 1:
            raise ValueError(f"short_chunk_power must be a number in [0, 1], got {power!r}")
        if not _is_int(self.or_budget) or self.or_budget < 1:
            raise ValueError(f"or_budget must be a positive int, got {self.or_budget!r}")


LEXICAL_RANKINGS = ("bm25", "ts_rank")


_NO_CONDITION = sql.SQL("")


def lexical_statement(
    req: SearchRequest, lexical_ranking: str, where: sql.Composable = _NO_CONDITION
) -> sql.Composable:
    """Return the lexical CTEs (ending in `fts`) for `req` under the chosen ranking.

    `where` is a further condition on `kb_chunks` rows (a metadata filter), starting with AND.
    """
    if lexical_ranking == "ts_rank":
        return sql.SQL(_FULLTEXT).format(where=where)
    candidates = _BM25_OPERATORS if lexical.has_operators(req.query) else _BM25_WORDS
    return sql.SQL(_BM25).format(candidates=sql.SQL(candidates), where=where)


def search_statement(
    req: SearchRequest,
    collections: ResolvedCollections,
    *,
    vector: Any,
    exact: bool,
    ranking: Ranking,
    rows_limit: int | None = None,
) -> Statement:
    """Return the one statement that runs a search.

    `rows_limit` returns more rows than `req.limit` with the same ranking, for
    entity fusion, which needs the ranking's tail. Hybrid keeps the pools of `req`,
    since its fused order depends on them. `or_budget` bounds the rows the
    lexical side ranks (see `_BM25` and `_FULLTEXT`).
    """
    pool = candidate_pool(req)
    if rows_limit is not None and req.mode != "hybrid":
        pool = max(pool, rows_limit)
    params: dict[str, Any] = {
        "ids": collections.ids,
        "pool": pool,
        "limit": req.limit if rows_limit is None else rows_limit,
        "threshold": req.threshold,
        "q": vector,
        "text": and_query(req.query),
        "or_text": or_query(req.query),
        "floor": ranking.hybrid_min_similarity,
        "or_budget": ranking.or_budget,
        "lex_keys": lexical.query_keys(req.query),
        "plain": not lexical.has_operators(req.query),
        "rrf_k": ranking.rrf_k,
        "w_sem": ranking.semantic_weight,
        "w_lex": ranking.lexical_weight,
        "lex_ratio": ranking.lexical_min_ratio,
        "prior_chars": ranking.short_chunk_chars,
        "prior_power": ranking.short_chunk_power,
    }
    join: sql.Composable = sql.SQL("")
    semantic_where: sql.Composable = sql.SQL("")
    lexical_where: sql.Composable = sql.SQL("")
    if req.filter:
        join = sql.SQL(_FILTER_JOIN)
        semantic_where = sql.SQL("AND ") + filter_sql(
            req.filter,
            sql.SQL("fc.metadata"),
            params,
            sql.SQL("kb_chunk_metadata(fc.id, fc.document_id, fc.metadata)"),
        )
        lexical_where = sql.SQL("AND ") + filter_sql(
            req.filter,
            sql.SQL("metadata"),
            params,
            sql.SQL("kb_chunk_metadata(id, document_id, metadata)"),
        )
    semantic = sql.SQL(_SEMANTIC if exact else _SEMANTIC_GRAPH).format(
        t=embeddings_table(collections.dimension),
        join=join,
        where=semantic_where,
    )
    if req.mode == "semantic":
        head = sql.SQL("WITH ranked AS (SELECT chunk_id, sim AS score FROM ({s}) s)").format(
            s=semantic
        )
    elif req.mode == "fulltext":
        head = sql.SQL("WITH {f}, ranked AS (SELECT chunk_id, rank AS score FROM fts)").format(
            f=lexical_statement(req, ranking.lexical, lexical_where)
        )
    else:
        head = sql.SQL(_HYBRID).format(
            semantic=semantic, fulltext=lexical_statement(req, ranking.lexical, lexical_where)
        )
    score = _LENGTH_PRIOR if req.mode == "hybrid" and ranking.short_chunk_power else "r.score"
    select = sql.SQL(_SELECT).format(score=sql.SQL(score), placed=PLACED_CHUNK_SQL)
    if req.section_chars is None:
        return sql.Composed([head, select]), params
    params["sections"] = req.limit
    tail = sql.SQL(_WHOLE_SELECT).format(select=select, section=_section_sql(req, params))
    return sql.Composed([head, tail]), params


def _section_sql(req: SearchRequest, params: dict[str, Any]) -> sql.Composable:
    """`_SECTION` for `req`: under its metadata filter too, so a filter still bounds what is read."""
    params["window"] = whole.SIBLING_WINDOW
    where: sql.Composable = sql.SQL("")
    if req.filter:
        where = sql.SQL("AND ") + filter_sql(
            req.filter,
            sql.SQL("c.metadata"),
            params,
            sql.SQL("kb_chunk_metadata(c.id, c.document_id, c.metadata)"),
        )
    return sql.SQL(_SECTION).format(
        pos=sql.SQL(PLACED_POSITION_SQL), start=sql.SQL(PLACED_START_SQL), where=where
    )


def sections_statement(req: SearchRequest, hit_ids: Sequence[str]) -> Statement:
    """Return the statement reading the sections of chunks a search found outside its text ranking."""
    params: dict[str, Any] = {"hit_ids": list(hit_ids)}
    query = sql.SQL(_SECTIONS_OF).format(section=_section_sql(req, params), placed=PLACED_CHUNK_SQL)
    return query, params


def sections_of(rows: Sequence[tuple[Any, ...]]) -> dict[tuple[str, str], whole.Section]:
    """The sections a whole-section search read, by `whole.section_key` (rows of `search_statement`)."""
    found = {}
    for r in rows:
        section = whole.section_of(r[7]) if len(r) > 7 else None
        if section is not None:
            found[whole.section_key({"id": r[0], "document_id": r[4], "metadata": r[6]})] = section
    return found


def to_chunks(rows: Sequence[tuple[Any, ...]]) -> list[Chunk]:
    """Map result rows to `Chunk` dicts (a whole-section row's section column is left out)."""
    return [
        Chunk(
            id=r[0],
            text=r[1],
            score=float(r[2]),
            collection=r[3],
            document_id=r[4],
            position=int(r[5]),
            metadata=dict(r[6] or {}),
        )
        for r in rows
    ]
