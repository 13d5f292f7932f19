"""The web page at /ui: its weight, and how soon a first answer shows on the demo corpus.

Starts an embedded PostgreSQL of its own, ingests the demo corpus (python-docs) into it,
starts ``langgraph dev`` on loopback (the test fixture's way) with a scripted
OpenAI-compatible server, and asks the same questions twice per controller:

* through the page, in headless Chromium (the system's ``/usr/bin/chromium``): from the
  click on Ask to the first words of the answer on screen (``window.arcanaTimings``);
* through the server's own streaming API from Python (the baseline, same run): from
  sending the request to the first answer text in the ``messages-tuple`` stream.

The offline controller's answer arrives whole (it does not stream tokens); the scripted
model streams a word at a time. Each question is asked on a new thread.

    .venv/bin/python -m bench.ui_bench [--repeat 3]

Results: ``bench/results/ui.json``; the table is in ``ui/README.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.server import embedded_server_url, stop_embedded_server
from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs
from arcana_loop.ui.app import ASSETS, asset
from tests.fixtures.langgraph_server import start_langgraph_server
from tests.fixtures.openai_server import ScriptedOpenAIServer
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

QUESTIONS = (
    "How do I run a coroutine with a timeout?",
    "How do I parse a JSON document from a string?",
    "How do I sort a list in place?",
)
RESULTS = Path(__file__).parent / "results" / "ui.json"
SCRIPTED = "openai:gpt-4o-mini"


def page_weight() -> dict[str, int]:
    """Bytes of the page's files, as served and gzipped."""
    files = {name: asset(name) for name in ASSETS}
    return {
        **{name: len(data) for name, data in files.items()},
        "total": sum(len(d) for d in files.values()),
        "total_gzip": sum(len(gzip.compress(d)) for d in files.values()),
    }


def _script(openai: ScriptedOpenAIServer, kb: KnowledgeBase, question: str) -> None:
    """A search, then a plain-text answer citing the best chunk, streamed a word at a time."""
    top = kb.search(question, collection=COLLECTION, limit=1)[0]
    first = str(top["text"]).split(". ")[0]
    openai.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": question}}]},
        f"{first} [{top['id']}].",
    )


def api_first_token(url: str, question: str, context: dict[str, Any]) -> float:
    """Seconds from sending a streamed run to the first answer text in its messages."""
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as http:
        thread = http.post("/threads", json={}).json()["thread_id"]
        body = {
            "assistant_id": "arcana-loop",
            "input": {"question": question, "collection": COLLECTION},
            "context": context,
            "stream_mode": ["messages-tuple"],
        }
        started = time.perf_counter()
        first = None
        with http.stream("POST", f"/threads/{thread}/runs/stream", json=body) as response:
            for line in response.iter_lines():
                if first is None and line.startswith("data: [") and _is_answer_text(line[6:]):
                    first = time.perf_counter() - started
        assert first is not None, "no answer text streamed"
        return first


def _is_answer_text(data: str) -> bool:
    message, metadata = json.loads(data)
    if message.get("type") == "ai" and message.get("name") == "answer":
        return True
    tagged = "arcana_loop:controller" in (metadata.get("tags") or [])
    return (
        tagged
        and message.get("type") == "AIMessageChunk"
        and not message.get("tool_call_chunks")
        and bool(message.get("content"))
    )


def page_first_tokens(url: str, runs: list[tuple[str, str]]) -> list[dict[str, float]]:
    """Ask each (question, model) through the page; its first-token and end times, in seconds."""
    from playwright.sync_api import sync_playwright

    timings = []
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        page = context.new_page()
        page.goto(f"{url}/ui?collection={COLLECTION}")
        page.wait_for_selector("#server-status:text('connected')")
        page.click("#options summary")
        for number, (question, model) in enumerate(runs, start=1):
            page.click("#new-thread")
            page.fill("#model", model)
            page.fill("#question", question)
            page.click("#ask")
            page.wait_for_selector(f"body[data-runs='{number}']", timeout=120_000)
            timing = page.evaluate(f"window.arcanaTimings[{number - 1}]")
            timings.append(
                {"first": timing["first_token_ms"] / 1000, "end": timing["end_ms"] / 1000}
            )
        context.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="times each question is asked")
    args = parser.parse_args()
    pgdata = Path(tempfile.mkdtemp(prefix="ui-bench-")) / "pgdata"
    url = embedded_server_url(pgdata)
    results: dict[str, Any] = {"weight": page_weight(), "controllers": {}}
    try:
        kb = KnowledgeBase(url)
        ensure_python_docs(kb)
        with (
            ScriptedOpenAIServer() as openai,
            start_langgraph_server(database_url=url, openai=openai) as server,
        ):
            api_first_token(
                server.url, QUESTIONS[0], {}
            )  # the server's first run loads the embedder
            for name, model in (("offline", "offline"), ("scripted", SCRIPTED)):
                asked = [q for q in QUESTIONS for _ in range(args.repeat)]
                api = []
                for question in asked:
                    if model == SCRIPTED:
                        _script(openai, kb, question)
                    api.append(api_first_token(server.url, question, {"controller_model": model}))
                if model == SCRIPTED:
                    for question in asked:
                        _script(openai, kb, question)
                shown = page_first_tokens(server.url, [(q, model) for q in asked])
                results["controllers"][name] = {
                    "api_first_s": statistics.median(api),
                    "page_first_s": statistics.median(t["first"] for t in shown),
                    "page_end_s": statistics.median(t["end"] for t in shown),
                    "runs": len(asked),
                }
        kb.close()
    finally:
        stop_embedded_server(pgdata)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    weight = results["weight"]
    print(f"page weight: {weight['total']} bytes ({weight['total_gzip']} gzipped)")
    print("controller | API first answer text (s) | page first words (s) | ratio | page done (s)")
    for name, r in results["controllers"].items():
        ratio = r["page_first_s"] / r["api_first_s"]
        print(
            f"{name} | {r['api_first_s']:.2f} | {r['page_first_s']:.2f} | {ratio:.2f}x | {r['page_end_s']:.2f}"
        )


if __name__ == "__main__":
    main()
