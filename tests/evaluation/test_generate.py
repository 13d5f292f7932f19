import pytest

from arcana_loop.evaluation.generate import generate_cases, sample_chunks
from arcana_loop.evaluation.parse import ReplyParseError, parse_json_object
from tests.evaluation.conftest import COLLECTION, ingest_tiny
from tests.fakes import ScriptedChatModel

CHUNKS = [
    {
        "id": "c1",
        "text": "asyncio.wait_for runs a coroutine with a timeout and raises TimeoutError.",
        "metadata": {"source": "doc:asyncio"},
    },
    {"id": "c2", "text": "json.loads parses a JSON document.", "metadata": {"source": "doc:json"}},
    {
        "id": "c3",
        "text": "heapq.heappop pops the smallest item.",
        "metadata": {"source": "doc:heapq"},
    },
    {"id": "c4", "text": "shutil.rmtree deletes a tree.", "metadata": {}},
]


def test_parse_json_object_tolerates_prose_and_fences():
    assert parse_json_object(
        'Sure! ```json\n{"question": "Q?", "key_facts": ["a"]}\n``` hope it helps'
    ) == {"question": "Q?", "key_facts": ["a"]}
    assert parse_json_object('{broken {"score": 1}') == {"score": 1}
    with pytest.raises(ReplyParseError):
        parse_json_object("no json at all [1, 2]")
    with pytest.raises(ReplyParseError):
        parse_json_object(None)


def test_one_question_per_chunk_and_junk_replies_are_skipped():
    model = ScriptedChatModel(
        responses=[
            'Here you go:\n```json\n{"question": "What does asyncio.wait_for raise on timeout?", "key_facts": ["TimeoutError", "a made-up fact"]}\n```',
            "I cannot write a question for this passage.",
            '{"question": "   ", "key_facts": []}',
            '{"question": "What does shutil.rmtree delete?", "key_facts": "tree"}',
        ]
    )
    generated = generate_cases(CHUNKS, model, collection="docs")
    assert [c.question for c in generated.cases.cases] == [
        "What does asyncio.wait_for raise on timeout?"
    ]
    case = generated.cases.cases[0]
    assert (
        case.relevant_ids == ["c1"]
        and case.relevant_sources == ["doc:asyncio"]
        and case.kind == "generated"
    )
    assert case.key_facts == ["TimeoutError"]  # the fact that is not in the chunk is dropped
    assert [s["chunk_id"] for s in generated.skipped] == ["c2", "c3", "c4"]
    assert "no JSON object" in generated.skipped[0]["reason"]
    assert "non-empty 'question'" in generated.skipped[1]["reason"]
    assert "not a list" in generated.skipped[2]["reason"]
    prompt = model.calls[0]["messages"][0].content
    assert (
        'collection "docs"' in prompt
        and "doc:asyncio" in prompt
        and "raises TimeoutError" in prompt
    )
    assert model.calls[0]["kwargs"].get("temperature") == 0.0


def test_a_failing_model_call_skips_the_chunk():
    model = ScriptedChatModel(
        responses=[
            RuntimeError("rate limited"),
            '{"question": "Q about json?", "key_facts": ["json.loads"]}',
        ]
    )
    generated = generate_cases(CHUNKS[:2], model, collection="docs")
    assert [c.relevant_ids for c in generated.cases.cases] == [["c2"]]
    assert generated.skipped == [{"chunk_id": "c1", "reason": "RuntimeError: rate limited"}]


def test_a_bad_model_spec_fails_before_any_call():
    with pytest.raises(ValueError, match="provider:model"):
        generate_cases(CHUNKS, "gpt4", collection="docs")


@pytest.mark.postgres
def test_sample_chunks_is_deterministic_per_seed(kb):
    ingest_tiny(kb)
    first = sample_chunks(kb, COLLECTION, 3, seed=1, min_chars=10)
    assert len(first) == 3 and first == sample_chunks(kb, COLLECTION, 3, seed=1, min_chars=10)
    assert all(c["metadata"]["source"].startswith("doc:") for c in first)
    every = sample_chunks(kb, COLLECTION, 10, seed=2, min_chars=10)
    assert {c["id"] for c in first} <= {c["id"] for c in every} and len(every) == 4
    assert sample_chunks(kb, COLLECTION, 10, min_chars=10_000) == []
    with pytest.raises(ValueError, match="no collection named 'nope'"):
        sample_chunks(kb, "nope", 3)
    with pytest.raises(ValueError, match="n must be at least 1"):
        sample_chunks(kb, COLLECTION, 0)
