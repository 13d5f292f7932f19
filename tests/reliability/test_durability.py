"""A process killed mid-run loses nothing: the thread resumes from its last checkpoint; ingest is all or nothing."""

from __future__ import annotations

import signal
import textwrap
import uuid
from pathlib import Path

import psycopg
import pytest
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI

from arcana_loop.graph import resume, trace
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer
from tests.fixtures.openai_server import conversation_problem
from tests.fixtures.processes import child_env, kill_when

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


CHILD_LOOP = textwrap.dedent(
    """
    import sys, time, pathlib
    from arcana_loop.graph import run
    from tests.fakes import ScriptedChatModel, ScriptedSearch, search, chunk

    marker, spec, thread = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def third_turn(messages):
        marker.write_text("turn 3 under way")
        time.sleep(120)  # killed here

    model = ScriptedChatModel(responses=[search("alpha"), search("beta"), third_turn])
    found = ScriptedSearch({"alpha": [chunk("a1", "Alpha.")], "beta": [chunk("b1", "Beta.")]})
    run("Alpha and beta?", controller_llm=model, search_fn=found, checkpointer=spec, thread_id=thread, max_iterations=6)
    """
)


def _kill_at_turn_three(spec: str, thread: str, tmp_path: Path, env: dict[str, str]) -> None:
    marker = tmp_path / "marker"
    child = kill_when(
        marker.exists, CHILD_LOOP, str(marker), spec, thread, env=env, reaching="its third turn"
    )
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_killed_loop_resumes_from_its_last_checkpoint_with_no_step_lost_or_repeated(
    kind, tmp_path, request, monkeypatch
):
    env = child_env()
    if kind == "postgres":
        url = request.getfixturevalue("pg_url")
        env["DATABASE_URL"] = url
        monkeypatch.setenv("DATABASE_URL", url)
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}" if kind == "sqlite" else "postgres"
    thread = f"killed-{uuid.uuid4()}"
    _kill_at_turn_three(spec, thread, tmp_path, env)

    before = trace(thread, spec)
    assert [s.node for s in before] == ["start", "controller", "tools", "controller", "tools"]

    later_search = ScriptedSearch([])
    finished = resume(
        thread,
        checkpointer=spec,
        controller_llm=ScriptedChatModel(responses=[answer("Alpha, then beta.")]),
        search_fn=later_search,
    )
    assert finished.terminated_by == "answered" and finished.answer == "Alpha, then beta."
    assert [(e["tool"], e["args"].get("query")) for e in finished.tool_history] == [
        ("search", "alpha"),
        ("search", "beta"),
        ("answer", None),
    ]
    assert finished.iterations == 3 and [c["id"] for c in finished.chunks] == ["a1", "b1"]
    assert later_search.calls == []  # the searches the dead process made were not sent again
    assert [m.type for m in finished.messages] == [
        "human",
        *["ai", "tool"] * 3,
        "ai",
    ]  # no turn replayed, none dropped; the answer last
    after = trace(thread, spec)
    assert [s.node for s in after] == ["start", *["controller", "tools"] * 3, "finish"]
    assert [s.checkpoint_id for s in after[:5]] == [s.checkpoint_id for s in before]
    # resuming a finished thread changes nothing
    assert (
        resume(thread, checkpointer=spec, controller_llm=ScriptedChatModel(responses=[])).answer
        == finished.answer
    )


CHILD_CLIENT_LOOP = textwrap.dedent(
    """
    import sys
    from langchain_openai import ChatOpenAI
    from arcana_loop.graph import run
    from tests.fakes import ScriptedSearch, chunk

    base_url, spec, thread = sys.argv[1:4]
    model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-test", max_retries=0, timeout=300)
    found = ScriptedSearch({"alpha": [chunk("a1", "Alpha.")], "beta": [chunk("b1", "Beta.")]})
    run("Alpha and beta?", controller_llm=model, search_fn=found, checkpointer=spec, thread_id=thread, max_iterations=6)
    """
)


def _search_reply(query):
    return {"tool_calls": [{"name": "search", "arguments": {"query": query}}]}


def test_a_loop_killed_while_the_provider_hangs_resumes_through_the_client(openai_server, tmp_path):
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}"
    thread = f"hung-{uuid.uuid4()}"
    openai_server.enqueue(
        _search_reply("alpha"), _search_reply("beta"), {"sleep": 30, "then": "too late"}
    )
    kill_when(
        lambda: (
            len(openai_server.requests) >= 3
        ),  # the third turn's request is in, and its reply hangs
        CHILD_CLIENT_LOOP,
        openai_server.base_url,
        spec,
        thread,
        env=child_env(),
        reaching="its third turn",
    )
    assert [s.node for s in trace(thread, spec)] == [
        "start",
        "controller",
        "tools",
        "controller",
        "tools",
    ]

    openai_server.replies.clear()
    openai_server.enqueue(
        {"tool_calls": [{"name": "answer", "arguments": {"text": "Alpha, then beta."}}]}
    )
    model = ChatOpenAI(
        model="gpt-4o-mini", base_url=openai_server.base_url, api_key="sk-test", max_retries=0
    )
    finished = resume(thread, checkpointer=spec, controller_llm=model, search_fn=ScriptedSearch([]))
    assert (finished.terminated_by, finished.answer) == ("answered", "Alpha, then beta.")
    assert [(e["tool"], e["args"].get("query")) for e in finished.tool_history] == [
        ("search", "alpha"),
        ("search", "beta"),
        ("answer", None),
    ]
    resent = openai_server.requests[-1]["messages"]
    assert conversation_problem(resent) is None  # the resumed conversation is one OpenAI accepts
    assert [m["role"] for m in resent] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    ids = [m.tool_call_id for m in finished.messages if isinstance(m, ToolMessage)]
    assert len(ids) == len(set(ids)) == 3  # each call answered once: nothing replayed twice


CHILD_INGEST = textwrap.dedent(
    """
    import sys, pathlib
    from arcana_loop.knowledge import KnowledgeBase
    kb = KnowledgeBase(schema=sys.argv[2])
    folder = pathlib.Path(sys.argv[1])
    for index, path in enumerate(sorted(folder.glob("*.md"))):
        kb.ingest(path, collection="crash")
        if index == 3:
            (folder.parent / "started").write_text("ingesting")
    """
)


@pytest.mark.postgres
def test_an_ingest_killed_midway_leaves_only_whole_documents(kb, pg_url, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    paragraph = "Reliable storage keeps every chunk of a document or none of them. " * 40
    for i in range(300):
        (folder / f"doc{i:03}.md").write_text(
            f"# Document {i}\n\n" + "\n\n".join(f"Part {j}. {paragraph}" for j in range(6))
        )
    kill_when(
        (tmp_path / "started").exists,
        CHILD_INGEST,
        str(folder),
        kb.schema,
        env=child_env(DATABASE_URL=pg_url),
        reaching="its fourth document",
        then=0.3,
    )
    with psycopg.connect(pg_url, options=f"-c search_path={kb.schema},public") as conn:
        rows = conn.execute(
            "SELECT d.id, count(c.id), coalesce(max(c.position), -1) FROM kb_documents d LEFT JOIN kb_chunks c ON c.document_id = d.id GROUP BY d.id"
        ).fetchall()
    assert 4 <= len(rows) < 300, len(rows)
    counts = {n for _, n, _ in rows}
    assert all(
        n > 0 and top == n - 1 for _, n, top in rows
    )  # no document without its chunks, no gap
    assert len(counts) == 1  # every document the same size, so none was cut short
    # the ingest can simply be run again: what was stored is skipped, the rest is added
    again = kb.ingest(folder, collection="crash")
    assert again.documents_skipped == len(rows) and again.documents_added == 300 - len(rows)


CHILD_INGEST_STALLED = textwrap.dedent(
    """
    import sys, pathlib, time
    from arcana_loop.knowledge import KnowledgeBase
    from arcana_loop.knowledge.embeddings import WordLlamaEmbeddings

    marker = pathlib.Path(sys.argv[2])

    class Stalling(WordLlamaEmbeddings):
        def embed_array(self, texts):
            marker.write_text("embedding")
            time.sleep(120)  # killed here, before the first document is committed

    kb = KnowledgeBase(schema=sys.argv[1], embeddings=Stalling())
    kb.ingest("A document that never lands.", collection="never-landed")
    """
)


@pytest.mark.postgres
def test_an_ingest_killed_before_its_first_commit_leaves_no_collection_to_see(kb, pg_url, tmp_path):
    marker = tmp_path / "embedding"
    kill_when(
        marker.exists,
        CHILD_INGEST_STALLED,
        kb.schema,
        str(marker),
        env=child_env(DATABASE_URL=pg_url),
        reaching="its first embedding",
    )
    assert "never-landed" not in [c.name for c in kb.collections()]
    landed = kb.ingest("A document that lands.", collection="never-landed")
    assert landed.documents_added == 1
    assert [c.documents for c in kb.collections() if c.name == "never-landed"] == [1]
