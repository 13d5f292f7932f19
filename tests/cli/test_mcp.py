"""`arcana-loop mcp` driven by the MCP SDK's own client, over stdio and streamable HTTP.

The server runs as a desktop agent runs it (`arcana-loop mcp` as a child process) on the
test session's embedded PostgreSQL, its collections in the default schema; `ask` runs
the offline controller, or a real OpenAI client against the scripted server.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from arcana_loop.knowledge import KnowledgeBase

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"search", "ask", "list_collections", "list_documents", "read_document"}
GUIDE = """# Harbor operations

## Rolling back

Run `harbor rollback` with the release id; the previous image starts within a minute.

## Checking health

`harbor status` lists every service and its last health check.
"""
OTHER = "# Billing\n\nInvoices are sent on the first day of the month; harbor rollback never touches them.\n"


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment (the session's ARCANA_LOOP_PGDATA, or DATABASE_URL), for the server."""
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


@pytest.fixture
def collections(pg_url: str, tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """Two collections of the default schema: ops (a guide in two sections), billing (one note)."""
    ops, billing = f"ops-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "harbor.md").write_text(GUIDE)
    (tmp_path / "billing.md").write_text(OTHER)
    kb = KnowledgeBase(pg_url)
    kb.ingest(docs, collection=ops)
    kb.ingest(tmp_path / "billing.md", collection=billing)
    try:
        yield ops, billing, docs
    finally:
        for name in (ops, billing):
            kb.delete_collection(name)
        kb.close()


@contextlib.asynccontextmanager
async def connect(*args: str, errlog: Path, **env: str) -> AsyncIterator[ClientSession]:
    """A client session with `arcana-loop mcp ARGS` over stdio; the server's stderr in `errlog`."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "arcana_loop.cli.main", "mcp", *args],
        env=child_env(**env),
        cwd=str(REPO),
    )
    with errlog.open("w") as log:
        async with stdio_client(server, errlog=log) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result (failing the test on a tool error, with its message)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # a client that reads only text content gets the same JSON
    text = [block.text for block in result.content if block.type == "text"]
    assert [json.loads(t) for t in text] == [result.structured_content]
    return result.structured_content


async def tool_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a call that must be a tool error."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(block.text for block in result.content if block.type == "text")


async def test_every_tool_answers_json_over_stdio(collections, tmp_path: Path) -> None:
    ops, billing, docs = collections
    async with connect(errlog=tmp_path / "stderr.log") as session:
        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        assert all(tool.output_schema for tool in listed.tools)

        found = await call(
            session, "search", query="harbor rollback release kubernetes", collection=ops
        )
        assert found["unmatched"] == ["kubernetes"]  # a word no document of the scope holds
        top = found["chunks"][0]
        assert "harbor rollback" in top["text"] and top["collection"] == ops
        assert top["title"] == "Harbor operations" and top["source"] == "harbor.md"
        assert top["section"] == "Harbor operations > Rolling back" and top["pages"] is None
        assert isinstance(top["score"], float) and top["id"]

        names = {c["name"] for c in (await call(session, "list_collections"))["collections"]}
        assert {ops, billing} <= names
        documents = (await call(session, "list_documents", collection=ops))["documents"]
        assert [d["source"] for d in documents] == ["harbor.md"]

        read = await call(session, "read_document", source="harbor.md", collection=ops)
        assert read["total"] == len(read["chunks"]) >= 2 and read["start"] == 0
        assert [c["position"] for c in read["chunks"]] == list(range(read["total"]))
        assert top["id"] in [c["id"] for c in read["chunks"]]
        page = await call(session, "read_document", source="harbor.md", start=1, limit=1)
        assert page["chunks"] == read["chunks"][1:2] and page["total"] == read["total"]

        answered = await call(
            session, "ask", question="How do I roll back a release?", collection=ops
        )
        assert answered["terminated_by"] == "answered" and answered["answer_kind"] == "extracted"
        cited = [s["chunk_id"] for s in answered["sources"]]
        assert cited and all(f"[{c}]" in answered["answer"] for c in cited)
        assert answered["sources"][0]["source"].endswith("harbor.md")

        # a file is served relative to its collection's folder: nothing says where it lies
        served = json.dumps([found, documents, read, page, answered])
        assert str(docs) not in served and str(tmp_path) not in served
        assert read["document"]["source"] == "harbor.md"
        assert {c["source"] for c in read["chunks"]} == {"harbor.md"}

        assert "question must not be empty" in await tool_error(session, "ask", question="  ")
        assert "no collection named 'nope'" in await tool_error(
            session, "search", query="x", collection="nope"
        )
        huge = await tool_error(session, "search", query="x", collection="c" * 100_000)
        assert "no collection named 'ccc" in huge and "known collections: " in huge
        assert len(huge) <= 600  # the name is not echoed whole
        missing = await tool_error(session, "read_document", source="harbr.md", collection=ops)
        # the closest documents are named as served: nothing says where the server keeps them
        assert "no document" in missing and "'harbor.md'" in missing and str(docs) not in missing
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


async def test_a_locked_server_reads_only_its_collection(collections, tmp_path: Path) -> None:
    ops, billing, _ = collections
    async with connect("--collection", ops, errlog=tmp_path / "stderr.log") as session:
        # billing's note matches the words too: a locked search never returns it
        found = await call(session, "search", query="harbor rollback invoices", limit=10)
        assert found["chunks"] and {c["collection"] for c in found["chunks"]} == {ops}
        listed = (await call(session, "list_collections"))["collections"]
        assert [c["name"] for c in listed] == [ops]
        documents = (await call(session, "list_documents"))["documents"]
        assert {d["collection"] for d in documents} == {ops}

        for tool, arguments in [
            ("search", {"query": "invoices"}),
            ("ask", {"question": "When are invoices sent?"}),
            ("list_documents", {}),
            ("read_document", {"source": "billing.md"}),
        ]:
            message = await tool_error(session, tool, collection=billing, **arguments)
            assert f"reads only '{ops}'" in message and repr(billing) in message
        assert "no document" in await tool_error(session, "read_document", source="billing.md")


async def test_a_server_for_all_collections_is_not_locked_to_one_named_all(
    collections, tmp_path: Path
) -> None:
    ops, billing, _ = collections
    async with connect("--collection", "all", errlog=tmp_path / "stderr.log") as session:
        # it said "reads only 'all'", listed nothing and searched nothing, while ask read everything
        listed = {c["name"] for c in (await call(session, "list_collections"))["collections"]}
        assert {ops, billing} <= listed
        found = await call(session, "search", query="invoices", collection=billing)
        assert found["chunks"]


async def test_ask_runs_the_model_the_server_was_started_with(
    collections, openai_server, tmp_path: Path, pg_url: str
) -> None:
    ops, _, _ = collections
    hit = KnowledgeBase(pg_url).search("harbor rollback", collection=ops, limit=1)[0]["id"]
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "harbor rollback"}}]},
        {
            "tool_calls": [
                {"name": "answer", "arguments": {"text": f"Run harbor rollback [{hit}]."}}
            ]
        },
    )
    async with connect(
        "-c",
        ops,
        "--model",
        "openai:gpt-4o-mini",
        errlog=tmp_path / "stderr.log",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=openai_server.base_url,
    ) as session:
        answered = await call(session, "ask", question="How do I roll back?")
    assert answered == {
        "answer": f"Run harbor rollback [{hit}].",
        "terminated_by": "answered",
        "answer_kind": "written",
        "iterations": 2,
        "error": None,
        "sources": [
            {
                "chunk_id": hit,
                "title": "Harbor operations",
                "source": answered["sources"][0]["source"],
                "section": "Harbor operations > Rolling back",
                "pages": None,
                "collection": ops,
                "cited_text": answered["sources"][0]["cited_text"],
            }
        ],
    }
    assert "harbor rollback" in answered["sources"][0]["cited_text"]
    assert openai_server.requests[0]["model"] == "gpt-4o-mini"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_streamable_http_on_loopback(collections, tmp_path: Path) -> None:
    ops, _, _ = collections
    port = free_port()
    with (tmp_path / "stderr.log").open("w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "arcana_loop.cli.main",
                "mcp",
                "--http",
                "--port",
                str(port),
                "-c",
                ops,
            ],
            env=child_env(),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 120
        while True:  # until it listens
            assert server.poll() is None, (tmp_path / "stderr.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=1)
                break
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.2)
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await call(session, "list_collections")
        assert [c["name"] for c in listed["collections"]] == [ops]
        said = (tmp_path / "stderr.log").read_text()
        assert f"at {url}" in said and "no authentication" not in said  # loopback only
    finally:
        server.terminate()
        server.wait(timeout=30)


def _mcp_refused(collection: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arcana_loop.cli.main", "mcp", "-c", collection],
        env=child_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_server_for_a_collection_that_does_not_exist_does_not_start(pg_url: str) -> None:
    done = _mcp_refused("no-such-collection")
    assert done.returncode == 1 and done.stdout == ""
    assert "no collection named 'no-such-collection'" in done.stderr
    assert "Traceback" not in done.stderr
    blank = _mcp_refused("  ")
    # not "ingest ... --collection ''": no collection can have a blank name
    assert blank.returncode == 1 and "must not be empty or blank" in blank.stderr
