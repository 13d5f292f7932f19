"""Checkpoints store what each step adds: linear growth, and states rebuilt exactly."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.core.channels import fold_chunks, fold_messages
from arcana_loop.graph import run
from arcana_loop.graph.build import build_graph, make_deps
from bench.checkpoint_bench import TurnsModel, state_json_bytes, stored_bytes
from bench.loop_bench import instant_search


def _run(saver: InMemorySaver, turns: int):
    result = run(
        "Q?",
        controller_llm=TurnsModel(turns=turns),
        search_fn=instant_search,
        checkpointer=saver,
        max_iterations=turns + 1,
        chunk_cap=5 * turns,
    )
    compiled = build_graph(
        make_deps(controller_llm=TurnsModel(turns=turns), search_fn=instant_search)
    ).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": result.thread_id}}
    return result, compiled, config


def test_stored_bytes_stay_within_three_times_the_final_state_and_grow_linearly():
    saver = InMemorySaver()
    sizes = {}
    for turns in (10, 20):
        result, compiled, config = _run(saver, turns)
        final = state_json_bytes(dict(compiled.get_state(config).values))
        sizes[turns] = stored_bytes(saver, result.thread_id)
        assert sizes[turns] <= 3 * final, (turns, sizes[turns], final)
    # twice the turns, about twice the bytes (quadratic storage would give about four times)
    assert sizes[20] < 2.6 * sizes[10]


def test_rebuilt_state_equals_the_live_result_at_every_read():
    saver = InMemorySaver()
    result, compiled, config = _run(saver, 4)
    first, second = compiled.get_state(config).values, compiled.get_state(config).values
    assert [m.id for m in first["messages"]] == [m.id for m in second["messages"]]
    assert len({m.id for m in first["messages"]}) == len(first["messages"])
    assert first["tool_history"] == result.tool_history
    assert first["chunks"] == result.chunks
    # every intermediate checkpoint rebuilds to a prefix of the final conversation
    final_ids = [m.id for m in first["messages"]]
    for snapshot in compiled.get_state_history(config):
        ids = [m.id for m in snapshot.values.get("messages", [])]
        assert ids == final_ids[: len(ids)]


def test_fold_messages_is_batching_invariant_and_gives_stable_ids():
    writes = [
        [HumanMessage("q")],
        [AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "t1"}])],
        [ToolMessage("r", tool_call_id="t1")],
    ]
    one_by_one = fold_messages(
        fold_messages(fold_messages([], writes[:1]), writes[1:2]), writes[2:]
    )
    at_once = fold_messages([], writes)
    assert [m.id for m in one_by_one] == [m.id for m in at_once]
    assert all(m.id for m in at_once)
    assert writes[0][0].id is None  # the stored write is not mutated


def test_fold_chunks_merges_then_a_list_replaces():
    a = {"id": "a", "text": "A", "score": 0.5}
    b = {"id": "b", "text": "B", "score": 0.9}
    a_better = {"id": "a", "text": "A", "score": 0.95}
    merged = fold_chunks([], [{"merge": [a], "cap": 5}, {"merge": [b, a_better], "cap": 5}])
    assert [(c["id"], c["score"]) for c in merged] == [("a", 0.95), ("b", 0.9)]
    assert fold_chunks(merged, [{"merge": [b], "cap": 1}]) == [a_better]
    assert fold_chunks(merged, [[]]) == []


def test_fold_messages_matches_add_messages_for_appends_replacements_and_removals():
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import add_messages

    q = HumanMessage("q", id="m0")
    reply = AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "t1"}], id="m1")
    writes = [
        [q, reply],
        [ToolMessage("r", tool_call_id="t1", id="m2")],
        [AIMessage("edited", id="m1")],  # same id: replaces in place
        [RemoveMessage(id="m2")],
        [AIMessage("a", id="m3"), AIMessage("b", id="m3")],  # one id twice in one write
    ]
    expected: list = []
    for write in writes:
        expected = add_messages(expected, write)
        folded = fold_messages([], writes[: writes.index(write) + 1])
        assert [(m.id, m.content) for m in folded] == [(m.id, m.content) for m in expected]


def test_the_folds_never_change_the_value_they_are_given():
    current_chunks = [{"id": "a", "text": "A", "score": 0.5}]
    current_msgs = [HumanMessage("q", id="m0")]
    current_items = [1]
    fold_chunks(current_chunks, [{"merge": [{"id": "b", "text": "B", "score": 0.9}], "cap": 5}, []])
    fold_messages(current_msgs, [[AIMessage("a", id="m1")], [AIMessage("b", id="m0")]])
    from arcana_loop.core.channels import fold_appended

    fold_appended(current_items, [[2], 3])
    assert current_chunks == [{"id": "a", "text": "A", "score": 0.5}]
    assert [(m.id, m.content) for m in current_msgs] == [("m0", "q")]
    assert current_items == [1]
