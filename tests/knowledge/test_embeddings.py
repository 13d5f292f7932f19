"""Embedder specs: WordLlama by default, any LangChain provider through init_embeddings."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from langchain_openai import OpenAIEmbeddings

from arcana_loop.knowledge.embeddings import (
    WordLlamaEmbeddings,
    default_embeddings,
    embedding_model_name,
    resolve_embeddings,
)


def test_default_and_wordllama_specs_give_the_shipped_model():
    assert isinstance(resolve_embeddings(None), WordLlamaEmbeddings)
    assert resolve_embeddings("wordllama") is resolve_embeddings(None)


def test_a_provider_spec_goes_through_init_embeddings(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    embeddings = resolve_embeddings("openai:text-embedding-3-small")
    assert isinstance(embeddings, OpenAIEmbeddings)
    assert (
        embeddings.check_embedding_ctx_length is False
    )  # no tokenizer download before the first request
    assert embedding_model_name(embeddings) == "openai:text-embedding-3-small"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuch:model", "not supported"),
        ("huggingface:some/model", "not installed"),
        ("openai:", "unknown"),
        ("bare", "unknown"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        resolve_embeddings(spec)
    assert repr(spec) in str(info.value)


def test_loading_wordllama_leaves_logging_unconfigured():
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from arcana_loop.knowledge.embeddings import WordLlamaEmbeddings\n"
        "WordLlamaEmbeddings()\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), root.level)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["0", str(logging.WARNING)]


def test_a_few_texts_embed_as_the_model_embeds_each_alone():
    embeddings = default_embeddings()
    texts = ["Mooring lines are doubled in a gale.", "ünïcödé harbour ✓", "x" * 9000]
    few = embeddings.embed_array(texts)  # one by one
    model = embeddings._model
    alone = np.concatenate([model.embed([t[:8000]], norm=True) for t in texts])
    assert np.array_equal(few, alone)
    assert np.array_equal(embeddings.embed_documents(texts), few.tolist())
    # many texts go through the model's batches: the same vectors, to rounding
    many = embeddings.embed_array(texts * 30)
    assert np.allclose(many[:3], few, atol=1e-6)


@pytest.mark.parametrize("count", [2, 100])  # one by one, and through the model's batches
def test_a_text_of_no_token_embeds_as_a_zero_vector_not_nan(count):
    vectors = default_embeddings().embed_array(["", *(["A note about bread."] * (count - 1))])
    assert not np.isnan(vectors).any()
    assert not vectors[0].any() and np.isclose(np.linalg.norm(vectors[1]), 1.0)
