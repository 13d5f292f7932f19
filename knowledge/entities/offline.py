"""The offline extractor: identifiers and capitalised terms by pattern, related by co-occurrence.

This is the "fast, NLP-based" way to build a knowledge graph: no model, deterministic,
thousands of chunks a second. It finds what technical text names explicitly:

* dotted code names (`asyncio.wait_for`, `os.path.join()`),
* function names written with a call (`gather()`, `wait_for(`),
* snake_case identifiers (`max_workers`),
* CamelCase class names (`TimeoutError`, `ThreadPoolExecutor`, `HTTPServer`),
* capitalised multi-word terms (`Transmission Control Protocol`), minus a
  leading sentence-start word such as "The".

Two entities in the same chunk are related (`co_occurs`) with strength
`min(count_a, count_b)`, so a pair named together often weighs more. An
entity's description is the sentence of its first mention (plus the next one
when that sentence is little more than the name, as under a docstring heading).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from arcana_loop.knowledge.entities.types import (
    ChunkText,
    ExtractedEntity,
    ExtractedRelationship,
    Extraction,
    normalize_name,
)

CO_OCCURS = "co_occurs"
MAX_PAIRED_ENTITIES = 30
"""Only the most mentioned entities of a chunk are paired: pairs grow quadratically."""
MAX_DESCRIPTION_CHARS = 300

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"(?<![\w.]){_IDENT}(?:\.{_IDENT})+(?:\(\))?")
_CALL = re.compile(rf"(?<![\w.])(?:{_IDENT}\(\)|[A-Za-z0-9]*_[A-Za-z0-9_]*(?=\())")
_SNAKE = re.compile(r"(?<![\w.])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w(]|\.\w)")
_CAPITALISED = re.compile(r"(?<![\w.])[A-Z][A-Za-z0-9]+(?![\w(]|\.\w)")
_TERM = re.compile(
    r"(?<![\w.])[A-Z][a-z]+(?:[ \t]+(?:of[ \t]+|de[ \t]+|du[ \t]+)?[A-Z][a-z]+)+(?!\w|\.\w)"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")

_LEADING_STOPWORDS = frozenset(
    "a an and as at by for from if in into is it its note of on or see so such that the "
    "then these this those to use when where which while with you your".split()
)


@dataclass(frozen=True)
class _Match:
    start: int
    end: int
    name: str
    type: str


def _is_camel(word: str) -> bool:
    upper = sum(ch.isupper() for ch in word)
    return len(word) >= 4 and upper >= 2 and any(ch.islower() for ch in word)


def _dotted_type(name: str) -> str:
    if name.endswith("()"):
        return "function"
    last = name.rsplit(".", 1)[-1]
    return "class" if last[:1].isupper() else "code"


def _term(match: re.Match[str]) -> _Match | None:
    words = match.group(0).split()
    start = match.start()
    while words and words[0].lower() in _LEADING_STOPWORDS:
        start = match.string.index(words[1], start + len(words[0])) if len(words) > 1 else start
        words = words[1:]
    if len(words) < 2:
        return None
    return _Match(start, match.end(), " ".join(words), "term")


def _candidates(text: str) -> list[_Match]:
    """Every pattern's matches, in priority order: a later one never overlaps an earlier."""
    found: list[_Match] = []
    for m in _DOTTED.finditer(text):
        if max(len(part) for part in m.group(0).removesuffix("()").split(".")) > 2:
            found.append(_Match(m.start(), m.end(), m.group(0), _dotted_type(m.group(0))))
    found += [_Match(m.start(), m.end(), m.group(0), "function") for m in _CALL.finditer(text)]
    found += [
        _Match(m.start(), m.end(), m.group(0), "class")
        for m in _CAPITALISED.finditer(text)
        if _is_camel(m.group(0))
    ]
    found += [_Match(m.start(), m.end(), m.group(0), "identifier") for m in _SNAKE.finditer(text)]
    found += [t for m in _TERM.finditer(text) if (t := _term(m)) is not None]
    taken: list[_Match] = []
    for cand in found:
        if not any(cand.start < t.end and t.start < cand.end for t in taken):
            taken.append(cand)
    return sorted(taken, key=lambda m: m.start)


def _description(text: str, start: int, name: str) -> str:
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    index = max(i for i, b in enumerate(bounds[:-1]) if b <= start)
    sentence = text[bounds[index] : bounds[index + 1]].strip()
    if len(sentence) < len(name) + 20 and index + 2 < len(bounds):
        sentence = f"{sentence} {text[bounds[index + 1] : bounds[index + 2]].strip()}".strip()
    return sentence[:MAX_DESCRIPTION_CHARS]


def extract_chunk(chunk: ChunkText) -> Extraction:
    """Extract the entities of one chunk and relate those named together."""
    spans: dict[str, list[_Match]] = {}
    for match in _candidates(chunk.text):
        key = normalize_name(match.name)
        if len(key) >= 3:
            spans.setdefault(key, []).append(match)
    entities = []
    for matches in spans.values():
        first = matches[0]
        entities.append(
            ExtractedEntity(
                name=first.name.removesuffix("()"),
                type=first.type,
                description=_description(chunk.text, first.start, first.name),
                spans=tuple((m.start, m.end) for m in matches),
            )
        )
    ranked = sorted(entities, key=lambda e: (-len(e.spans), e.spans[0][0]))[:MAX_PAIRED_ENTITIES]
    relationships = [
        ExtractedRelationship(a.name, b.name, CO_OCCURS, "", float(min(len(a.spans), len(b.spans))))
        for i, a in enumerate(ranked)
        for b in ranked[i + 1 :]
    ]
    return Extraction(chunk.id, tuple(entities), tuple(relationships))


class OfflineExtractor:
    """The default extractor: patterns and co-occurrence, no model (see the module docstring)."""

    name = "offline"

    def extract(self, chunks: Sequence[ChunkText]) -> list[Extraction]:
        """Extract every chunk, in order."""
        return [extract_chunk(chunk) for chunk in chunks]
