"""A tiny labelled corpus for the evaluation tests: four documents and cases over them."""

from __future__ import annotations

import pytest

from arcana_loop.evaluation.cases import CaseSet, EvalCase

COLLECTION = "eval-tiny"

DOCS = {
    "doc:asyncio": "asyncio.wait_for runs a coroutine with a timeout. When the timeout expires the task is cancelled and TimeoutError is raised.",
    "doc:json": "json.loads parses a JSON document from a string and returns Python objects such as dicts and lists.",
    "doc:heapq": "heapq.heappop pops the smallest item from the heap. The smallest item is always heap[0].",
    "doc:shutil": "shutil.rmtree recursively deletes a directory tree. shutil.copytree recursively copies a directory tree.",
}


def tiny_cases() -> CaseSet:
    return CaseSet(
        [
            EvalCase(
                id="timeout",
                question="How do I run a coroutine with a timeout?",
                key_facts=["wait_for"],
                relevant_sources=["doc:asyncio"],
            ),
            EvalCase(
                id="json",
                question="Which function parses a JSON document from a string?",
                key_facts=["json.loads"],
                relevant_sources=["doc:json"],
            ),
            EvalCase(
                id="rmtree",
                question="Which function recursively deletes a directory tree?",
                key_facts=["shutil.rmtree"],
                relevant_sources=["doc:shutil"],
                kind="single",
            ),
            EvalCase(
                id="none",
                question="What is the capital of Australia?",
                expected="gave_up",
                kind="unanswerable",
            ),
        ],
        name="tiny",
        collection=COLLECTION,
    )


def ingest_tiny(kb, collection: str = COLLECTION) -> None:
    for source, text in DOCS.items():
        kb.ingest(text, collection=collection, name=source)


@pytest.fixture
def tiny_kb(kb):
    ingest_tiny(kb)
    return kb
