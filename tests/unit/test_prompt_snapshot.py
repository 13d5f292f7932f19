"""What the controller is sent, held by a snapshot: the system prompts, the tool schemas, every message.

Each scenario runs the loop with a scripted controller that records every request; the
requests (and the tool history each run leaves) are compared with a committed snapshot.
A change to a prompt, a schema, a tool's description or the text of a tool result shows
here. To change them on purpose: run this file with ``SNAPSHOT_UPDATE=1``,
then review the diff of the snapshot.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool

from arcana_loop import DEFAULT_TOOLS
from arcana_loop.graph import run
from arcana_loop.knowledge import KnowledgeBase
from tests.fakes import calls, tool_call

SNAPSHOT = Path(__file__).parent / "snapshots" / "prompts.json"
_ELAPSED = re.compile(r"Elapsed: \d+\.\d s")


def _search(
    query: str, collection: Any = None, limit: int = 5, **opts: Any
) -> list[dict[str, Any]]:
    """Seven chunks per query; the first three are shared by every query (what show-once points back to)."""
    shared = [f"shared-{n}" for n in range(3)]
    own = [f"{query.split()[0]}-{n}" for n in range(4)]
    return [
        {
            "id": chunk_id,
            "text": f"Text of {chunk_id}: the <chunk> tag and a </chunk> inside it.",
            "score": 1.0 - rank / 10,
            "collection": collection if isinstance(collection, str) else "docs",
            "metadata": {"source": f"{chunk_id}.md", "section": "Usage > Timeouts"},
        }
        for rank, chunk_id in enumerate([*shared, *own])
    ][:limit]


def _message(message: BaseMessage) -> dict[str, Any]:
    shown: dict[str, Any] = {"type": message.type, "content": message.content}
    if isinstance(message, AIMessage) and message.tool_calls:
        shown["tool_calls"] = [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]
    if isinstance(message, ToolMessage):
        shown["name"] = message.name
        shown["artifact"] = message.artifact
    if isinstance(shown["content"], str):
        shown["content"] = _ELAPSED.sub("Elapsed: X s", shown["content"])
    return shown


def _recording(script: list[AIMessage | str]) -> tuple[Callable[..., Any], list[dict[str, Any]]]:
    requests: list[dict[str, Any]] = []
    replies = iter(script)

    def controller(messages: list[BaseMessage], tools: list[dict[str, Any]], opts: dict[str, Any]):
        requests.append(
            {
                "tools": tools,
                "offered": opts["tools"],
                "messages": [_message(m) for m in messages],
            }
        )
        reply = next(replies)
        return AIMessage(content=reply) if isinstance(reply, str) else reply

    return controller, requests


def web_search(query: str) -> str:
    """Search the web for a query.

    More lines the prompt leaves out.
    """
    return f"web results for {query}"


def broken() -> str:
    """A tool that fails."""
    raise RuntimeError("the service is down")


def _scenario(script: list[AIMessage | str], **options: Any) -> dict[str, Any]:
    controller, requests = _recording(script)
    options.setdefault("search_fn", _search)
    options.setdefault("require_search", "auto")
    result = run("How do I time out a coroutine?", controller_llm=controller, **options)
    return {
        "requests": requests,
        "terminated_by": result.terminated_by,
        "answer": result.answer,
        "tool_history": result.tool_history,
    }


def _call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return tool_call(name, call_id, **args)


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "all, show once, duplicates and bad calls": lambda: _scenario(
        [
            calls(_call("search", "s1", query="asyncio timeout")),
            calls(
                _call("search", "s2", query="Asyncio  TIMEOUT"),
                _call("search", "s3", query="cancel", limit=0),
                _call("search", "s4", query="cancel", collection="docs"),
                _call("lookup", "s5", key="x"),
                _call("answer", "s6", text=""),
            ),
            calls(_call("search", "s7", query="wait_for cancel", limit=3)),
            calls(
                _call("answer", "s8", text="Use asyncio.wait_for."),
                _call("give_up", "s9", reason="r"),
            ),
        ],
        max_tokens_total=100_000,
        max_seconds=600,
    ),
    "lock, plain answer sent back": lambda: _scenario(
        ["It is asyncio.wait_for.", "Still asyncio.wait_for."], collection="docs"
    ),
    "pick, answer call sent back, scope errors, give up": lambda: _scenario(
        [
            calls(_call("answer", "p1", text="From memory.")),
            calls(
                _call("search", "p2", query="timeout", collection="c"),
                _call("search", "p3", query="timeout", collection="a"),
            ),
            calls(_call("give_up", "p4", reason="nothing on timeouts")),
        ],
        collection=["a", "b"],
    ),
    "no give_up, a custom tool": lambda: _scenario(
        [
            calls(_call("web_search", "w1", query="asyncio timeout")),
            calls(_call("answer", "w2", text="Use asyncio.wait_for.")),
        ],
        tools=[DEFAULT_TOOLS[0], DEFAULT_TOOLS[1], StructuredTool.from_function(web_search)],
        budget_ledger=False,
    ),
    "only search": lambda: _scenario(
        ["Use asyncio.wait_for."],
        tools=[DEFAULT_TOOLS[0]],
        require_search="off",
    ),
    "custom tools added to the defaults": lambda: _scenario(
        [
            calls(_call("web_search", "c1", query="timeout"), _call("broken", "c2")),
            calls(_call("give_up", "c3", reason="none")),
        ],
        tools=[StructuredTool.from_function(web_search), StructuredTool.from_function(broken)],
    ),
    "empty scope": lambda: _scenario([], collection=[]),
    "the default tool objects": lambda: {
        "tools": [
            {"name": t.name, "description": t.description, "args": t.args_schema}
            for t in DEFAULT_TOOLS
        ]
    },
}


def _explore_scenario(kb: KnowledgeBase) -> dict[str, Any]:
    kb.ingest("AlphaNode works with BetaNode.", collection="docs", name="a")
    return _scenario(
        [
            calls(_call("explore", "e1", entity="AlphaNode")),
            calls(_call("explore", "e2")),
            calls(_call("answer", "e3", text="AlphaNode works with BetaNode.")),
        ],
        search_fn=kb.search,
        collection="docs",
        explore_tool=True,
        budget_ledger=False,
    )


def _check(name: str, value: dict[str, Any]) -> None:
    rendered = json.loads(json.dumps(value, default=str))
    stored = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}
    if os.environ.get("SNAPSHOT_UPDATE"):
        stored[name] = rendered
        SNAPSHOT.write_text(json.dumps(stored, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    assert rendered == stored[name]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_what_the_controller_is_sent_matches_the_snapshot(name: str) -> None:
    _check(name, SCENARIOS[name]())


@pytest.mark.postgres
def test_the_explore_tool_matches_the_snapshot(kb: KnowledgeBase) -> None:
    _check("explore", _explore_scenario(kb))
