"""What a served answer shows people: numbered citations, sources by their path in the folder ingested, and no machine path.

A chat client reads the closing message's text; an MCP client the brief output; Studio
and SDK callers the whole state. None of them is sent the server's absolute file paths,
and none reads a chunk id where it reads the answer (the ids stay in the data).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from arcana_loop.core.sources import EXTRACTED_NOTE
from arcana_loop.knowledge import KnowledgeBase
from tests.fixtures.langgraph_server import LangGraphServer

pytestmark = [pytest.mark.server, pytest.mark.postgres]

QUESTION = "How do I wind a vartok spool from a file?"


@pytest.fixture(scope="module")
def ingested(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A folder of Markdown files ingested into a collection of the served knowledge base.

    Both files are about spools, so a search returns both, and a path is shown relative
    to the folder holding them (`core.sources.relative_sources`).
    """
    root = tmp_path_factory.mktemp("served-docs")
    (root / "guides").mkdir()
    (root / "guides" / "spools.md").write_text(
        "# Spools\n\n## Winding\n\nvartok.spool_file winds a vartok spool from a file and "
        "returns its length in metres.\n"
    )
    (root / "ops.md").write_text(
        "# Ops\n\nThe ops team winds vartok spools from the files kept in the store.\n"
    )
    kb = KnowledgeBase(pg_url)
    name = "served-citations"
    try:
        kb.ingest(root, collection=name)
        yield name, root
    finally:
        kb.delete_collection(name)
        kb.close()


def test_a_chat_client_reads_numbered_sources_and_no_machine_path(
    langgraph_server: LangGraphServer, ingested: tuple[str, Path]
) -> None:
    name, root = ingested
    client = langgraph_server.sync_client()
    thread_id = client.threads.create()["thread_id"]
    result: Any = client.runs.wait(
        thread_id,
        langgraph_server.graph_id,
        input={"messages": [{"type": "human", "content": QUESTION}], "collection": name},
        context={"controller_model": "offline"},
    )
    assert result["terminated_by"] == "answered", result
    assert result["answer_kind"] == "extracted"
    state = client.threads.get_state(thread_id)
    for served in (result, state):
        assert str(root) not in json.dumps(served)  # chunks, results, sources, messages
    closing = result["messages"][-1]
    text = "".join(b["text"] for b in closing["content"] if b.get("type") == "text")
    assert not re.search(r"[0-9a-f]{32}", text) and "[1]" in text
    assert "Sources:\n[1] guides/spools.md > Winding" in text
    assert EXTRACTED_NOTE in text
    (citation,) = {a["extras"]["chunk_id"] for a in closing["content"][0]["annotations"]}
    assert citation in result["answer"]  # the id stays in the data
    # the answer's evidence is served with its versions, read from the server's knowledge base
    pinned = {p["chunk_id"]: p for p in result["evidence"] if p["cited"]}
    assert citation in pinned and re.fullmatch(r"[0-9a-f]{64}", pinned[citation]["document_hash"])


def test_an_mcp_client_reads_the_brief_output_without_a_machine_path(
    langgraph_server: LangGraphServer, ingested: tuple[str, Path]
) -> None:
    name, root = ingested
    reply = httpx.post(
        f"{langgraph_server.url}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "arcana-loop-answer",
                "arguments": {"question": QUESTION, "collection": name},
                "context": {"controller_model": "offline"},
            },
        },
        headers={"Accept": "application/json, text/event-stream"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    text = reply.json()["result"]["content"][0]["text"]
    assert str(root) not in text
    value = ast.literal_eval(text)
    assert value["answer_kind"] == "extracted"
    assert [s["source"] for s in value["sources"]][:1] == ["guides/spools.md"]
