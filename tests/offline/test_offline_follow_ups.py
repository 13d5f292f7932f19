"""The offline controller in a conversation: it answers the last question, and completes follow-ups."""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.graph import run
from arcana_loop.nodes.offline import is_follow_up, with_subject
from tests.fakes import chunk

TEXTS = {
    "wait": "asyncio.wait_for runs a coroutine with a timeout. When the timeout expires the task is cancelled and TimeoutError is raised.",
    "json": "json.loads parses a JSON document from a string. It raises JSONDecodeError when the document is not valid JSON.",
    "path": "pathlib.Path represents a filesystem path with methods such as exists and read_text.",
}


def memory_search(query, collection=None, limit=5, **_):
    words = {w.lower().strip("?.,") for w in query.split()}
    hits = [
        chunk(k, t, score=len(words & set(t.lower().replace(".", " ").split())) / len(words))
        for k, t in TEXTS.items()
    ]
    return sorted([h for h in hits if h["score"] > 0], key=lambda h: h["score"], reverse=True)[
        :limit
    ]


def conversation(search_fn, *questions):
    """The offline controller's results for `questions`, asked in turn on one thread."""
    saver, results = InMemorySaver(), []
    for question in questions:
        thread_id = results[0].thread_id if results else None
        results.append(
            run(
                question,
                controller_llm="offline",
                search_fn=search_fn,
                checkpointer=saver,
                thread_id=thread_id,
            )
        )
    return results


def test_a_follow_up_searches_with_the_earlier_subject_and_answers_it():
    first, second, third = conversation(
        memory_search,
        "How do I parse a JSON document from a string?",
        "What error does it raise?",
        "How do I run a coroutine with a timeout?",
    )
    assert "[json]" in first.answer
    query = second.tool_history[0]["args"]["query"]
    assert "JSON document" in query and "error" in query
    assert second.terminated_by == "answered" and "JSONDecodeError" in second.answer
    assert (
        third.tool_history[0]["args"]["query"] == "run a coroutine with a timeout"
    )  # a standalone question stays as asked
    assert (
        "[wait]" in third.answer and "[json]" not in third.answer
    )  # only this question's results are read


def test_follow_ups_are_told_from_standalone_questions():
    assert is_follow_up("what about its timeout?") and is_follow_up("And the exceptions?")
    assert not is_follow_up("How do I parse JSON?")
    assert (
        with_subject("what about its timeout?", "How do I run a coroutine?")
        == "run a coroutine its timeout?"
    )
    assert (
        with_subject("How do I parse JSON?", "How do I run a coroutine?") == "How do I parse JSON?"
    )


FROB = {
    "rollback": "To roll back a release, run frob rollback. The rollback keeps the database as it is.",
    "scale": "The Frobnicator scales horizontally: add more workers with frob scale.",
}


def frob_search(query, collection=None, limit=5, **_):
    words = {w.lower().strip("?.,") for w in query.split()}
    hits = [
        chunk(k, t, score=len(words & {w.strip(".:,") for w in t.lower().split()}) / len(words))
        for k, t in FROB.items()
    ]
    return sorted([h for h in hits if h["score"] > 0], key=lambda h: -h["score"])[:limit]


def test_a_follow_up_that_asks_something_new_is_answered_with_it_not_the_earlier_answer():
    first, second = conversation(
        frob_search, "How do I roll back a release?", "And how do I scale it?"
    )
    assert "[rollback]" in first.answer
    queries = [e["args"]["query"] for e in second.tool_history if e["tool"] == "search"]
    assert "scale" in queries  # the follow-up's own words, searched alone too
    assert "[scale]" in second.answer and "[rollback]" not in second.answer
