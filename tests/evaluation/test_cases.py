import json

import pytest

from arcana_loop.evaluation.cases import (
    PYTHON_DOCS_EVAL,
    CaseSet,
    EvalCase,
    chunk_key,
    load_cases,
    save_cases,
)
from arcana_loop.evaluation.metrics import fact_found
from arcana_loop.knowledge.stdlib_docs import COLLECTION, stdlib_documents


def test_save_and_load_round_trip(tmp_path):
    cases = CaseSet(
        [EvalCase(id="a", question="Q?", key_facts=["x"], relevant_ids=["c1"])],
        name="n",
        collection="col",
        description="d",
    )
    path = save_cases(cases, tmp_path / "sub" / "cases.json")
    loaded = load_cases(path)
    assert loaded.name == "n" and loaded.collection == "col" and loaded.description == "d"
    assert loaded.cases == cases.cases
    assert loaded.cases[0].relevant == ("id", ["c1"])


def test_a_bare_list_is_accepted_and_ids_default(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"question": "Q?", "relevant_sources": ["s"]}]))
    loaded = load_cases(path)
    assert loaded.cases[0].id == "case-0" and loaded.cases[0].relevant == ("source", ["s"])
    assert loaded.name == "list"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ('{"name": "x"}', "expected a list of cases"),
        ("42", "expected a list of cases"),
        (
            '[{"id": "a", "question": "Q"}, {"id": "a", "question": "R"}]',
            r"duplicate case ids \['a'\]",
        ),
        ('[{"id": "a", "question": "Q", "answer": "x"}]', r"unknown field\(s\) \['answer'\]"),
        ('[{"id": "a", "question": "  "}]', "question must be a non-empty string"),
        ('[{"id": "a", "question": "Q", "expected": "maybe"}]', "expected must be one of"),
        ('[{"id": "a", "question": "Q", "key_facts": "x"}]', "key_facts must be a list"),
        ('[{"id": "a", "question": "Q", "evidence": [["p", ""]]}]', "evidence must be a list"),
        (
            '[{"id": "a", "question": "Q", "expected": "gave_up", "key_facts": ["x"]}]',
            "cannot have key facts",
        ),
        ('["just a string"]', "must be a JSON object"),
        ('[{"id": "", "question": "Q"}]', "case id must be a non-empty string"),
    ],
)
def test_invalid_case_files_fail_clearly(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_cases(path)


def test_an_evidence_entry_is_held_by_a_chunk_holding_any_of_its_alternatives():
    case = EvalCase(
        id="a", question="Q", evidence=["Pop and return the smallest", ["Alpha", "Beta"]]
    )
    assert case.relevant == ("evidence", ["evidence:0", "evidence:1"])
    assert chunk_key({"text": "... beta."}, "evidence", case) == "evidence:1"
    assert chunk_key({"text": "pop and return the smallest item"}, "evidence", case) == "evidence:0"
    assert chunk_key({"text": "Gamma"}, "evidence", case) == ""


def test_a_chunk_of_a_part_of_a_labelled_source_matches_it():
    case = EvalCase(id="a", question="Q", relevant_sources=["pydoc:asyncio", "manual.pdf#2"])
    key = chunk_key({"metadata": {"source": "pydoc:asyncio#run"}}, "source", case)
    assert key == "pydoc:asyncio"
    assert chunk_key({"metadata": {"source": "pydoc:asyncio.subprocess"}}, "source", case) == (
        "pydoc:asyncio.subprocess"
    )
    assert chunk_key({"metadata": {"source": "manual.pdf#2"}}, "source", case) == "manual.pdf#2"


def test_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_cases(tmp_path / "nope.json")


def test_the_shipped_python_docs_set_is_labelled_from_the_corpus_text():
    cases = load_cases(PYTHON_DOCS_EVAL)
    assert cases.collection == COLLECTION
    kinds = [c.kind for c in cases.cases]
    assert len(cases.cases) >= 60
    assert kinds.count("multi") >= 10 and 8 <= kinds.count("unanswerable") <= 12
    texts = {source: text for source, text, _ in stdlib_documents()}
    for case in cases.cases:
        if case.expected == "gave_up":
            assert not case.relevant_sources and not case.key_facts, case.id
            continue
        assert case.key_facts and case.relevant_sources, case.id
        assert all(s in texts for s in case.relevant_sources), case.id
        for fact in case.key_facts:
            assert any(fact_found(fact, texts[s]) for s in case.relevant_sources), (
                f"{case.id}: {fact!r} is not in {case.relevant_sources}"
            )
        if case.kind == "multi":
            assert len(case.relevant_sources) == 2, case.id
            for (
                source
            ) in case.relevant_sources:  # each labelled module holds at least one of the facts
                assert any(fact_found(f, texts[source]) for f in case.key_facts), (
                    f"{case.id}: nothing from {source}"
                )
