"""Traces from checkpoint history, forks from any checkpoint, and recorded replays."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.graph import run
from arcana_loop.graph.replay import (
    NothingToReplay,
    Record,
    ReplayError,
    fork,
    record_of,
    replay,
    replay_record,
    verify_record,
)
from arcana_loop.graph.trace import ThreadNotFoundError, history, trace
from arcana_loop.knowledge.types import SearchResults
from arcana_loop.nodes.deps import LoopDeps
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, calls, chunk, search, tool_call


def _three_turns(checkpointer, **options):
    model = ScriptedChatModel(
        responses=[search("alpha"), search("beta"), answer("Alpha is first [c1].")]
    )
    found = ScriptedSearch(
        [
            [chunk("c1", "Alpha is first."), chunk("c9", score=0.2)],
            [chunk("c2", "Beta is second.", score=0.7)],
        ]
    )
    return run(
        "What is first?",
        controller_llm=model,
        search_fn=found,
        checkpointer=checkpointer,
        **options,
    )


@pytest.mark.parametrize("spec", ["memory", "sqlite"])
def test_trace_has_one_row_per_node_run_with_searches_and_the_ending(spec, tmp_path):
    checkpointer = "memory" if spec == "memory" else f"sqlite:{tmp_path / 't.db'}"
    result = _three_turns(checkpointer)
    rows = trace(result.thread_id, checkpointer)
    assert [r.node for r in rows] == ["start", *["controller", "tools"] * 3, "finish"]
    assert [r.step for r in rows] == list(range(1, 9))
    assert [r.iteration for r in rows] == [0, 0, 0, 1, 1, 2, 2, 2]
    assert rows[0].tool_calls == [] and rows[0].searches == []
    rows = rows[1:]  # the turns, after the question opened
    assert rows[0].tool_calls == [{"name": "search", "args": {"query": "alpha"}}]
    assert rows[1].searches == [
        {
            "query": "alpha",
            "collection": None,
            "returned_chunk_ids": ["c1", "c9"],
            "duplicate_of": None,
        }
    ]
    assert rows[3].searches[0]["returned_chunk_ids"] == ["c2"]
    # the tools step wrote the outcome; the finish step after it only closes the question
    assert rows[-2].terminated_by == "answered" and all(
        r.terminated_by is None for r in [*rows[:-2], rows[-1]]
    )
    assert all(r.seconds is not None and r.seconds >= 0 for r in rows)
    assert len({r.checkpoint_id for r in rows}) == len(rows)
    assert rows[1].to_dict()["searches"] == rows[1].searches


def test_trace_reports_tokens_when_the_model_does():
    reply = answer("done")
    reply.usage_metadata = {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15}
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[reply]),
        search_fn=ScriptedSearch([]),
        checkpointer="memory",
    )
    assert [r.tokens for r in trace(result.thread_id, "memory")] == [
        None,
        15,
        None,
        None,
    ]  # start, controller, tools, finish


def test_trace_of_an_unknown_thread_is_a_clear_error():
    with pytest.raises(ThreadNotFoundError, match="no checkpoints"):
        trace("no-such-thread", "memory")
    with pytest.raises(ValueError, match="checkpointer"):
        trace("t", None)


def test_fork_with_fewer_iterations_runs_synthesis_and_leaves_the_original_untouched():
    result = _three_turns("memory")
    before = [r.to_dict() for r in trace(result.thread_id, "memory")]
    after_first_search = trace(result.thread_id, "memory")[
        3
    ].checkpoint_id  # the second controller turn
    forked = fork(
        result.thread_id,
        checkpointer="memory",
        checkpoint_id=after_first_search,
        controller_llm=ScriptedChatModel(responses=[]),
        search_fn=ScriptedSearch([]),
        max_iterations=1,
        fallback_synthesis=False,
    )
    assert forked.thread_id != result.thread_id
    assert forked.terminated_by == "max_iterations"
    assert [e["returned_chunk_ids"] for e in forked.tool_history] == [["c1", "c9"]]
    assert [r.to_dict() for r in trace(result.thread_id, "memory")] == before


def test_fork_with_an_edited_search_query_searches_the_new_query():
    result = _three_turns("memory")
    rows = trace(result.thread_id, "memory")
    second_tools = rows[4]  # the tools step of the second turn, before it ran
    snapshot = next(
        s
        for s in history(result.thread_id, "memory")
        if s.config["configurable"]["checkpoint_id"] == second_tools.checkpoint_id
    )
    old = snapshot.values["messages"][-1]
    edited = AIMessage(
        content="", id=old.id, tool_calls=[{**old.tool_calls[0], "args": {"query": "gamma"}}]
    )
    seen = []
    forked = fork(
        result.thread_id,
        checkpointer="memory",
        checkpoint_id=second_tools.checkpoint_id,
        values={"messages": [edited]},
        controller_llm=ScriptedChatModel(responses=[answer("Gamma.")]),
        search_fn=lambda query, **kw: seen.append(query) or [chunk("g1", "Gamma.")],
    )
    assert seen == ["gamma"]
    assert [e["args"].get("query") for e in forked.tool_history if e["tool"] == "search"] == [
        "alpha",
        "gamma",
    ]
    assert forked.answer == "Gamma."


def test_replay_from_the_start_asks_the_question_again():
    result = _three_turns("memory")
    first = trace(result.thread_id, "memory")[0].checkpoint_id
    again = replay(
        result.thread_id,
        checkpointer="memory",
        checkpoint_id=first,
        controller_llm=ScriptedChatModel(responses=[answer("again")]),
        search_fn=ScriptedSearch([]),
    )
    assert again.answer == "again" and again.iterations == 1


def _where_a_question_opens(thread_id, checkpointer, question, where):
    """The checkpoint where a question of the thread opens: its input, or its ``start`` step."""
    if where == "start step":
        return next(
            r for r in trace(thread_id, checkpointer, question=question) if r.node == "start"
        )
    inputs = [s for s in history(thread_id, checkpointer) if s.next == ("__start__",)]
    return inputs[question].config["configurable"]["checkpoint_id"]


@pytest.mark.parametrize("where", ["start step", "input"])
@pytest.mark.parametrize("question", [0, 1])
def test_a_fork_where_a_question_opens_asks_that_question_after_the_ones_before(where, question):
    saver = InMemorySaver()
    first = _three_turns(saver, max_iterations=5)
    run(
        "And what is second?",
        controller_llm=ScriptedChatModel(responses=[search("beta"), answer("Beta [c2].")]),
        search_fn=ScriptedSearch([[chunk("c2", "Beta is second.", score=0.7)]]),
        checkpointer=saver,
        thread_id=first.thread_id,
        max_iterations=5,
    )
    opening = _where_a_question_opens(first.thread_id, saver, question, where)
    checkpoint_id = opening if isinstance(opening, str) else opening.checkpoint_id
    model = ScriptedChatModel(responses=[answer("Again.")])
    forked = fork(
        first.thread_id,
        checkpointer=saver,
        checkpoint_id=checkpoint_id,
        controller_llm=model,
        search_fn=ScriptedSearch([]),
    )
    asked = ["What is first?", "And what is second?"][: question + 1]
    assert (forked.question, forked.question_index) == (asked[-1], question)
    assert (forked.answer, forked.iterations, forked.tool_history[0]["tool"]) == (
        "Again.",
        1,
        "answer",
    )
    assert [m.text for m in forked.messages if m.type == "human"] == asked
    sent = [m.text for m in model.calls[0]["messages"] if m.type == "human"]
    assert sent == asked  # the model is asked the question after the conversation before it
    options = history(forked.thread_id, saver)[-1].values["options"]
    assert options["max_iterations"] == 5  # the thread's options, as it ran them


def test_fork_from_an_unknown_checkpoint_is_a_clear_error():
    result = _three_turns("memory")
    with pytest.raises(ReplayError, match="no checkpoint"):
        fork(result.thread_id, checkpointer="memory", checkpoint_id="nope")
    with pytest.raises(TypeError, match="unknown run option"):
        fork(result.thread_id, checkpointer="memory", max_iteration=2)


SCRIPTS = {
    "answered": dict(responses=[search("alpha"), search("beta"), answer("Alpha is first [c1].")]),
    "synthesis": dict(responses=[search("alpha"), search("beta")], options={"max_iterations": 2}),
    "answerer": dict(
        responses=[search("alpha"), answer("draft")], answerer="Rewritten: alpha is first."
    ),
    "controller error": dict(responses=[search("alpha"), RuntimeError("rate limited")]),
    "search error": dict(responses=[search("boom"), answer("none")]),
    "duplicate and parallel": dict(
        responses=[
            calls(tool_call("search", query="alpha"), tool_call("search", query="beta")),
            search("alpha"),
            answer("ok"),
        ]
    ),
    "grounded": dict(
        responses=[search("alpha"), answer("Alpha is first.")], options={"grounder": "local"}
    ),
    "words no document holds": dict(responses=[search("alpha pandas"), answer("none")]),
}


def _search(query, **kw):
    if query == "boom":
        raise ConnectionError("database went away")
    if query == "alpha pandas":  # the search says which words its scope never uses
        return SearchResults([chunk("c1", "Alpha is first.")], unmatched=["pandas"])
    return {
        "alpha": [chunk("c1", "Alpha is first."), chunk("c9", score=0.2)],
        "beta": [chunk("c2", "Beta is second.", score=0.7)],
    }[query]


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_a_recorded_replay_reproduces_the_run_exactly_without_model_or_database(case, tmp_path):
    script = SCRIPTS[case]
    kwargs = dict(script.get("options", {}))
    if "answerer" in script:
        kwargs["answer_llm"] = ScriptedChatModel(responses=[script["answerer"]])
    if case == "synthesis":
        kwargs["synthesizer"] = lambda messages, opts: "Synthesized: alpha [c1]."
    original = run(
        "What is first?",
        controller_llm=ScriptedChatModel(responses=script["responses"]),
        search_fn=_search,
        checkpointer="memory",
        **kwargs,
    )
    record = record_of(original.thread_id, "memory")
    saved = Record.load(record.save(tmp_path / "record.json"))
    assert verify_record(saved) == []
    replayed = replay_record(saved)
    assert (replayed.answer, replayed.terminated_by, replayed.tool_history, replayed.chunks) == (
        original.answer,
        original.terminated_by,
        original.tool_history,
        original.chunks,
    )
    if case == "grounded":
        assert replayed.grounding["score"] == original.grounding["score"]
    if case == "words no document holds":
        assert replayed.tool_history[0]["unmatched"] == ["pandas"]
        assert replayed.messages[2].content.endswith("No document searched contains: pandas.")


def test_a_question_that_ended_as_it_opened_has_no_record(monkeypatch):
    # nothing stored to search: the run gives up before any model call or search
    monkeypatch.setattr(LoopDeps, "unsearchable", lambda self, scope: "the knowledge base is empty")
    result = run("Q?", controller_llm=ScriptedChatModel(responses=[]), checkpointer="memory")
    assert result.terminated_by == "gave_up"
    # its own kind, so the command line can point to diff, which still compares it
    with pytest.raises(NothingToReplay, match="ended as it opened.*knowledge base is empty"):
        record_of(result.thread_id, "memory")


def test_a_tampered_record_is_reported_not_hidden(tmp_path):
    original = _three_turns("memory")
    record = record_of(original.thread_id, "memory")
    record.searches[0]["result"][0]["text"] = "Something else entirely."
    record.expected["chunks"] = original.chunks
    assert any(d.startswith("chunks:") for d in verify_record(record))
    record.searches.pop()  # the replay's second search finds nothing recorded: a search error, and a diverging history
    assert any(
        d.startswith("tool_history:") and "no (more) results" in d for d in verify_record(record)
    )


def test_a_file_that_is_not_a_record_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"question": 1, "unexpected": true}')
    with pytest.raises(ReplayError, match="not a replay record"):
        Record.load(bad)
    with pytest.raises(ReplayError, match="not a replay record"):
        Record.load(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("held", "said"),
    [
        ({"a": 1}, "it has no 'question', which every record holds"),
        ([1, 2], "it holds a JSON array, where a record is an object"),
        (None, "it holds a JSON null"),
        ({"question": "q", "collection": None, "options": {}, "zz": 1}, "no record has: 'zz'"),
    ],
)
def test_a_json_file_that_is_no_record_says_what_it_holds(tmp_path, held, said):
    # in plain words, not a Python constructor's complaint
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(held))
    with pytest.raises(ReplayError, match="not a replay record") as caught:
        Record.load(bad)
    assert said in str(caught.value) and "__init__" not in str(caught.value)


def test_a_diff_takes_record_files_as_paths_and_refuses_a_folder(tmp_path):
    from arcana_loop.graph.diff import diff_runs

    record = Record(question="q", collection=None, options={})
    path = record.save(tmp_path / "run.json")
    assert diff_runs(path, path).same
    with pytest.raises(ReplayError, match="is a folder"):
        diff_runs(str(tmp_path), path, checkpointer="memory")
    with pytest.raises(ReplayError, match="not a blank name"):
        diff_runs(" ", path, checkpointer="memory")
    missing = str(tmp_path / "gone.json")
    with pytest.raises(ReplayError, match="gone.json: no such record file"):
        diff_runs(missing, path, checkpointer="memory")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"controller_replies": [1]}, "controller_replies must be a list of objects"),
        ({"controller_replies": [{"content": "no type"}]}, "not a replay record"),
        ({"searches": {"query": "q"}}, "searches must be a list of objects"),
        ({"usage": [1]}, "usage must be an object"),
        ({"grounding": "supported"}, "grounding must be an object or null"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused_on_loading(tmp_path, fields, message):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"question": "q", "collection": None, "options": {}, **fields}))
    with pytest.raises(ReplayError, match=message):
        Record.load(bad)


@pytest.mark.parametrize("use_async", [False, True])
async def test_on_event_sees_each_tool_call_live_and_the_result_is_unchanged(use_async):
    from arcana_loop.graph import arun

    seen = []
    kwargs = dict(
        controller_llm=ScriptedChatModel(responses=[search("alpha"), answer("done")]),
        search_fn=_search,
        on_event=seen.append,
    )
    result = await arun("Q?", **kwargs) if use_async else run("Q?", **kwargs)
    assert [e["event"] for e in seen] == ["loop_start", "tool_call", "tool_call", "loop_stop"]
    assert seen[1]["args"] == {"query": "alpha"} and seen[1]["returned_chunk_ids"] == ["c1", "c9"]
    assert result.answer == "done" and len(result.tool_history) == 2
