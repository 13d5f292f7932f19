"""LangChain interop: `ingest` takes `Document`s and `as_retriever` is a LangChain retriever."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from arcana_loop.knowledge import IngestError, KnowledgeBase

pytestmark = pytest.mark.postgres

PAGES = [
    Document(
        page_content="# Setup\n\nThe glorpmeter needs a nine volt battery.",
        metadata={"source": "manual.pdf", "page": 1},
    ),
    Document(
        page_content="# Care\n\nClean the glorpmeter lens with a dry cloth.",
        metadata={"source": "manual.pdf", "page": 2},
    ),
    Document(page_content="Snarfblat tea is brewed for four minutes.", metadata={"author": "ann"}),
]


def test_ingest_takes_langchain_documents_named_by_their_source(kb: KnowledgeBase) -> None:
    result = kb.ingest(PAGES, collection="lc", metadata={"team": "docs"})
    assert (result.documents_added, result.documents_skipped) == (3, 0)
    hits = kb.search("glorpmeter", collection="lc", mode="fulltext")
    by_page = {h["metadata"]["page"]: h["metadata"] for h in hits}
    # pages of one source are stored apart, in order
    assert by_page[1]["source"] == "manual.pdf#1" and by_page[2]["source"] == "manual.pdf#2"
    assert by_page[2]["team"] == "docs" and by_page[2]["section"] == "Care"
    (tea,) = kb.search("snarfblat", collection="lc", mode="fulltext")
    assert tea["metadata"]["author"] == "ann" and tea["metadata"]["source"].startswith("text:")
    again = kb.ingest(PAGES, collection="lc", metadata={"team": "docs"})
    assert (again.documents_added, again.documents_skipped) == (0, 3)
    single = kb.ingest(
        Document(page_content="Zibble is a board game.", metadata={"source": "games.txt"}),
        collection="lc",
    )
    assert single.documents_added == 1
    assert (
        kb.search("zibble", collection="lc", mode="fulltext")[0]["metadata"]["source"]
        == "games.txt"
    )


def test_bad_documents_are_refused_before_anything_is_written(kb: KnowledgeBase) -> None:
    with pytest.raises(IngestError, match="Document 1: cannot ingest empty text"):
        kb.ingest([PAGES[0], Document(page_content="   ")], collection="lc")
    with pytest.raises(ValueError, match="Document 0: .*'start_index' is reserved"):
        kb.ingest([Document(page_content="text", metadata={"start_index": 3})], collection="lc")
    with pytest.raises(ValueError, match="name= names a single document"):
        kb.ingest(PAGES, collection="lc", name="one")
    assert kb.collections() == []


async def test_as_retriever_returns_documents_sync_and_async(kb: KnowledgeBase) -> None:
    kb.ingest(PAGES, collection="lc")
    kb.ingest("Unrelated text about glorpmeter sales.", collection="other")
    retriever = kb.as_retriever(collection="lc", mode="fulltext", k=1)
    assert isinstance(retriever, BaseRetriever)
    (doc,) = retriever.invoke("battery")
    assert doc.page_content.endswith("The glorpmeter needs a nine volt battery.")
    meta = doc.metadata
    assert (
        meta["source"] == "manual.pdf#1"
        and meta["section"] == "Setup"
        and meta["collection"] == "lc"
    )
    assert (
        doc.id == meta["id"] and len(meta["id"]) == 32 and meta["score"] > 0 and meta["page"] == 1
    )
    (adoc,) = await retriever.ainvoke("battery")
    assert adoc == doc
    wide = kb.as_retriever(mode="fulltext", k=10).invoke("glorpmeter")
    assert {d.metadata["collection"] for d in wide} == {"lc", "other"}
    assert {d.metadata["section"] for d in wide if d.metadata["collection"] == "other"} == {""}


def test_the_retriever_drops_into_a_langchain_chain(kb: KnowledgeBase) -> None:
    kb.ingest(PAGES, collection="lc")
    chain = kb.as_retriever(collection="lc", mode="hybrid", k=2) | RunnableLambda(
        lambda docs: sorted(d.metadata["source"] for d in docs)
    )
    assert chain.invoke("how do I clean the glorpmeter lens?") == ["manual.pdf#1", "manual.pdf#2"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "vector"}, ValueError, "invalid search mode 'vector'"),
        ({"k": 0}, ValueError, "k must be an int in 1..10000, got 0"),
        ({"k": True}, ValueError, "k must be an int"),
        ({"threshold": float("nan")}, ValueError, "threshold must be finite"),
        ({"threshold": "high"}, TypeError, "threshold must be a number"),
        ({"collection": [1]}, TypeError, "collection must be"),
    ],
)
def test_as_retriever_refuses_bad_options_where_it_is_built(
    kb: KnowledgeBase, kwargs: dict, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        kb.as_retriever(**kwargs)
