"""The offline controller's decisions, asserted on the tool calls it makes."""

from __future__ import annotations

from arcana_loop.graph import run
from arcana_loop.nodes.offline import question_parts
from tests.fakes import chunk

TEXTS = {
    "wait": "asyncio.wait_for runs a coroutine with a timeout. It cancels the task when the timeout expires.",
    "json": "json.loads parses a JSON document from a string. It returns Python dicts and lists.",
    "path": "pathlib.Path represents a filesystem path with methods such as exists and read_text.",
}


def memory_search(query, collection=None, limit=5, **_):
    words = {w.lower() for w in query.split()}
    hits = [
        chunk(k, t, score=len(words & set(t.lower().split())) / len(words))
        for k, t in TEXTS.items()
    ]
    return sorted([h for h in hits if h["score"] > 0], key=lambda h: h["score"], reverse=True)[
        :limit
    ]


def test_one_turn_searches_the_question_and_its_key_terms_then_answers_with_chunk_ids():
    result = run(
        "How do I run a coroutine with a timeout?",
        controller_llm="offline",
        search_fn=memory_search,
    )
    assert [e["tool"] for e in result.tool_history] == ["search", "search", "answer"]
    assert {e["iteration"] for e in result.tool_history if e["tool"] == "search"} == {0}
    assert [e["args"]["query"] for e in result.tool_history[:2]] == [
        "run a coroutine with a timeout",
        "coroutine run timeout",
    ]
    assert "asyncio.wait_for" in result.answer and "[wait]" in result.answer


def test_multi_part_question_gets_one_search_per_part():
    result = run(
        "How do I parse a JSON string; and how do I check a filesystem path exists?",
        controller_llm="offline",
        search_fn=memory_search,
    )
    queries = [e["args"]["query"] for e in result.tool_history if e["tool"] == "search"]
    assert queries[:2] == ["parse a JSON string", "and check a filesystem path exists"]
    assert len(queries) == 3  # and the key terms of the whole question
    assert "[json]" in result.answer and "[path]" in result.answer


def test_unanswerable_question_gives_up_saying_why():
    result = run("What is the capital of Peru?", controller_llm="offline", search_fn=memory_search)
    assert [e["tool"] for e in result.tool_history] == ["search", "search", "give_up"]
    assert result.terminated_by == "gave_up"
    assert "closely enough" in result.tool_history[-1]["args"]["reason"]


def test_searches_that_all_failed_are_given_up_as_failed_not_as_found_nothing():
    def down(query, collection=None, limit=5, **_):
        raise RuntimeError("search backend down")

    result = run(
        "How do I run a coroutine with a timeout?", controller_llm="offline", search_fn=down
    )
    assert result.terminated_by == "gave_up"
    assert "every search failed" in result.answer and "search backend down" in result.answer
    failed = [m for m in result.messages if getattr(m, "name", None) == "search"]
    assert failed and all(m.status == "error" for m in failed)  # LangChain's mark, as data


def test_a_toolset_without_search_is_given_up_without_calling_search():
    from arcana_loop import DEFAULT_TOOLS

    give_up_only = [t for t in DEFAULT_TOOLS if t.name == "give_up"]
    result = run(
        "How do I run a coroutine with a timeout?",
        controller_llm="offline",
        search_fn=memory_search,
        tools=give_up_only,
    )
    assert [e["tool"] for e in result.tool_history] == ["give_up"]
    assert "no search tool was offered" in result.answer


def test_filler_is_dropped_from_queries():
    assert question_parts("Can you please tell me how do I parse JSON?") == ["parse JSON"]


def test_two_things_compared_are_a_part_each():
    assert question_parts("What is the difference between a list and a tuple?") == [
        "the difference between a list and a tuple",
        "list",
        "tuple",
    ]
    assert question_parts("deque vs list for a queue?")[1:] == ["deque", "list"]


def test_sentences_are_chosen_by_meaning_and_led_by_their_subject():
    def labelled(query, collection=None, limit=5, **_):
        return [
            {
                **chunk(
                    "t1",
                    "Create and return a temporary file that is deleted when closed.",
                    score=0.9,
                ),
                "metadata": {"source": "pydoc:tempfile", "section": "tempfile.TemporaryFile"},
            },
            {
                **chunk(
                    "h1", "Return the smallest item of the heap without popping it.", score=0.5
                ),
                "metadata": {"source": "pydoc:heapq", "section": "heapq.nsmallest"},
            },
        ]

    result = run(
        "How do I get a temporary file that is deleted once it is closed?",
        controller_llm="offline",
        search_fn=labelled,
    )
    assert result.terminated_by == "answered"
    first = result.answer.splitlines()[0]
    assert first.startswith("tempfile.TemporaryFile: ") and first.endswith("[t1].")


def test_an_unrelated_result_is_given_up():
    def unrelated(query, collection=None, limit=5, **_):
        return [chunk("b1", "Bread dough rises when the yeast releases carbon dioxide.", score=0.2)]

    result = run(
        "How do I open a TLS connection to a server?", controller_llm="offline", search_fn=unrelated
    )
    assert result.terminated_by == "gave_up"


def test_a_new_result_layout_changes_nothing_the_controller_reads(monkeypatch):
    from arcana_loop.tools import chunks

    monkeypatch.setattr(chunks, "FOUND_TEMPLATE", "Results: {shown} of {total}")
    monkeypatch.setattr(chunks, "CHUNK_TAG", "passage")
    result = run(
        "How do I run a coroutine with a timeout?",
        controller_llm="offline",
        search_fn=memory_search,
    )
    assert result.tool_history[0]["summary"].startswith("Results: 3 of 3")
    assert "<passage " in result.tool_history[0]["summary"]
    assert result.terminated_by == "answered" and "[wait]" in result.answer


def _finds(chunk_id: str, text: str, source: str, section: str | None = None):
    """A search function that always finds one passage of a document."""
    metadata = {"source": source, **({"section": section} if section else {})}
    found = {**chunk(chunk_id, text, score=0.9), "metadata": metadata}
    return lambda query, collection=None, limit=5, **_: [found]


def test_a_document_found_is_quoted_under_its_title_never_its_path():
    docs = _finds(
        "d1",
        "# Deploy\n\nRun make release from the main branch, then tag the commit.",
        "/home/someone/project/docs/deploy.md",
    )

    result = run("How do I deploy?", controller_llm="offline", search_fn=docs)
    assert result.terminated_by == "answered"
    assert result.answer.startswith("deploy: Run make release from the main branch")
    assert "/home" not in result.answer and "#" not in result.answer


def test_a_heading_in_a_passage_is_never_quoted_as_markup():
    docs = _finds(
        "p1",
        "## Port allocation\n\nEach service gets a port from 9000 upwards, in order of start.",
        "ops.md",
        "Operations > Port allocation",
    )

    result = run("How are service ports allocated?", controller_llm="offline", search_fn=docs)
    assert result.answer.startswith("Port allocation: Each service gets a port from 9000")
    assert "##" not in result.answer


def test_a_table_is_quoted_a_row_a_sentence_without_its_pipes():
    docs = _finds(
        "t1",
        "## Ports\n\n| service | port |\n|---|:---:|\n| api | 8080 |\n| admin | 9090 |",
        "deploy.md",
        "Deploying > Ports",
    )

    result = run("Which port does the admin service use?", controller_llm="offline", search_fn=docs)
    assert "service: admin, port: 9090" in result.answer
    assert "|" not in result.answer and "---" not in result.answer


def test_a_callable_is_quoted_with_its_signature():
    docs = _finds(
        "j1",
        "json.dumps(obj, *, indent=None, sort_keys=False)\n\nSerialize obj to a JSON formatted str. "
        "If sort_keys is true, the output of dictionaries is sorted by key.",
        "pydoc:json",
        "json > json.dumps",
    )

    result = run("How do I get JSON with sorted keys?", controller_llm="offline", search_fn=docs)
    assert result.answer.startswith("json.dumps(obj, *, indent=None, sort_keys=False): ")
    assert "sorted by key [j1]." in result.answer


def test_every_offline_reply_says_its_answer_is_extracted():
    from arcana_loop.core.sources import ANSWER_KIND_KEY, EXTRACTED

    result = run(
        "How do I run a coroutine with a timeout?",
        controller_llm="offline",
        search_fn=memory_search,
    )
    replies = [m for m in result.messages if m.type == "ai" and m.tool_calls]
    assert replies and all(m.response_metadata[ANSWER_KIND_KEY] == EXTRACTED for m in replies)


def _reporting(*unmatched):
    """`memory_search`, reporting the given words as ones no document holds."""
    from arcana_loop.knowledge.types import SearchResults

    def search(query, **kwargs):
        words = [w for w in unmatched if w in query.lower()]
        return SearchResults(memory_search(query, **kwargs), unmatched=words)

    return search


def test_a_name_no_document_mentions_is_given_up_unless_a_passage_answers_it_strongly():
    question = "How do I stop a slow coroutine with anyio?"
    weak = run(question, controller_llm="offline", search_fn=_reporting("anyio"))
    assert weak.terminated_by == "gave_up"
    assert weak.tool_history[-1]["args"]["reason"] == "the knowledge base never mentions anyio"
    unreported = run(question, controller_llm="offline", search_fn=memory_search)
    assert unreported.terminated_by == "answered"  # the passage alone would have been quoted
    strong = run(
        "How do I run a coroutine with a timeout with anyio?",
        controller_llm="offline",
        search_fn=_reporting("anyio"),
    )
    assert strong.terminated_by == "answered"  # asyncio.wait_for answers it whatever anyio is


def test_an_accented_common_word_the_documents_lack_is_no_name():
    # "café" is "cafe" to the uncased vocabulary: a word, not a library the documents never mention
    result = run(
        "How do I stop a slow coroutine in a café?",
        controller_llm="offline",
        search_fn=_reporting("café"),
    )
    assert result.terminated_by == "answered"


def test_without_the_word_list_no_unknown_word_is_taken_for_a_name(monkeypatch):
    from arcana_loop.knowledge.errors import EmbedderUnavailable
    from arcana_loop.nodes import offline

    def missing():
        raise EmbedderUnavailable("the onnx extra is not installed")

    monkeypatch.setattr(offline, "vocabulary_words", missing)
    result = run(
        "How do I stop a slow coroutine with anyio?",
        controller_llm="offline",
        search_fn=_reporting("anyio"),
    )
    assert result.terminated_by == "answered"
