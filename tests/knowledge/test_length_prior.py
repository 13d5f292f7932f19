"""Hybrid search ranks a short chunk a little lower: the answer passes its short namesakes."""

from __future__ import annotations

import pytest

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.queries import Ranking

SHORT = "hashlib.sha256(string=b'') Returns a sha256 hash object."
LONG = (
    "hashlib.file_digest(fileobj, digest) Hash the contents of a file-like object and return "
    "a digest object. The file must be opened for reading in binary mode; it is read in "
    "blocks, so a file of any size is hashed without reading it into memory at once. The "
    "digest is a hash algorithm name such as sha256, a hash constructor, or a callable that "
    "returns a hash object."
)


@pytest.mark.postgres
def test_a_short_chunks_fused_score_is_scaled_by_its_length(kb: KnowledgeBase) -> None:
    kb.ingest(SHORT, collection="hash", name="sha256")
    kb.ingest(LONG, collection="hash", name="file_digest")
    query = "sha256 hash of a file"
    kb.ranking = Ranking(short_chunk_power=0)
    flat = {
        h["text"]: h["score"] for h in kb.search(query, collection="hash", whole_sections=False)
    }
    kb.ranking = Ranking()
    scaled = {
        h["text"]: h["score"] for h in kb.search(query, collection="hash", whole_sections=False)
    }
    assert len(LONG) > 300 > len(SHORT)
    assert scaled[LONG] == pytest.approx(flat[LONG])
    assert scaled[SHORT] == pytest.approx(flat[SHORT] * (len(SHORT) / 300) ** 0.1)


@pytest.mark.parametrize(
    "options",
    [
        {"short_chunk_chars": 0},
        {"short_chunk_chars": 1.5},
        {"short_chunk_power": 2},
        {"short_chunk_power": True},
    ],
)
def test_a_bad_length_prior_is_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="short_chunk"):
        Ranking(**options)  # type: ignore[arg-type]
