"""Checkpointed runs: thread ids, per-step history, and each saver spec."""

from __future__ import annotations

import pytest

from arcana_loop.core.context import LoopContext
from arcana_loop.graph import run
from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.graph.checkpoints import resolve_checkpointer
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search


def script():
    return ScriptedChatModel(responses=[search("a"), search("b"), answer("done")])


def found():
    return ScriptedSearch([[chunk("c1")], [chunk("c2")]])


@pytest.mark.parametrize("spec", ["memory", "sqlite"])
def test_checkpointed_run_gets_a_thread_and_a_per_step_history(spec, tmp_path):
    checkpointer = "memory" if spec == "memory" else f"sqlite:{tmp_path / 'threads.db'}"
    result = run("Q?", controller_llm=script(), search_fn=found(), checkpointer=checkpointer)
    assert result.thread_id and result.answer == "done"
    saver = resolve_checkpointer(checkpointer)
    compiled = build_graph(make_deps(controller_llm=script(), search_fn=found())).compile(
        checkpointer=saver
    )
    history = list(compiled.get_state_history({"configurable": {"thread_id": result.thread_id}}))
    steps = [h.next[0] for h in reversed(history) if h.next]
    assert steps == [
        "__start__",
        "start",
        "controller",
        "tools",
        "controller",
        "tools",
        "controller",
        "tools",
        "finish",
    ]
    assert history[0].values["terminated_by"] == "answered"


@pytest.mark.postgres
def test_postgres_checkpointer(pg_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_url)
    result = run(
        "Q?",
        controller_llm=script(),
        search_fn=found(),
        checkpointer="postgres",
        thread_id="pg-thread-1",
    )
    assert result.thread_id == "pg-thread-1"
    saver = resolve_checkpointer("postgres")
    state = saver.get_tuple({"configurable": {"thread_id": "pg-thread-1"}})
    assert state is not None and state.checkpoint["channel_values"]["answer"] == "done"


def test_replay_from_a_checkpoint_leaves_the_original_untouched():
    saver = resolve_checkpointer("memory")
    compiled = build_graph(make_deps(controller_llm=script(), search_fn=found())).compile(
        checkpointer=saver
    )
    config = {"configurable": {"thread_id": "replay-1"}}
    compiled.invoke({"question": "Q?"}, config, context=LoopContext())
    original_final = compiled.get_state(config).config
    history = list(compiled.get_state_history(config))
    before_answer = next(
        h
        for h in history
        if h.next == ("controller",) and len(h.values.get("tool_history", [])) == 2
    )
    fork = compiled.update_state(before_answer.config, {"chunks": []})
    replay_model = ScriptedChatModel(responses=[answer("replayed")])
    replayed = build_graph(make_deps(controller_llm=replay_model, search_fn=found())).compile(
        checkpointer=saver
    )
    out = replayed.invoke(None, fork, context=LoopContext())
    assert out["answer"] == "replayed"
    # A fork on the same thread becomes its head; the original run stays in its history.
    assert compiled.get_state(config).values["answer"] == "replayed"
    assert compiled.get_state(original_final).values["answer"] == "done"


def test_unknown_checkpointer_spec_is_rejected():
    with pytest.raises(ValueError, match="sqlite"):
        resolve_checkpointer("redis")


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_arun_opens_an_async_saver_for_a_spec(kind, tmp_path, request, monkeypatch):
    from arcana_loop.graph import arun, trace

    if kind == "postgres":
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("pg_url"))
    spec = f"sqlite:{tmp_path / 'a.sqlite'}" if kind == "sqlite" else "postgres"
    result = await arun("Q?", controller_llm=script(), search_fn=found(), checkpointer=spec)
    assert result.answer == "done" and result.thread_id
    assert [s.node for s in trace(result.thread_id, spec)] == [
        "start",
        *["controller", "tools"] * 3,
        "finish",
    ]  # the sync reader sees what arun wrote


async def test_arun_rejects_a_bad_spec_before_opening_anything():
    from arcana_loop.graph import arun

    with pytest.raises(ValueError, match="unknown checkpointer"):
        await arun("Q?", controller_llm=script(), search_fn=found(), checkpointer="redis")
    with pytest.raises(ValueError, match="durability must be one of"):
        await arun(
            "Q?",
            controller_llm=script(),
            search_fn=found(),
            checkpointer="memory",
            durability="later",
        )


def test_a_program_using_arun_with_sqlite_exits_when_it_is_done(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    program = (
        "import asyncio, sys\n"
        "from arcana_loop.graph import arun\n"
        "from tests.fakes import ScriptedChatModel, ScriptedSearch, answer\n"
        "r = asyncio.run(arun('Q?', controller_llm=ScriptedChatModel(responses=[answer('done')]), search_fn=ScriptedSearch([]), checkpointer='sqlite:' + sys.argv[1]))\n"
        "print(r.answer)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "t.sqlite")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
