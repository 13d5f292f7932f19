"""Run diff: two runs of a question compared from their records, with no model and no database."""

from __future__ import annotations

import json

from langgraph.checkpoint.memory import InMemorySaver

import arcana_loop
from arcana_loop.graph import diff_runs, replay, run, trace
from arcana_loop.graph.replay import record_of
from arcana_loop.nodes.deps import LoopDeps
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search

SPOOL = chunk("s1", "The winding spool holds forty metres of copper wire.", score=0.9)
CRANE = chunk("c1", "The harbor crane lifts containers of twelve tonnes.", score=0.8)
CLOSED = chunk("c2", "The harbor office is closed on Sundays.", score=0.8)
ANSWER = "The winding spool holds forty metres of copper wire [s1]. The harbor crane lifts containers of twelve tonnes [c1]."


def _script(second_query="crane load"):
    return ScriptedChatModel(
        responses=[search("spool capacity"), search(second_query), answer(ANSWER)]
    )


def _first_run(saver):
    found = ScriptedSearch({"spool capacity": [SPOOL], "crane load": [CRANE]})
    return run(
        "What do the spool and the crane hold?",
        controller_llm=_script(),
        search_fn=found,
        grounder="local",
        checkpointer=saver,
    )


def test_a_replay_with_one_search_result_changed_names_it(tmp_path):
    saver = InMemorySaver()
    first = _first_run(saver)
    changed = ScriptedSearch({"spool capacity": [SPOOL], "crane load": [CLOSED]})
    start = trace(first.thread_id, saver)[0].checkpoint_id  # re-run from the question's start
    again = replay(
        first.thread_id,
        checkpointer=saver,
        checkpoint_id=start,
        controller_llm=_script(),
        search_fn=changed,
    )

    diff = diff_runs(first.thread_id, again.thread_id, checkpointer=saver)
    assert diff.first_difference is None  # the controller decided alike
    assert diff.searches_changed == [
        {"query": "crane load", "collection": None, "only_in_a": ["c1"], "only_in_b": ["c2"]}
    ]
    assert diff.searches_only_in_a == diff.searches_only_in_b == []
    assert (diff.chunks_only_in_a, diff.chunks_only_in_b) == (["c1"], ["c2"])
    [claim] = diff.claims
    assert "crane" in claim["text"] and claim["a"] == "supported" and claim["b"] != "supported"
    assert diff.answers == (ANSWER, ANSWER) and not diff.same
    assert all(isinstance(s, float) for s in diff.seconds)
    data = json.loads(json.dumps(diff.to_dict()))
    assert data["answers"] == {"a": ANSWER, "b": ANSWER} and data["same"] is False

    # a record file reads as its thread does
    path = record_of(first.thread_id, saver).save(tmp_path / "first.json")
    from_file = diff_runs(str(path), again.thread_id, checkpointer=saver)
    assert from_file.to_dict() | {"a": None} == diff.to_dict() | {"a": None}
    assert diff_runs(str(path), first.thread_id, checkpointer=saver).same
    assert arcana_loop.diff_runs is diff_runs


def test_the_first_differing_decision_and_the_searches_of_one_run_only():
    saver = InMemorySaver()
    first = _first_run(saver)
    other = run(
        "What do the spool and the crane hold?",
        controller_llm=_script("crane lifting limit"),
        search_fn=ScriptedSearch({"spool capacity": [SPOOL], "crane lifting limit": [CRANE]}),
        grounder="local",
        checkpointer=saver,
    )
    diff = diff_runs(first.thread_id, other.thread_id, checkpointer=saver)
    assert diff.first_difference == {
        "turn": 2,
        "a": [{"name": "search", "args": {"query": "crane load"}}],
        "b": [{"name": "search", "args": {"query": "crane lifting limit"}}],
    }
    assert diff.searches_only_in_a == [{"query": "crane load", "collection": None}]
    assert diff.searches_only_in_b == [{"query": "crane lifting limit", "collection": None}]
    assert diff.searches_changed == [] and diff.chunks_only_in_a == diff.chunks_only_in_b == []
    assert diff.claims == []


def test_a_question_that_ended_as_it_opened_diffs_as_a_run_of_no_turn(monkeypatch):
    # asked of an empty knowledge base, then again once its documents were in
    saver = InMemorySaver()
    with monkeypatch.context() as patched:
        patched.setattr(LoopDeps, "unsearchable", lambda self, scope: "the knowledge base is empty")
        empty = run(
            "What do the spool and the crane hold?", controller_llm=_script(), checkpointer=saver
        )
    assert empty.terminated_by == "gave_up"
    later = _first_run(saver)

    diff = diff_runs(empty.thread_id, later.thread_id, checkpointer=saver)
    assert diff.first_difference == {
        "turn": 1,
        "a": None,
        "b": [{"name": "search", "args": {"query": "spool capacity"}}],
    }
    assert diff.searches_only_in_a == [] and len(diff.searches_only_in_b) == 2
    assert diff.chunks_only_in_b == ["s1", "c1"] and diff.answers[1] == ANSWER
    assert "empty" in diff.answers[0] and not diff.same
