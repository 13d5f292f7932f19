"""The lexical side of search: code-aware terms and BM25 weights, stored as sparse vectors.

Each chunk is reduced to *terms* (see `terms`) and stored twice in `kb_chunks`:

* `lex`, a pgvector `sparsevec` holding the document half of BM25 for every
  term of the chunk: ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``, where
  ``avg_len`` is its collection's (`kb_collections.lex_avg_len`: the mean of its first
  ingest, kept, so every chunk of a collection is weighed alike, whichever call wrote it);
* `lex_keys`, the chunk's distinct term keys (GIN-indexed), which selects the
  candidates of a query and feeds the document frequencies.

A query becomes a sparse vector holding each of its terms' IDF, so the inner
product of the two (`<#>`, computed in C by pgvector) is the chunk's BM25 score.
Document frequencies live in `kb_lex_terms`, per collection (a search sums them over its
scope's collections), kept exact by statement-level
triggers on `kb_chunks` (see `knowledge.schema`), whatever path inserts or
deletes chunks; a batch that replaces documents (an edit) has them stand aside
and adds its net change itself, once (`writer._TermCounts`).

Terms are code-aware, because questions about code name things the way code
spells them and prose does not: ``asyncio.wait_for`` yields the dotted name, its
parts and their words (``asyncio``, ``wait_for``, ``wait``), ``CamelCase`` splits
into its words (in ASCII; a word of any script is a term whole), stop words are dropped and words are stemmed (Snowball English),
so ``timeouts`` meets ``timeout``. A term is stored as an integer key (BLAKE2b of
the term, modulo pgvector's 10**9 dimensions), since a sparse vector needs integer
indices; two terms sharing a key are one term to the ranking, which for a
million-term vocabulary happens to about one term in two thousand, and only adds
score.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

import snowballstemmer  # type: ignore[import-untyped]
from pgvector.utils import SparseVector  # type: ignore[import-untyped]  # pgvector ships no type hints

from arcana_loop.knowledge.names import composed

K1 = 1.2
B = 0.75
TERMS_REVISION = 2
"""The revision of `terms` (token pattern, splitting, stop words, stemmer) and `key`: raise it
whenever any of them changes what a text's terms or keys are."""
LEXICAL_VERSION = f"terms{TERMS_REVISION}-k1={K1}-b={B}"
"""What a collection's stored weights were computed with. A collection stored under another
version is weighed again from its chunks' text when the knowledge base is opened, so one
search never mixes two weightings."""
DIMENSIONS = 1_000_000_000
"""pgvector's largest sparse-vector dimension; keys are 0..DIMENSIONS-1 (the text form counts from 1)."""
MAX_TERMS = 16_000
"""pgvector's limit of non-zero elements per sparse vector; longer chunks keep their most frequent terms."""

_TOKEN = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*|\d+")
"""A word or a dotted name (letters of any script, digits, underscores), or a number."""
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_OPERATOR = re.compile(r'"[^"]*\w[^"]*"|(?:^|\s)-[^\W\d_]')

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    get gets got use used using want need needs like make makes way ways thing things also
    """.split()
)
"""English function words, plus the filler of how people phrase questions ("I want to use
something like..."); none of them tells two chunks apart. ``not`` and ``no`` are kept out
of the index too: BM25 has no notion of negation."""

_STEMMERS = threading.local()
"""A snowball stemmer per thread: one keeps its word and cursor in itself, and two threads
stemming with one (an ingest's writer threads) made it raise IndexError mid-word."""


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    stem: str = stemmer.stemWord(word)
    return stem


def _words(piece: str) -> list[str]:
    """The words of an identifier's piece: split at underscores, and at case changes when ASCII.

    A piece in another script is split at underscores only: `_CAMEL` knows ASCII cases,
    and would cut ``café`` to ``caf``.
    """
    if not piece.isascii():
        return [w.lower() for w in piece.split("_") if w]
    return [w.lower() for sub in piece.split("_") for w in _CAMEL.findall(sub)]


@lru_cache(maxsize=200_000)
def _expand(token: str) -> tuple[str, ...]:
    """The terms of one token: compound identifiers whole (lower-cased), then its stemmed words."""
    pieces = [p for p in token.split(".") if p]
    out: list[str] = []
    if len(pieces) > 1:
        out.append(token.lower())  # the dotted name as written: an exact match counts most
    for piece in pieces:
        words = _words(piece)
        if len(words) > 1:
            out.append(piece.lower())  # snake_case / CamelCase whole
        out.extend(_stem(w) for w in words if w not in STOP_WORDS and (len(w) > 1 or w.isdigit()))
    return tuple(out)


def terms(text: str) -> list[str]:
    """Return the terms of `text`, in order, repeats kept (term frequency counts them).

    Text beyond ASCII is read in Unicode NFC first, so an accent typed as its own mark
    (``cafe`` + U+0301) is the same word as the composed letter, and a word goes on
    through the marks that write its vowels (Hindi, Hebrew, Arabic, Thai).
    """
    return [term for token in _tokens(text) for term in _expand(token)]


def _tokens(text: str) -> list[str]:
    if text.isascii():
        return _TOKEN.findall(text)
    return _wide_token().findall(composed(text))


@lru_cache(maxsize=1)
def _wide_token() -> re.Pattern[str]:
    r"""`_TOKEN` with the combining marks inside words, which Python's ``\w`` leaves out.

    ``हिन्दी`` is letters and vowel signs: with ``\w`` alone it fell into one-letter
    pieces, and one-letter words are no terms. Made on the first text beyond ASCII (the
    marks of the Basic Multilingual Plane, 20 ms).
    """
    marks = "".join(
        re.escape(chr(c))
        for c in range(0x300, 0x10000)
        if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")
    )
    word = rf"[^\W\d][\w{marks}]*"
    return re.compile(rf"{word}(?:\.{word})*|\d+")


def word_terms(text: str) -> dict[str, str]:
    """Return each word of `text` (a dotted name's parts apart, lower-cased) with the one term it is indexed under whole.

    A single word is indexed as its stem, a ``snake_case`` or ``CamelCase`` word whole
    (``read_csv``, ``taskgroup``); stop words and one-letter words have no such term.
    `unmatched_words` asks whether the scope holds each of these terms.
    """
    out: dict[str, str] = {}
    for token in _tokens(text):
        for piece in (p for p in token.split(".") if p):
            # the piece's first term is the one it is indexed under whole (`_expand` says how)
            if indexed := _expand(piece):
                out.setdefault(piece.lower(), indexed[0])
    return out


def unmatched_words(text: str, present_keys: Iterable[int]) -> tuple[str, ...]:
    """Return the words of `text` whose term (`word_terms`) is none of `present_keys`, in order."""
    present = set(present_keys)
    return tuple(word for word, term in word_terms(text).items() if key(term) not in present)


@lru_cache(maxsize=500_000)
def key(term: str) -> int:
    """Return the sparse-vector index of `term` (0-based, as `SparseVector` takes it; stable across processes)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % DIMENSIONS


def has_operators(query: str) -> bool:
    """Whether `query` uses full-text operators (a ``"quoted phrase"`` or a ``-word`` exclusion).

    Such a query means exactly what it says: its matches are filtered by the
    operators, and it never falls back to matching any of its words.
    """
    return bool(_OPERATOR.search(query))


def document_vector(text_terms: Sequence[str], avg_len: float) -> dict[int, float]:
    """Return the BM25 document weights of one chunk's terms, by key."""
    counts = Counter(key(t) for t in text_terms)
    if len(counts) > MAX_TERMS:
        counts = Counter(dict(counts.most_common(MAX_TERMS)))
    length = len(text_terms)
    norm = K1 * (1 - B + B * length / max(avg_len, 1.0))
    return {k: tf * (K1 + 1) / (tf + norm) for k, tf in counts.items()}


def sparse_vector(weights: dict[int, float]) -> SparseVector:
    """Return `weights` (keys from `key`) as the pgvector value a chunk's ``lex`` column holds."""
    return SparseVector(weights, DIMENSIONS)


def query_keys(query: str) -> list[int]:
    """Return the distinct keys of a query's terms, in order of first appearance."""
    return list(dict.fromkeys(key(t) for t in terms(query)))


def average_length(term_lists: Iterable[Sequence[str]]) -> float:
    """The mean number of terms per chunk (at least 1)."""
    lengths = [len(t) for t in term_lists]
    return max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0
