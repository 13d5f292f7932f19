"""Bad input of every kind: a clear error before anything runs, or a defined outcome; nothing half-written.

tests/reliability/README.md's table lists these cases with their outcomes.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from langchain_openai import ChatOpenAI

from arcana_loop.graph import run
from arcana_loop.knowledge import IngestError
from arcana_loop.nodes.deps import ConfigurationError
from arcana_loop.nodes.models import ModelSpecError
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search
from tests.fixtures.openai_server import conversation_problem

pytestmark = pytest.mark.reliability


async def _async_listener(event: dict) -> None:  # the loop's thread has nothing to await it
    return None


# (kind, run() keywords, expected exception, message fragment)
REJECTED = [
    ("empty question", {"question": ""}, ValueError, "must not be empty"),
    ("whitespace-only question", {"question": " \n\t "}, ValueError, "must not be empty"),
    ("1 MB question", {"question": "x" * 1_000_000}, ValueError, "the most accepted is 32,000"),
    ("int question", {"question": 42}, TypeError, "must be a string, got int"),
    ("None question", {"question": None}, TypeError, "got NoneType"),
    ("bytes question", {"question": b"q?"}, TypeError, "got bytes"),
    ("question with NUL", {"question": "a\x00b"}, ValueError, "NUL"),
    ("max_iterations -1", {"max_iterations": -1}, ValueError, "at least 0"),
    ("max_iterations '3'", {"max_iterations": "3"}, TypeError, "must be an integer"),
    ("max_iterations 2.5", {"max_iterations": 2.5}, TypeError, "must be an integer"),
    ("max_iterations True", {"max_iterations": True}, TypeError, "must be an integer"),
    ("chunk_cap -5", {"chunk_cap": -5}, ValueError, "at least 0"),
    ("temperature -1", {"temperature": -1.0}, ValueError, "finite number >= 0"),
    ("temperature 'hot'", {"temperature": "hot"}, TypeError, "number or None"),
    ("temperature NaN", {"temperature": float("nan")}, ValueError, "finite number"),
    ("unknown grounder", {"grounder": "oracle"}, ValueError, "known grounders: local, llm_judge"),
    ("malformed model spec", {"controller_llm": "gpt4"}, ModelSpecError, "provider:model"),
    ("unknown provider", {"controller_llm": "nosuch:model"}, ModelSpecError, "not usable"),
    ("empty model spec", {"controller_llm": ""}, ModelSpecError, "provider:model"),
    ("search_fn not callable", {"search_fn": 42}, TypeError, "search_fn must be callable"),
    ("misspelt option", {"max_iteration": 3}, TypeError, "unknown run option(s): max_iteration"),
    (
        "min_support without a grounder",
        {"min_support": 0.5},
        ConfigurationError,
        "needs a grounder",
    ),
    ("min_support 2", {"min_support": 2.0, "grounder": "local"}, ValueError, "between 0 and 1"),
    ("search_opts a list", {"search_opts": [1]}, TypeError, "mapping"),
    ("collection an int", {"collection": 5}, TypeError, "collection must be"),
    (
        "collection a list of ints",
        {"collection": [1, 2]},
        TypeError,
        "collection name must be a str, got int",
    ),
    ("collection a dict", {"collection": {"a": 1}}, TypeError, "collection must be"),
    ("max_seconds -1", {"max_seconds": -1.0}, ValueError, "finite number >= 0"),
    ("max_tokens_total 0", {"max_tokens_total": 0}, ValueError, "at least 1"),
    ("duplicate_similarity 1.5", {"duplicate_similarity": 1.5}, ValueError, "between 0 and 1"),
    ("max_parallel_searches 0", {"max_parallel_searches": 0}, ValueError, "at least 1"),
    ("max_tool_calls_per_turn 0", {"max_tool_calls_per_turn": 0}, ValueError, "at least 1"),
    ("unknown checkpointer", {"checkpointer": "redis"}, ValueError, "unknown checkpointer"),
    (
        "sqlite checkpointer without a path",
        {"checkpointer": "sqlite:"},
        ValueError,
        "unknown checkpointer",
    ),
    ("system_prompt an int", {"system_prompt": 5}, TypeError, "system_prompt must be"),
    ("answer_prompt an int", {"answer_prompt": 5}, TypeError, "answer_prompt must be"),
    ("chunk_cap '30'", {"chunk_cap": "30"}, TypeError, "chunk_cap must be an integer"),
    ("max_repairs -1", {"max_repairs": -1}, ValueError, "at least 0"),
    ("repair_turns '2'", {"repair_turns": "2"}, TypeError, "repair_turns must be an integer"),
    ("budget_ledger 'yes'", {"budget_ledger": "yes"}, TypeError, "True or False"),
    ("duplicate_guard 1", {"duplicate_guard": 1}, TypeError, "True or False"),
    ("explore_tool 'true'", {"explore_tool": "true"}, TypeError, "True or False"),
    ("fallback_synthesis 'no'", {"fallback_synthesis": "no"}, TypeError, "True or False"),
    ("judge_model an int", {"judge_model": 5}, TypeError, "judge_model must be a string"),
    ("grounder an int", {"grounder": 5}, TypeError, "a grounder must be"),
    ("grounder a plain object", {"grounder": object()}, TypeError, "a grounder must be"),
    (
        "min_support -0.1",
        {"min_support": -0.1, "grounder": "local"},
        ValueError,
        "finite number >= 0",
    ),
    ("max_seconds inf", {"max_seconds": float("inf")}, ValueError, "finite number"),
    ("synthesizer not callable", {"synthesizer": 5}, TypeError, "synthesizer must be a function"),
    ("controller_llm an int", {"controller_llm": 5}, TypeError, "a model must be"),
    (
        "controller_llm a one-item pair",
        {"controller_llm": ("openai:gpt-4o-mini",)},
        TypeError,
        "a model pair must be",
    ),
    ("answer_llm malformed", {"answer_llm": "gpt4"}, ModelSpecError, "provider:model"),
    ("answer_llm an int", {"answer_llm": 5}, TypeError, "a model must be"),
    ("tools [42]", {"tools": [42]}, TypeError, "BaseTool instances, got int"),
    ("tools a string", {"tools": "search"}, TypeError, "BaseTool instances, got str"),
    ("on_event not callable", {"on_event": 5}, TypeError, "on_event must be a function"),
    ("on_event async", {"on_event": _async_listener}, TypeError, "would never be awaited"),
    ("search_opts with int keys", {"search_opts": {1: 2}}, TypeError, "string keys"),
    ("max_iterations past 64 bits", {"max_iterations": 10**30}, ValueError, "at most 922"),
    ("chunk_cap past 64 bits", {"chunk_cap": 2**63}, ValueError, "chunk_cap must be at most"),
    ("thread_id without a checkpointer", {"thread_id": "t-1"}, ValueError, "needs a checkpointer"),
    (
        "thread_id blank",
        {"thread_id": "   ", "checkpointer": "memory"},
        ValueError,
        "must not be empty or blank",
    ),
    ("search_opts setting limit", {"search_opts": {"limit": 3}}, TypeError, "cannot set 'limit'"),
    (
        "search_opts a misspelt mode, for the knowledge base",
        {"search_opts": {"mode": "semantc"}, "search_fn": None},
        ValueError,
        "invalid search mode 'semantc'",
    ),
    (
        "search_opts an unknown key, for the knowledge base",
        {"search_opts": {"bogus": 1}, "search_fn": None},
        TypeError,
        "unknown search option 'bogus'",
    ),
    (
        "search_opts a key the search function does not take",
        {"search_opts": {"mode": "semantic"}, "search_fn": lambda query, collection, limit: []},
        TypeError,
        "search_fn takes no 'mode'",
    ),
    (
        "durability 'fast'",
        {"durability": "fast", "checkpointer": "memory"},
        ValueError,
        "durability must be one of",
    ),
    ("checkpointer an int", {"checkpointer": 5}, ValueError, "unknown checkpointer"),
    ("collection blank", {"collection": " "}, ValueError, "must not be empty or blank"),
    ("collection ['']", {"collection": [""]}, ValueError, "must not be empty or blank"),
    ("collection a set", {"collection": {"a"}}, TypeError, "collection must be"),
    ("collection bytes", {"collection": b"docs"}, TypeError, "collection must be"),
    ("collection with NUL", {"collection": "a\x00b"}, ValueError, "NUL"),
]


@pytest.mark.parametrize(
    ("kind", "kwargs", "error", "fragment"), REJECTED, ids=[r[0] for r in REJECTED]
)
def test_bad_run_input_is_rejected_before_anything_runs(kind, kwargs, error, fragment):
    kwargs = dict(kwargs)
    question = kwargs.pop("question", "Q?")
    model = ScriptedChatModel(responses=[answer("never")])
    found = ScriptedSearch([])
    kwargs.setdefault("controller_llm", model)
    kwargs.setdefault("search_fn", found)
    with pytest.raises(error) as caught:
        run(question, **kwargs)
    assert fragment in str(caught.value)
    assert model.calls == [] and found.calls == []  # nothing ran


def test_a_served_run_given_search_opts_its_search_refuses_fails_at_start():
    from arcana_loop.graph import build_graph, make_deps

    model, found = ScriptedChatModel(responses=[answer("never")]), ScriptedSearch([])
    compiled = build_graph(make_deps(controller_llm=model, search_fn=found)).compile()
    with pytest.raises(TypeError, match="cannot set 'collection'"):
        compiled.invoke({"question": "Q?"}, context={"search_opts": {"collection": "x"}})
    assert model.calls == [] and found.calls == []


ENV_REJECTED = [
    ("ARCANA_LOOP_MAX_ITERATIONS", "abc", "MAX_ITERATIONS must be a whole number of at least 0"),
    ("ARCANA_LOOP_SEARCH_OPTS", "[1]", "SEARCH_OPTS must be a JSON object"),
    ("ARCANA_LOOP_SEARCH_OPTS", "{not json", "SEARCH_OPTS must be a JSON object"),
    ("ARCANA_LOOP_BUDGET_LEDGER", "maybe", "BUDGET_LEDGER must be true or false"),
    ("ARCANA_LOOP_CHUNK_CAP", "-3", "CHUNK_CAP must be a whole number of at least 0, got '-3'"),
    ("ARCANA_LOOP_TEMPERATURE", "warm", "TEMPERATURE must be a number of at least 0"),
    ("ARCANA_LOOP_REQUIRE_SEARCH", "always", "REQUIRE_SEARCH must be one of off, on, auto"),
    ("ARCANA_LOOP_GROUNDER", "oracle", "unknown grounder"),
]


@pytest.mark.parametrize(
    ("variable", "value", "fragment"), ENV_REJECTED, ids=[f"{v}={x}" for v, x, _ in ENV_REJECTED]
)
def test_bad_environment_defaults_are_rejected_before_anything_runs(
    monkeypatch, variable, value, fragment
):
    monkeypatch.setenv(variable, value)
    model = ScriptedChatModel(responses=[answer("never")])
    with pytest.raises(ValueError, match=fragment):
        run("Q?", controller_llm=model, search_fn=ScriptedSearch([]))
    assert model.calls == []


@pytest.mark.parametrize("option", ["controller_model", "answer_model", "judge_model"])
def test_a_malformed_model_option_is_refused_before_anything_runs(option: str) -> None:
    # the option form, as a served graph gets it in the run's context: checked with the others
    found = ScriptedSearch([])
    model = ScriptedChatModel(responses=[answer("draft")])
    with pytest.raises(ValueError, match=f"^{option} must be 'provider:model'.*got 'gpt4'$"):
        run("Q?", controller_llm=model, search_fn=found, **{option: "gpt4"})
    assert found.calls == [] and model.calls == []


def test_zero_iterations_and_zero_chunk_cap_are_defined_outcomes():
    model = ScriptedChatModel(responses=[search("q"), answer("x")])
    none = run(
        "Q?", controller_llm=model, search_fn=ScriptedSearch([[chunk("a")]]), max_iterations=0
    )
    assert (none.terminated_by, none.iterations, none.answer, model.calls) == (
        "max_iterations",
        0,
        None,
        [],
    )
    capped = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("q"), answer("x")]),
        search_fn=ScriptedSearch([[chunk("a")]]),
        chunk_cap=0,
    )
    assert capped.terminated_by == "answered" and capped.chunks == []


# ----- collection values against the real knowledge base ---------------------------------

HOSTILE_NAMES = [
    "no-such-collection",
    "it's",
    'say "hi"',
    "100%",
    "a;b",
    "x'; DROP TABLE chunks; --",
    "') OR 1=1 --",
    "_%",
    "名前-コレクション",
    "emoji 🧪",
    "n" * 10_000,
]


@pytest.mark.postgres
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[n[:20] for n in HOSTILE_NAMES])
def test_hostile_collection_names_match_nothing_and_break_nothing(kb, name):
    kb.ingest("The secret launch code is 0000.", collection="secret")
    assert kb.search("launch code", collection=name) == []
    assert kb.search("launch code", collection=[name]) == []
    model = ScriptedChatModel(responses=[search("launch code"), answer("unknown")])
    if len(name) > 200:
        with pytest.raises(ValueError, match="at most 200 characters"):
            run(
                "What is the launch code?",
                collection=name,
                controller_llm=model,
                search_fn=kb.search,
            )
    else:
        result = run(
            "What is the launch code?", collection=name, controller_llm=model, search_fn=kb.search
        )
        assert result.tool_history[0]["returned_chunk_ids"] == []
    assert [c.name for c in kb.collections()] == ["secret"]
    assert kb.search("launch code", collection="secret")  # the table survived


# ----- malformed controller output through the real OpenAI client -------------------------


def _model(server):
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0
    )


MALFORMED = [
    (
        "invalid JSON arguments",
        [{"name": "search", "raw_arguments": "{query: oops"}],
        "not valid json",
    ),
    (
        "wrong argument types",
        [{"name": "search", "arguments": {"query": 42, "limit": "many"}}],
        "query must be",
    ),
    ("missing call id", [{"name": "search", "id": "", "arguments": {"query": "q"}}], ""),
    (
        "duplicate call ids",
        [
            {"name": "search", "id": "same", "arguments": {"query": "a"}},
            {"name": "search", "id": "same", "arguments": {"query": "b"}},
        ],
        "",
    ),
    ("unknown tool", [{"name": "rm_rf", "arguments": {"path": "/"}}], "unknown tool"),
    ("answer without text", [{"name": "answer", "arguments": {}}], "text"),
    ("give_up without reason", [{"name": "give_up", "arguments": {}}], "reason"),
    (
        "a thousand calls in one turn",
        [{"name": "search", "arguments": {"query": f"q{i}"}} for i in range(1000)],
        "",
    ),
]


@pytest.mark.parametrize(("kind", "calls", "fragment"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_controller_output_gets_a_tool_result_and_the_conversation_stays_valid(
    openai_server, kind, calls, fragment
):
    openai_server.enqueue(
        {"tool_calls": calls},
        {"tool_calls": [{"name": "answer", "arguments": {"text": "recovered"}}]},
    )
    found = ScriptedSearch(lambda query, **kw: [chunk(f"c-{query}")])
    result = run("Q?", controller_llm=_model(openai_server), search_fn=found, max_iterations=3)
    assert result.terminated_by == "answered" and result.answer == "recovered"
    second = openai_server.requests[1]["messages"]
    assert conversation_problem(second) is None
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert len(tool_messages) == len(calls)  # every call answered, skipped ones included
    assert fragment.lower() in " ".join(m["content"] for m in tool_messages).lower(), [
        m["content"] for m in tool_messages
    ][:3]
    assert len(found.calls) <= 16  # at most max_tool_calls_per_turn searches ran
    sent_ids = [
        c["id"] for m in second if m["role"] == "assistant" for c in m.get("tool_calls") or []
    ]
    assert all(sent_ids) and len(set(sent_ids)) == len(sent_ids) == len(
        calls
    )  # missing and repeated ids were made unique


def test_an_empty_reply_is_an_error_not_an_empty_answer(openai_server):
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "q"}}]}, {"tool_calls": []}
    )
    result = run(
        "Q?", controller_llm=_model(openai_server), search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert (result.terminated_by, result.answer) == ("error", None)
    assert result.error == "the controller replied with neither a tool call nor any text"
    assert [e["returned_chunk_ids"] for e in result.tool_history] == [
        ["c1"]
    ]  # the search it made is kept


def test_arguments_that_are_not_an_object_end_the_run_as_error(openai_server):
    # the OpenAI client itself refuses to build the reply; the loop reports it and keeps what it had
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "arguments": {"query": "q"}}]},
        {"tool_calls": [{"name": "search", "raw_arguments": "[1, 2]"}]},
    )
    result = run(
        "Q?", controller_llm=_model(openai_server), search_fn=ScriptedSearch([[chunk("c1")]])
    )
    assert result.terminated_by == "error" and "valid dictionary" in (result.error or "")
    assert [c["id"] for c in result.chunks] == ["c1"] and result.answer is None


def test_null_arguments_are_a_missing_query(openai_server):
    openai_server.enqueue(
        {"tool_calls": [{"name": "search", "raw_arguments": "null"}]},
        {"tool_calls": [{"name": "answer", "arguments": {"text": "ok"}}]},
    )
    result = run("Q?", controller_llm=_model(openai_server), search_fn=ScriptedSearch([]))
    assert (
        result.tool_history[0]["summary"] == "search error: missing :query argument"
        and result.answer == "ok"
    )
    assert conversation_problem(openai_server.requests[1]["messages"]) is None


def test_an_empty_tool_call_list_is_a_plain_answer(openai_server):
    openai_server.enqueue("Just text, no tools.")
    result = run("Q?", controller_llm=_model(openai_server), search_fn=ScriptedSearch([]))
    assert (result.terminated_by, result.answer) == ("answered", "Just text, no tools.")


# ----- malformed search results --------------------------------------------------------------

BAD_RESULTS = [
    ("a result without id", [{"text": "no id here", "score": 0.5}]),
    ("a result without text", [{"id": "c1", "score": 0.5}]),
    ("a non-numeric score", [{"id": "c1", "text": "t", "score": "high"}]),
    ("a NaN score", [{"id": "c1", "text": "t", "score": float("nan")}]),
    ("not a list", {"id": "c1"}),
    ("a list of strings", ["just text"]),
    ("None", None),
]


@pytest.mark.parametrize(("kind", "results"), BAD_RESULTS, ids=[b[0] for b in BAD_RESULTS])
def test_malformed_search_results_are_normalised_or_reported_and_the_loop_goes_on(kind, results):
    model = ScriptedChatModel(responses=[search("q"), answer("done")])
    result = run("Q?", controller_llm=model, search_fn=lambda query, **kw: results)
    assert result.terminated_by == "answered" and result.answer == "done"
    json.dumps(result.to_dict())  # whatever came back is plain JSON now
    for c in result.chunks:
        assert (
            isinstance(c["id"], str)
            and c["id"]
            and isinstance(c["text"], str)
            and isinstance(c["score"], float)
        )


# ----- ingest of bad input ------------------------------------------------------------------


def _counts(kb):
    with psycopg.connect(kb.url, options=f"-c search_path={kb.schema},public") as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM kb_collections), (SELECT count(*) FROM kb_documents), (SELECT count(*) FROM kb_chunks)"
        ).fetchone()


BAD_FILES = [
    ("binary", bytes(range(256)) * 40, "binary file"),
    ("png header", b"\x89PNG\r\n\x1a\n" + bytes(200), "binary file"),
    ("binary without NUL bytes", bytes(range(1, 128)) * 300, "binary file"),
    (
        "gzip without NUL bytes",
        b"\x1f\x8b\x08\x08" + b"compressed-looking bytes " * 20,
        "binary file",
    ),
    ("empty", b"", "file is empty"),
    ("whitespace only", b" \n\t\n ", "file is empty"),
    (
        "latin-1 encoded",
        "Caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade.".encode("latin-1"),
        "not valid UTF-8",
    ),
    ("utf-16 encoded", "Sixteen-bit text about ferrets.".encode("utf-16"), "binary file"),
    ("a cut multi-byte character", b"na\xc3ve text about lone lead bytes", "not valid UTF-8"),
    ("enormous (25 MB)", b"word " * 5_000_000, "file is too large"),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("kind", "data", "fragment"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_ingest_of_a_bad_file_is_a_clear_error_and_writes_nothing(
    kb, tmp_path, kind, data, fragment
):
    kb.ingest("A good document about otters.", collection="bad-files")
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    before = _counts(kb)
    with pytest.raises(IngestError, match=fragment):
        kb.ingest(path, collection="bad-files")
    with pytest.raises(IngestError, match=fragment):
        kb.ingest(path, collection="a-new-collection")  # not even the collection is created
    assert _counts(kb) == before


@pytest.mark.postgres
def test_ingest_of_a_missing_path_is_a_clear_error(kb, tmp_path):
    before = _counts(kb)
    with pytest.raises(IngestError, match="no such file or directory"):
        kb.ingest(tmp_path / "missing.txt", collection="bad-files")
    assert _counts(kb) == before


@pytest.mark.postgres
def test_a_directory_walk_skips_each_bad_file_with_its_reason_and_keeps_the_good_ones(kb, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for index, (_, data, _) in enumerate(BAD_FILES):
        (folder / f"bad{index}.txt").write_bytes(data)
    (folder / "good.md").write_text("# Otters\n\nOtters hold hands while they sleep.")
    before = _counts(kb)
    outcome = kb.ingest(folder, collection="mixed")
    assert outcome.documents_added == 1
    reasons = {Path(file).name: reason for file, reason in outcome.skipped_files}
    assert sorted(reasons) == sorted(f"bad{index}.txt" for index in range(len(BAD_FILES)))
    for index, (kind, _, fragment) in enumerate(BAD_FILES):
        assert fragment in reasons[f"bad{index}.txt"], (kind, reasons[f"bad{index}.txt"])
    assert _counts(kb)[1:] == (before[1] + 1, before[2] + outcome.chunks_added)
    assert [h["text"] for h in kb.search("otters sleep", collection="mixed")] == [
        "# Otters\n\nOtters hold hands while they sleep."
    ]


BAD_TEXTS = [
    ("empty string", "", "cannot ingest empty text"),
    ("whitespace string", " \n\t ", "cannot ingest empty text"),
    ("text with NUL", "otters\x00sleep", "NUL characters"),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("kind", "text", "fragment"), BAD_TEXTS, ids=[b[0] for b in BAD_TEXTS])
def test_ingest_of_bad_text_is_a_clear_error_and_writes_nothing(kb, kind, text, fragment):
    before = _counts(kb)
    with pytest.raises(IngestError, match=fragment):
        kb.ingest(text, collection="bad-text")
    assert _counts(kb) == before  # an empty string is not the working directory either


STORABLE_NAMES = [
    n for n in HOSTILE_NAMES[1:] if len(n) <= 200
]  # longer names are refused at ingest


@pytest.mark.postgres
@pytest.mark.parametrize("name", STORABLE_NAMES, ids=[n[:20] for n in STORABLE_NAMES])
def test_hostile_collection_names_are_stored_as_plain_names(kb, name):
    kb.ingest("Walruses sleep on ice floes.", collection=name)
    kb.ingest("Penguins huddle in the cold.", collection="neighbour")
    hits = kb.search("walruses ice", collection=name)
    assert [h["collection"] for h in hits] == [name]
    assert sorted(c.name for c in kb.collections()) == sorted([name, "neighbour"])
    kb.delete_collection(name)
    assert [c.name for c in kb.collections()] == ["neighbour"]


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["", "   ", "nul\x00name"], ids=["empty", "blank", "NUL"])
def test_unusable_collection_names_are_clear_errors(kb, name):
    before = _counts(kb)
    with pytest.raises(ValueError, match="collection name"):
        kb.ingest("Walruses sleep on ice floes.", collection=name)
    assert _counts(kb) == before
    if name.strip():
        with pytest.raises(ValueError, match="NUL"):
            kb.search("walruses", collection=name)
