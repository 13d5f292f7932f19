"""What a LangSmith trace of a run shows: one retriever run per search, no router runs;
and what the served graph shows its clients: the answer first, and a description."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import pytest
from langchain_core.tracers.context import register_configure_hook
from langchain_core.tracers.run_collector import RunCollectorCallbackHandler
from langchain_core.tracers.schemas import Run

from arcana_loop.core.context import LoopContext
from arcana_loop.core.state import AnswerOutput, LoopOutput
from arcana_loop.graph import arun, build_graph, make_deps, run
from arcana_loop.graph.build import GRAPH_DESCRIPTION, GRAPH_NAME
from arcana_loop.graph.build import graph as served_graph
from tests.fakes import ScriptedSearch, answer, calls, chunk, scripted, search, tool_call

REPO_ROOT = Path(__file__).resolve().parents[2]
ROUTERS = {"after_controller", "after_tools", "after_answer", "after_ground"}

# LangSmith's tracer joins every run through an inheritable configure hook when tracing is
# on; this collector joins the same way, so run() and arun() are traced as LangSmith sees them
_collector: ContextVar[RunCollectorCallbackHandler | None] = ContextVar(
    "arcana_loop_test_collector", default=None
)
register_configure_hook(_collector, inheritable=True)


@contextmanager
def collect_runs() -> Iterator[RunCollectorCallbackHandler]:
    handler = RunCollectorCallbackHandler()
    token = _collector.set(handler)
    try:
        yield handler
    finally:
        _collector.reset(token)


def walk(runs: list[Run]) -> list[Run]:
    out: list[Run] = []
    for traced in runs:
        out.append(traced)
        out.extend(walk(traced.child_runs))
    return out


def searches_and_parents(runs: list[Run]) -> list[tuple[Run, Run]]:
    pairs = []
    for parent in walk(runs):
        pairs.extend(
            (child, parent) for child in parent.child_runs if child.run_type == "retriever"
        )
    return pairs


def _turns():
    turn = calls(tool_call("search", query="timeouts"), tool_call("search", query="cancel"))
    return scripted(turn, search("timeouts"), answer("x"))  # the third search repeats the first


RESULTS = {
    "timeouts": [chunk("c1", "wait_for takes a timeout", 0.9, collection="docs")],
    "cancel": [chunk("c2", "cancel() cancels a task", 0.7, metadata={"source": "pydoc:asyncio"})],
}


def test_each_search_is_a_retriever_run_under_the_tools_run():
    with collect_runs() as collected:
        result = run(
            "Q?",
            controller_llm=_turns(),
            search_fn=ScriptedSearch(RESULTS),
            collection=["docs", "wiki"],
        )
    assert result.terminated_by == "answered"
    pairs = searches_and_parents(collected.traced_runs)
    assert len(pairs) == 2  # the repeated search was not sent again, so it is no run
    assert {parent.name for _, parent in pairs} == {"tools"}
    by_query = {retriever.inputs["query"]: retriever for retriever, _ in pairs}
    assert set(by_query) == {"timeouts", "cancel"}
    first = by_query["timeouts"]
    assert first.name == "search" and first.error is None
    assert (
        first.extra["metadata"]["collection"] == ["docs", "wiki"]
        and first.extra["metadata"]["limit"] == 5
    )
    [document] = first.outputs["documents"]
    assert document.page_content == "wait_for takes a timeout" and document.id == "c1"
    assert document.metadata == {"score": 0.9, "collection": "docs"}


def test_a_failing_search_is_a_retriever_run_with_its_error():
    def broken(query, **kwargs):
        raise ConnectionError("database down")

    with collect_runs() as collected:
        result = run("Q?", controller_llm=scripted(search("q"), answer("x")), search_fn=broken)
    assert result.tool_history[0]["summary"].startswith("search error: ConnectionError")
    [(retriever, _)] = searches_and_parents(collected.traced_runs)
    assert "database down" in (retriever.error or "")


def test_async_searches_are_retriever_runs_under_the_tools_run_too():
    async def asearch(query, **kwargs):
        return RESULTS[query]

    async def go():
        with collect_runs() as collected:
            await arun("Q?", controller_llm=_turns(), search_fn=asearch)
        return collected

    pairs = searches_and_parents(asyncio.run(go()).traced_runs)
    assert sorted(r.inputs["query"] for r, _ in pairs) == ["cancel", "timeouts"]
    assert {parent.name for _, parent in pairs} == {"tools"}
    assert all(r.outputs and len(r.outputs["documents"]) == 1 for r, _ in pairs)


def test_routers_are_no_runs_of_their_own():
    with collect_runs() as collected:
        result = run(
            "Q?",
            controller_llm=scripted(search("timeouts"), answer("x")),
            search_fn=ScriptedSearch(RESULTS),
        )
    assert result.terminated_by == "answered"  # every routing decision was still made
    names = {traced.name for traced in walk(collected.traced_runs)}
    assert names & ROUTERS == set()
    assert {"controller", "tools"} <= names


def test_the_served_output_puts_the_answer_first():
    properties = list(served_graph.get_output_jsonschema()["properties"])
    assert properties[:2] == ["answer", "terminated_by"]
    assert properties[-3:] == [
        "tool_history",
        "chunks",
        "messages",
    ]  # the conversation is the bulkiest
    model = scripted(search("timeouts"), answer("Use wait_for."))
    compiled = build_graph(
        make_deps(controller_llm=model, search_fn=ScriptedSearch(RESULTS))
    ).compile(name=GRAPH_NAME)
    output = compiled.invoke({"question": "Q?"}, context=LoopContext())
    assert next(iter(output)) == "answer" and output["answer"] == "Use wait_for."
    # plain JSON data, nothing a client would see as a Python repr only; the messages are LangChain
    # messages, which a server sends in their dict form
    json.dumps({k: v for k, v in output.items() if k != "messages"})


@pytest.mark.parametrize("brief", [False, True])
def test_the_served_output_holds_every_field_even_one_nothing_wrote(brief: bool):
    # a question that ends with no error, no grounding and no budget stop writes none of
    # them; a client still reads output["error"] (the full output and the brief one)
    model = scripted(search("timeouts"), answer("Use wait_for."))
    compiled = build_graph(
        make_deps(controller_llm=model, search_fn=ScriptedSearch(RESULTS)), brief=brief
    ).compile(name=GRAPH_NAME)
    output = compiled.invoke({"question": "Q?"}, context=LoopContext())
    schema = AnswerOutput if brief else LoopOutput
    assert list(output) == list(schema.__annotations__)
    assert output["error"] is None and output["answer"] == "Use wait_for."
    if not brief:
        assert output["grounding"] is None and output["budget_stop"] is None
        assert output["coverage"] is None and output["stale_evidence"] is None


def test_the_served_graph_has_a_description():
    config = json.loads((REPO_ROOT / "langgraph.json").read_text())
    entry = config["graphs"][GRAPH_NAME]
    assert entry["path"] == "./graph/build.py:graph"
    assert entry["description"] == GRAPH_DESCRIPTION
    assert "question" in GRAPH_DESCRIPTION and "answer" in GRAPH_DESCRIPTION
