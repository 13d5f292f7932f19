"""A built-in tool is one object listed in the registry: nothing else names it.

The test registers a tool the way a new module would (one more entry in
``tools.registry.TOOLS``) and runs the loop with a scripted controller that calls
it: the tool shows up in the schemas the controller is offered, in the system
prompt's tool list, in the tool history and in the trace, and its result is what
the controller reads next.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

import arcana_loop as al
from arcana_loop.tools import registry
from arcana_loop.tools.base import CallOutcome, LoopTool, Turn
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, calls, chunk, tool_call

CLOCK_LINE = "- `clock`: tell the time in a time zone; use it for questions about the time."


class ClockTool(LoopTool):
    """A dummy built-in tool: the time in a zone, always noon."""

    name = "clock"
    description = "Tell the time in a time zone."
    guidance = CLOCK_LINE

    def parameters(self, scope: Any) -> tuple[dict[str, Any], list[str]]:
        return {"zone": {"type": "string", "description": "An IANA time zone."}}, ["zone"]

    def plan(self, call_id: str, args: dict[str, Any], turn: Turn) -> CallOutcome:
        zone = args.get("zone")
        text = (
            f"It is 12:00 in {zone}."
            if isinstance(zone, str) and zone
            else "Tool error: clock needs a zone"
        )
        return CallOutcome(call_id, self.name, args, text, text)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ClockTool:
    tool = ClockTool()
    monkeypatch.setattr(registry, "TOOLS", (*registry.TOOLS, tool))
    return tool


def test_a_registered_builtin_tool_is_offered_described_run_recorded_and_traced(
    clock: ClockTool,
) -> None:
    model = ScriptedChatModel(
        responses=[
            calls(tool_call("clock", "t1", zone="UTC", format="24h")),
            answer("It is noon."),
        ]
    )
    saver = InMemorySaver()
    result = al.run(
        "What time is it in UTC?",
        controller_llm=model,
        search_fn=ScriptedSearch([[chunk("c1")]]),
        checkpointer=saver,
    )

    offered = [t["function"]["name"] for t in model.calls[0]["tools"]]
    assert offered == ["search", "answer", "give_up", "clock"]
    assert model.calls[0]["tools"][-1]["function"]["parameters"]["properties"] == {
        "zone": {"type": "string", "description": "An IANA time zone."}
    }
    system = model.calls[0]["messages"][0].content
    assert CLOCK_LINE in system.splitlines()

    assert result.terminated_by == "answered"
    entry = result.tool_history[0]
    assert entry["tool"] == "clock" and entry["summary"] == "It is 12:00 in UTC."
    assert entry["ignored_args"] == ["format"]  # the schema offers `zone` only
    read = [m for m in model.calls[1]["messages"] if isinstance(m, ToolMessage)]
    assert [(m.name, m.content) for m in read] == [("clock", "It is 12:00 in UTC.")]

    rows = al.trace(result.thread_id, saver)
    controller_calls = [c for row in rows if row.node == "controller" for c in row.tool_calls]
    assert controller_calls[0] == {"name": "clock", "args": {"zone": "UTC", "format": "24h"}}
    events = [e for row in rows if row.node == "tools" for e in row.events]
    assert events[0] == "clock: It is 12:00 in UTC."


def test_without_the_registry_entry_the_same_call_is_an_unknown_tool() -> None:
    model = ScriptedChatModel(
        responses=[calls(tool_call("clock", "t1", zone="UTC")), answer("It is noon.")]
    )
    result = al.run("What time is it?", controller_llm=model, search_fn=ScriptedSearch([]))
    assert [t["function"]["name"] for t in model.calls[0]["tools"]] == [
        "search",
        "answer",
        "give_up",
    ]
    assert result.tool_history[0]["summary"] == "Unknown tool: clock"
    assert isinstance(model.calls[1]["messages"][-2], AIMessage)
