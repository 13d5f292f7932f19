"""The realistic evaluation set: its shape, and every label checked against the corpus."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from arcana_loop.evaluation.cases import PYTHON_DOCS_REALISTIC, alternatives, load_cases
from arcana_loop.evaluation.metrics import normalize_text
from arcana_loop.knowledge.stdlib_docs import stdlib_documents


@lru_cache(maxsize=1)
def _corpus() -> dict[str, str]:
    return {meta["module"]: text for _, text, meta in stdlib_documents()}


def test_the_set_is_large_varied_and_split_once():
    cases = load_cases(PYTHON_DOCS_REALISTIC).cases
    answerable = [c for c in cases if c.expected == "answered"]
    kinds = Counter(c.kind for c in cases)
    assert len(cases) >= 150
    assert kinds["multi"] >= 25 and kinds["unanswerable"] >= 25
    assert {"howto", "choice", "why"} <= set(kinds)
    assert sum(c.names_api for c in cases) <= len(cases) / 3
    assert len({m for c in answerable for m in c.modules}) >= 60
    splits = Counter(c.split for c in cases)
    assert set(splits) == {"tune", "test"} and abs(splits["tune"] - splits["test"]) <= len(kinds)
    for kind in kinds:  # stratified: each kind is in both halves
        assert {c.split for c in cases if c.kind == kind} == {"tune", "test"}


def test_every_evidence_passage_occurs_in_its_module():
    corpus = _corpus()
    for case in load_cases(PYTHON_DOCS_REALISTIC).cases:
        if case.expected == "gave_up":
            assert not case.evidence and not case.key_facts
            continue
        assert case.evidence and case.key_facts, case.id
        texts = [corpus[m] for m in case.modules if m in corpus]
        for entry in case.evidence:
            labelled, *others = alternatives(entry)
            assert any(labelled in text for text in texts), (case.id, labelled)
            for passage in others:  # a passage stating the same fact, in any module
                assert any(passage in text for text in corpus.values()), (case.id, passage)
        if case.kind == "multi":
            assert len(case.evidence) >= 2, case.id


def test_every_key_fact_can_be_met_from_the_corpus():
    corpus = f" {normalize_text(' '.join(_corpus().values()))} "
    for case in load_cases(PYTHON_DOCS_REALISTIC).cases:
        for fact in case.key_facts:
            alternatives = [fact] if isinstance(fact, str) else fact
            assert any(f" {normalize_text(a)} " in corpus for a in alternatives), (case.id, fact)
