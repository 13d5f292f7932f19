"""MCP clients against `langgraph dev`: the brief answer tool returns the answer first, with its sources.

langgraph-api turns each assistant into an MCP tool and returns a run's output as the Python
repr of its values (no hook shapes it), so the brief graph's output (`AnswerOutput`) is what
an MCP client reads: a few hundred bytes instead of the full graph's state.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.langgraph_server import LangGraphServer
from tests.fixtures.postgres import temporary_collection

pytestmark = [pytest.mark.server, pytest.mark.postgres]

DOC = "vartok.spool_file winds a vartok spool from a file and returns its length in metres."
QUESTION = "How do I wind a vartok spool from a file?"


@pytest.fixture(scope="module")
def vartok(pg_url: str) -> Iterator[str]:
    with temporary_collection(pg_url, "mcp-test", [(DOC, {"topic": "spool"})]) as name:
        yield name


def _rpc(server: LangGraphServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(
        f"{server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _call(server: LangGraphServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = _rpc(
        server,
        "tools/call",
        {"name": tool, "arguments": arguments, "context": {"controller_model": "offline"}},
    )
    result: dict[str, Any] = body["result"]
    return result


def test_the_answer_tool_returns_the_answer_first_with_its_sources(
    langgraph_server: LangGraphServer, vartok: str
) -> None:
    tools = {t["name"]: t for t in _rpc(langgraph_server, "tools/list", {})["result"]["tools"]}
    assert {"arcana-loop", "arcana-loop-answer"} <= set(tools)
    assert "sources" in tools["arcana-loop-answer"]["description"]

    brief = _call(
        langgraph_server, "arcana-loop-answer", {"question": QUESTION, "collection": vartok}
    )
    text = brief["content"][0]["text"]
    assert not brief.get("isError") and text.startswith("{'answer': ")
    value = ast.literal_eval(text)  # the server's repr of the output, which is plain data
    assert list(value)[:2] == ["answer", "terminated_by"]  # answer first
    assert set(value) <= {
        "answer",
        "terminated_by",
        "answer_kind",
        "error",
        "sources",
    }  # nothing bulky
    assert value["answer_kind"] == "extracted"  # passages quoted, no model wrote them
    assert "vartok.spool_file" in value["answer"] and value["terminated_by"] == "answered"
    cited = value["sources"][0]
    assert cited["chunk_id"] in value["answer"] and cited["collection"] == vartok
    assert "vartok.spool_file" in cited["cited_text"]

    full = _call(langgraph_server, "arcana-loop", {"question": QUESTION, "collection": vartok})
    assert len(text) * 4 < len(full["content"][0]["text"])  # the full state, messages and chunks


def test_an_unknown_collection_is_said_in_the_brief_result(
    langgraph_server: LangGraphServer,
) -> None:
    brief = _call(
        langgraph_server,
        "arcana-loop-answer",
        {"question": QUESTION, "collection": "no-such-thing"},
    )
    value = ast.literal_eval(brief["content"][0]["text"])
    assert value["terminated_by"] == "gave_up" and "no-such-thing" in value["answer"]
    assert value["sources"] == []


def test_an_error_reaches_mcp_clients_as_its_type_alone(langgraph_server: LangGraphServer) -> None:
    # The limit, reproduced: langgraph-api's tools/call sends a failed run's error type
    # (``__error__["error"]``), never its message, and has no hook to change that. The
    # same run through the SDK gets the message ("question must not be empty or blank").
    failed = _call(langgraph_server, "arcana-loop-answer", {"question": "  "})
    assert failed.get("isError") is True
    assert failed["content"] == [{"type": "text", "text": "ValueError"}]
