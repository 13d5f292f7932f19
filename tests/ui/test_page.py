"""The page at /ui in a real browser, against a real `langgraph dev` and the session's PostgreSQL.

Headless Chromium (the system's) opens the page the test server serves; runs use the
offline controller (the server's default) or the scripted OpenAI-compatible server
(``controller_model=openai:gpt-4o-mini`` typed into the page's options). Each state the
page reaches is saved as a screenshot in ``tests/ui/screenshots/``.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from arcana_loop.knowledge import KnowledgeBase
from tests.fixtures.langgraph_server import LangGraphServer

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.postgres, pytest.mark.slow]

Shot = Callable[[Page, str], Path]
SCRIPTED_MODEL = "openai:gpt-4o-mini"
PDF_SENTENCE = "The container terminal handled 412,000 TEU in 2025."


@pytest.fixture
def server(langgraph_server: LangGraphServer) -> Iterator[LangGraphServer]:
    assert langgraph_server.openai is not None
    langgraph_server.openai.replies.clear()
    yield langgraph_server
    assert "BlockingError" not in langgraph_server.log(), "a route blocked the server's event loop"


def _open(page: Page, server: LangGraphServer, collection: str | None = None) -> None:
    page.goto(f"{server.url}/ui" + (f"?collection={collection}" if collection else ""))
    expect(page.locator("#server-status")).to_have_text("connected")


def _ask(page: Page, question: str, *, model: str | None = None, turns: int | None = None) -> None:
    if model or turns is not None:
        if not page.locator("#options").evaluate("details => details.open"):
            page.locator("#options summary").click()
        if model:
            page.fill("#model", model)
        if turns is not None:
            page.fill("#max-iterations", str(turns))
    page.fill("#question", question)
    page.click("#ask")


def _runs_done(page: Page, count: int) -> None:
    expect(page.locator("body")).to_have_attribute("data-runs", str(count), timeout=60_000)


def _chunk_id(pg_url: str, collection: str, query: str, holding: str) -> str:
    kb = KnowledgeBase(pg_url)
    try:
        hits = kb.search(query, collection=collection, limit=10)
    finally:
        kb.close()
    return next(str(h["id"]) for h in hits if holding in h["text"])


def test_the_answer_streams_and_a_citation_opens_its_passage_highlighted(
    page: Page, server: LangGraphServer, ui_docs: str, pg_url: str, shot: Shot
) -> None:
    assert server.openai is not None
    chunk_id = _chunk_id(pg_url, ui_docs, "container terminal TEU", "412,000")
    release = threading.Event()
    server.openai.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "container terminal capacity"}}]},
        # the last word waits for `release`: the run cannot end before the test sees the first ones
        {"hold": release, "then": f"{PDF_SENTENCE[:-1]} [{chunk_id}]."},
    )
    _open(page, server, ui_docs)
    _ask(page, "How much did the container terminal handle?", model=SCRIPTED_MODEL)
    try:
        streaming = page.locator(".answer.streaming")
        expect(streaming).to_contain_text("The container terminal handled")
        assert page.evaluate("window.arcanaTimings.length") == 0  # the run has not ended
        shot(page, "1-streaming")
    finally:
        release.set()
    _runs_done(page, 1)
    timing: Any = page.evaluate("window.arcanaTimings[0]")
    assert 0 < timing["first_token_ms"] < timing["end_ms"], timing

    answer = page.locator(".turn.current .answer")
    expect(answer).to_have_text(f"{PDF_SENTENCE[:-1]} [1].")  # the chunk id became a number
    page.locator(".turn.current .cite").first.click()
    expect(page.locator("#passage mark")).to_have_text(PDF_SENTENCE)
    expect(page.locator("#passage-meta dd.pages")).to_have_text("2")
    expect(page.locator("#passage-meta dd.path")).to_contain_text("capacity.pdf")
    expect(page.locator("#passage-meta dd.first-found-by")).to_have_text(
        'turn 1, search "container terminal capacity"'
    )
    expect(page.locator(".sources .source").first).to_contain_text("page 2")
    claim = page.locator("#claims .claim").first
    expect(claim.locator(".verdict")).to_have_text("supported")
    expect(claim).to_contain_text('Evidence first found by turn 1, search "container terminal')
    claim.locator(".cite").first.click()  # the claim's own passage, highlighted for it
    expect(page.locator("#passage-meta dd.backs")).to_have_text(PDF_SENTENCE)
    expect(page.locator("#passage mark")).to_have_text(PDF_SENTENCE)
    page.locator("#steps-section summary").click()
    # the PDF's three pages are three sections, each a result (its page read whole)
    expect(page.locator("#steps li").first).to_have_text(
        'Turn 1: search "container terminal capacity" → 3 chunks'
    )
    expect(page.locator("#steps-summary")).to_contain_text("1 search,")
    shot(page, "2-citation")


def test_an_answer_tool_call_streams_its_text_as_its_arguments_arrive(
    page: Page, server: LangGraphServer, ui_docs: str, pg_url: str, shot: Shot
) -> None:
    assert server.openai is not None
    chunk_id = _chunk_id(pg_url, ui_docs, "silos grain tonnes", "60,000")
    text = f"The silos store 60,000 tonnes \u2014 the port\u2019s grain [{chunk_id}].\nThat is all."
    release = threading.Event()
    server.openai.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "grain silos"}}]},
        # arguments arrive six characters at a time, JSON-escaped; the last piece waits
        {
            "hold": release,
            "then": {"tool_calls": [{"name": "answer", "arguments": {"text": text}}]},
        },
    )
    _open(page, server, ui_docs)
    _ask(page, "How much grain do the silos store?", model=SCRIPTED_MODEL)
    try:
        expect(page.locator(".answer.streaming")).to_contain_text(
            "The silos store 60,000 tonnes \u2014 the port\u2019s grain"
        )
        assert page.evaluate("window.arcanaTimings.length") == 0
    finally:
        release.set()
    _runs_done(page, 1)
    expect(page.locator(".turn.current .answer")).to_have_text(
        "The silos store 60,000 tonnes \u2014 the port\u2019s grain [1].\nThat is all."
    )


def test_a_follow_up_on_the_same_thread_then_a_new_thread_and_back(
    page: Page, server: LangGraphServer, ui_docs: str, shot: Shot
) -> None:
    _open(page, server, ui_docs)
    _ask(page, "How do I run a coroutine with a timeout?")
    _runs_done(page, 1)
    expect(page.locator(".turn.current .answer")).to_contain_text("wait_for")
    _ask(page, "What is raised when it expires?")
    _runs_done(page, 2)
    turns = page.locator("#conversation .turn")
    expect(turns).to_have_count(2)
    expect(turns.nth(0).locator(".question")).to_have_text(
        "How do I run a coroutine with a timeout?"
    )
    expect(turns.nth(1).locator(".answer")).to_contain_text("TimeoutError")
    thread = page.locator(".thread.current")
    expect(thread).to_have_text("How do I run a coroutine with a timeout?")
    shot(page, "3-follow-up")

    thread_id = thread.get_attribute("data-thread")
    page.click("#new-thread")
    expect(turns).to_have_count(0)
    page.locator(f'.thread[data-thread="{thread_id}"]').click()
    expect(turns).to_have_count(2)
    expect(
        turns.nth(1).locator(".cite").first
    ).to_be_visible()  # the last answer's evidence is back


def test_threads_the_page_did_not_open_are_told_apart(page: Page, server: LangGraphServer) -> None:
    made = []
    for _ in range(2):  # made by a client other than the page: no title in their metadata
        request = urllib.request.Request(
            f"{server.url}/threads",
            data=b"{}",
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            made.append(json.loads(response.read())["thread_id"])
    _open(page, server)
    titles = [page.locator(f'.thread[data-thread="{t}"]').inner_text() for t in made]
    assert titles[0] != titles[1], titles
    assert all(title.startswith("Thread ") for title in titles)


def test_an_unknown_collection_is_said_and_its_question_gives_up(
    page: Page, server: LangGraphServer, shot: Shot
) -> None:
    _open(page, server, "no-such-collection")
    expect(page.locator("#collection-note")).to_contain_text(
        'No collection named "no-such-collection"'
    )
    _ask(page, "How do I run a coroutine with a timeout?")
    _runs_done(page, 1)
    expect(page.locator(".turn.current .state")).to_have_text(
        "Gave up: the knowledge base did not answer this question."
    )
    expect(page.locator(".turn.current .answer")).to_contain_text("no-such-collection")
    shot(page, "4-gave-up")


def test_a_failed_run_and_a_spent_budget_are_shown_as_such(
    page: Page, server: LangGraphServer, ui_docs: str, shot: Shot
) -> None:
    assert server.openai is not None
    server.openai.enqueue({"status": 400, "body": "scripted refusal"})
    _open(page, server, ui_docs)
    _ask(page, "How much grain do the silos store?", model=SCRIPTED_MODEL)
    _runs_done(page, 1)
    expect(page.locator(".turn.current .state")).to_have_text("The run failed.")
    expect(page.locator(".turn.current .answer")).to_contain_text("scripted refusal")
    shot(page, "5-failed")

    page.click("#new-thread")
    _ask(page, "How much grain do the silos store?", model="offline", turns=1)
    _runs_done(page, 2)
    expect(page.locator(".turn.current .state")).to_contain_text(
        "Stopped: the question spent its turns."
    )
    shot(page, "6-budget")

    page.click("#new-thread")
    _ask(page, "How much grain do the silos store?", model="offline", turns=0)
    _runs_done(page, 3)
    # nothing was searched, so nothing was written from chunks
    expect(page.locator(".turn.current .state")).to_have_text(
        "Stopped: the question spent its turns."
    )


def test_a_highlight_counts_characters_as_the_server_does(
    page: Page, server: LangGraphServer, ui_docs: str
) -> None:
    # the server's offsets count code points; past an emoji a JS string counts two units each
    _open(page, server, ui_docs)
    assert page.evaluate("unitIndex('\U0001f680\U0001f680 Launch', 3)") == 5
    assert page.evaluate("unitIndex('plain text', 5)") == 5
    assert page.evaluate("unitIndex('\U0001f680', 9)") == 2  # never past the end
    # a Markdown file's title leads its section paths: a source names it once
    placed = "placeOf({title: 'Deploying', section: 'Deploying > Rollback', pages: '2'})"
    assert page.evaluate(placed) == "Deploying › Rollback › page 2"
    assert page.evaluate("placeOf({title: 'Guide', section: 'Ports'})") == "Guide › Ports"


@pytest.mark.parametrize("path", ["/ui/foo", "/ui/index.html", "/ui/static/"])
def test_a_path_under_ui_the_page_does_not_have_is_not_found_on_the_server(
    server: LangGraphServer, path: str
) -> None:
    # the server mounts a /ui of its own; the page's routes answer the whole prefix
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{server.url}{path}", timeout=10)
    assert missing.value.code == 404


def test_a_document_holding_a_script_renders_as_text(
    page: Page, server: LangGraphServer, ui_docs: str, shot: Shot
) -> None:
    _open(page, server, ui_docs)
    _ask(page, "How are zorblat widgets configured?")
    _runs_done(page, 1)
    page.locator(".turn.current .cite").first.click()
    passage = page.locator("#passage-text")
    expect(passage).to_contain_text('<script>window.__pwned = 1</script><img src=x onerror="window')
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#passage-text script, #passage-text img, #conversation img").count() == 0
    shot(page, "7-script-as-text")


def test_an_empty_knowledge_base_and_a_server_that_is_down(
    page: Page, server: LangGraphServer, shot: Shot
) -> None:
    # Both from the browser's side: the session's knowledge base is shared with other tests,
    # and its server with every test; the page sees what it would see of either.
    page.route("**/ui/api/collections", lambda route: route.fulfill(json={"collections": []}))
    _open(page, server)
    expect(page.locator("#collection-note")).to_contain_text("The knowledge base is empty")

    def down(route: Route) -> None:
        route.abort("connectionrefused")

    page.route("**/runs/stream", down)  # the server goes away as the question is sent
    _ask(page, "How do I run a coroutine with a timeout?")
    expect(page.locator(".turn.current .state")).to_contain_text(
        "The run failed: the connection to the server broke off"
    )
    page.route("**/threads**", down)  # and is still away for the next one
    _ask(page, "How do I run a coroutine with a timeout?")
    expect(page.locator("#banner")).to_contain_text("does not answer: is it running?")
    expect(page.locator("#server-status")).to_have_text("server down")
    shot(page, "8-server-down")


def test_a_follow_up_says_first_that_the_earlier_answer_s_evidence_changed(
    page: Page, server: LangGraphServer, pg_url: str, tmp_path: Path, shot: Shot
) -> None:
    name = f"ui-stale-{uuid.uuid4().hex[:8]}"
    notes = tmp_path / "cranes.md"
    notes.write_text("# Cranes\n\nThe quay cranes lift 65 tonnes each, two boxes at a time.\n")
    kb = KnowledgeBase(pg_url)
    try:
        kb.ingest(notes, collection=name)
        _open(page, server, name)
        _ask(page, "How much do the quay cranes lift?")
        _runs_done(page, 1)
        expect(page.locator(".turn.current .answer")).to_contain_text("65 tonnes")
        expect(page.locator(".turn.current .stale")).to_have_count(0)
        notes.write_text("# Cranes\n\nThe quay cranes lift 80 tonnes each since the refit.\n")
        kb.ingest(notes, collection=name)
        _ask(page, "And how many boxes at a time?")
        _runs_done(page, 2)
        stale = page.locator(".turn.current .stale")
        expect(stale).to_contain_text("changed since")
        expect(stale).to_contain_text("cranes.md")
        shot(page, "8-stale-evidence")
    finally:
        kb.delete_collection(name)
        kb.close()
