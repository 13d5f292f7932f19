"""Metadata filters through search, the retriever, the loop's search options and the CLI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from typer.testing import CliRunner

from arcana_loop.cli.main import app
from arcana_loop.graph import LoopContext, arun, run
from arcana_loop.graph.run import check_run_options
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.filters import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_VALUES,
    FilterError,
    check_filter,
)
from tests.fakes import answer, scripted, search

MODES = ("hybrid", "semantic", "fulltext")


@pytest.fixture
def berths(kb: KnowledgeBase) -> KnowledgeBase:
    for n in range(6):
        kb.ingest(
            f"Berth {n} holds ships of {n * 10 + 40} metres at the quay.",
            collection="port",
            name=f"berth-{n}",
            metadata={
                "berth": n,
                "side": "east" if n % 2 else "west",
                "surveyed": f"2026-0{n + 1}-15",
            },
        )
    kb.ingest(
        "Berth 9 of the secret yard holds ships of 90 metres at the quay.",
        collection="secret",
        name="yard",
        metadata={"berth": 9, "side": "east", "classified": True},
    )
    return kb


def _berths(kb: KnowledgeBase, where: object, mode: str = "hybrid", **kw: object) -> list[int]:
    hits = kb.search("berth ships metres quay", limit=10, mode=mode, filter=where, **kw)  # type: ignore[arg-type]
    return sorted(int(h["metadata"]["berth"]) for h in hits)


@pytest.mark.parametrize("mode", MODES)
def test_each_operator_narrows_every_search_mode(berths: KnowledgeBase, mode: str) -> None:
    scope = {"collection": "port"}
    cases = [
        ({"side": "east"}, [1, 3, 5]),
        ({"side": {"$eq": "west"}}, [0, 2, 4]),
        ({"side": {"$ne": "east"}}, [0, 2, 4]),
        ({"berth": {"$gt": 3}}, [4, 5]),
        ({"berth": {"$gte": 3, "$lt": 5}}, [3, 4]),
        ({"berth": {"$lte": 1}}, [0, 1]),
        ({"berth": {"$in": [0, 5, 7]}}, [0, 5]),
        ({"berth": {"$nin": [0, 5]}}, [1, 2, 3, 4]),
        ({"surveyed": {"$between": ["2026-02-01", "2026-04-30"]}}, [1, 2, 3]),
        ({"source": {"$like": "berth-%"}}, [0, 1, 2, 3, 4, 5]),
        ({"source": {"$ilike": "BERTH-1"}}, [1]),
        ({"side": {"$exists": True}}, [0, 1, 2, 3, 4, 5]),
        ({"classified": {"$exists": False}}, [0, 1, 2, 3, 4, 5]),
        ({"$or": [{"berth": 0}, {"$and": [{"side": "east"}, {"berth": {"$gt": 2}}]}]}, [0, 3, 5]),
        ({"berth": {"$gt": "3"}}, []),  # a string never orders against a number
        ({"side": "north"}, []),  # a filter that matches nothing
    ]
    for where, expected in cases:
        assert _berths(berths, where, mode, **scope) == expected, where


def test_a_filter_never_widens_a_collection_lock(berths: KnowledgeBase) -> None:
    # the other collection's metadata, named in the filter, under a lock to "port"
    for where in ({"classified": True}, {"berth": 9}, {"source": "yard"}):
        for mode in MODES:
            assert _berths(berths, where, mode, collection="port") == []
        retriever = berths.as_retriever(collection="port", k=10, filter=where)
        assert retriever.invoke("berth ships metres quay") == []
        result = run(
            "How long are the ships at berth 9?",
            collection="port",
            controller_llm="offline",
            search_fn=berths.search,
            search_opts={"filter": where},
            grounder=None,
        )
        assert not result.chunks and result.terminated_by != "answered"
    assert _berths(berths, {"classified": True}, collection=None) == [9]


def test_the_retriever_and_the_loop_search_through_the_filter(berths: KnowledgeBase) -> None:
    retriever = berths.as_retriever(collection="port", k=10, filter={"side": "east"})
    assert sorted(d.metadata["id"] for d in retriever.invoke("berth ships")) == sorted(
        h["id"] for h in berths.search("berth ships", collection="port", filter={"side": "east"})
    )
    result = run(
        "How long are the ships at berth 4?",
        collection="port",
        controller_llm="offline",
        search_fn=berths.search,
        search_opts={"filter": {"berth": {"$gte": 4}}},
        grounder=None,
    )
    assert result.chunks and {c["metadata"]["berth"] for c in result.chunks} <= {4, 5}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"side": {"$regex": "e.*"}}, "unknown operator '\\$regex'"),
        ({"$not": {"side": "east"}}, "unknown operator '\\$not'"),
        ({"berth": {"$in": "east"}}, "\\$in takes a list"),
        ({"berth": {"$gt": [1]}}, "\\$gt takes a number or a string"),
        ({"berth": {"$between": [1]}}, "\\$between takes \\[low, high\\]"),
        ({"side": {"$exists": "yes"}}, "\\$exists takes true or false"),
        ({"$or": []}, "\\$or takes a non-empty list"),
        ({"side": {}}, "the condition on 'side' is empty"),
        ({"berth": float("nan")}, "\\$eq takes a string"),
        ("side=east", "filter must be a mapping"),
    ],
)
def test_a_filter_that_cannot_be_read_is_refused_before_anything_runs(
    berths: KnowledgeBase, where: object, message: str
) -> None:
    with pytest.raises(FilterError, match=message):
        check_filter(where)
    with pytest.raises(ValueError, match=message):
        berths.search("berth", collection="port", filter=where)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        berths.as_retriever(filter=where)  # type: ignore[arg-type]


def _nested(levels: int, inner: dict[str, Any]) -> dict[str, Any]:
    """`inner` under `levels` levels of ``$and``."""
    where = inner
    for _ in range(levels):
        where = {"$and": [where]}
    return where


NUMBER_LIMIT = "numbers within ±1.8e\\+308"
STORED = [  # what PostgreSQL cannot hold or compare, or a filter too large to be one
    ({"si\x00de": "east"}, "NUL"),
    ({"side": "ea\x00st"}, "NUL"),
    ({"source": {"$like": "berth-\x00%"}}, "NUL"),
    ({"side": {"$in": ["east", "we\x00st"]}}, "NUL"),
    ({"\ud800": "east"}, "lone surrogate"),
    ({"side": {"$ne": "\udfff"}}, "lone surrogate"),
    ({"source": {"$ilike": "%\ud800%"}}, "lone surrogate"),
    ({"surveyed": {"$between": ["2026", "\ud800"]}}, "lone surrogate"),
    ({"berth": {"$gt": 10**400}}, NUMBER_LIMIT),
    ({"berth": 10**400}, NUMBER_LIMIT),
    ({"berth": {"$in": [1, -(10**400)]}}, NUMBER_LIMIT),
    ({"berth": {"$between": [0, 10**400]}}, NUMBER_LIMIT),
    (_nested(1_100, {"side": "east"}), f"more than {MAX_FILTER_DEPTH} levels deep"),
    ({"berth": {"$in": list(range(200_000))}}, f"at most {MAX_FILTER_VALUES:,}"),
    (
        {"$or": [{"berth": {"$in": list(range(600))}}, {"berth": {"$nin": list(range(600))}}]},
        f"at most {MAX_FILTER_VALUES:,}",
    ),
    ({"x" * 100_000: {"$regex": "y" * 100_000}}, "unknown operator"),
]


@pytest.mark.parametrize(("where", "message"), STORED)
async def test_a_filter_postgres_cannot_hold_is_refused_in_one_line_before_any_database_work(
    berths: KnowledgeBase, where: dict[str, Any], message: str
) -> None:
    with pytest.raises(FilterError, match=message) as refused:
        check_filter(where)
    text = str(refused.value)
    assert "\n" not in text and len(text) < 300, text
    with pytest.raises(FilterError, match=message):
        berths.search("berth", collection="port", filter=where)
    # a knowledge base whose server cannot be reached: the filter is refused before any connection
    nowhere = KnowledgeBase("postgresql://arcana@127.0.0.1:9/nowhere")
    try:
        with pytest.raises(FilterError, match=message):
            nowhere.search("berth", filter=where)
        with pytest.raises(FilterError, match=message):
            await nowhere.asearch("berth", filter=where)
    finally:
        nowhere.close()


def test_a_filter_at_its_limits_is_answered(berths: KnowledgeBase) -> None:
    deepest = _nested(MAX_FILTER_DEPTH - 1, {"side": "east"})
    assert _berths(berths, deepest, collection="port") == [1, 3, 5]
    many = {"berth": {"$in": [0, 5, *range(100, 100 + MAX_FILTER_VALUES - 2)]}}
    assert _berths(berths, many, collection="port") == [0, 5]
    assert _berths(berths, {"berth": {"$lt": 10**300}}, collection="port") == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("where", "message"),
    [*STORED, ({"berth": {"$lt": 10**20}}, "integer beyond 64 bits")],  # a checkpoint holds 64
)
async def test_a_run_refuses_a_bad_filter_before_the_model_is_called(
    where: dict[str, Any], message: str
) -> None:
    nowhere = KnowledgeBase("postgresql://arcana@127.0.0.1:9/nowhere")
    model = scripted(search("berth"), answer("x"))
    options: dict[str, Any] = {
        "controller_llm": model,
        "search_fn": nowhere.search,
        "search_opts": {"filter": where},
        "checkpointer": InMemorySaver(),
    }
    try:
        for call in (
            lambda: run("Which berths are deep?", **options),
            lambda: check_run_options(**options),
            lambda: LoopContext(search_opts={"filter": where}),  # a server client's context
        ):
            with pytest.raises(ValueError, match=message):
                call()
        with pytest.raises(ValueError, match=message):
            await arun("Which berths are deep?", **options)
    finally:
        nowhere.close()
    assert model.calls == []


def test_a_run_refuses_search_options_nested_too_deep_before_the_model_is_called() -> None:
    model = scripted(answer("x"))
    deep: list[Any] = []
    for _ in range(1_100):
        deep = [deep]
    with pytest.raises(ValueError, match="search_opts is nested more than 100 levels deep"):
        run(
            "Which berths are deep?",
            controller_llm=model,
            search_opts={"mode": "hybrid", "x": deep},
        )
    assert model.calls == []


@pytest.mark.parametrize(("where", "message"), STORED)
def test_a_filter_the_controller_sends_is_never_used_and_never_ends_the_run(
    berths: KnowledgeBase, where: dict[str, Any], message: str
) -> None:
    # the search tool offers no filter: a model's one is ignored or, too large to keep, refused
    # as a tool error; either way the run's own filter and lock hold, and a checkpoint is written
    model = scripted(search("berth ships metres quay", filter=where), answer("x"))
    result = run(
        "Which berths are deep?",
        collection="port",
        controller_llm=model,
        search_fn=berths.search,
        search_opts={"filter": {"side": "east"}},
        checkpointer=InMemorySaver(),
        thread_id=f"filter-{uuid.uuid4().hex[:8]}",
    )
    assert result.terminated_by == "answered" and len(model.calls) == 2
    assert {c["metadata"]["side"] for c in result.chunks} <= {"east"}
    (entry,) = result.tool_history[:1]
    assert entry.get("ignored_args") == ["filter"] or entry["summary"].startswith("Tool error:")


def test_values_are_parameters_never_sql(berths: KnowledgeBase) -> None:
    hostile = "x'); DROP TABLE kb_chunks; --"
    for where in ({hostile: 1}, {"side": hostile}, {"side": {"$like": hostile}}):
        assert _berths(berths, where, collection="port") == []
    assert len(_berths(berths, None, collection="port")) == 6  # the table is still there


@pytest.mark.postgres
def test_the_cli_asks_with_where_conditions(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    name = f"cli-where-{uuid.uuid4().hex[:8]}"
    base = KnowledgeBase(pg_url)
    secret = f"cli-where-secret-{uuid.uuid4().hex[:8]}"
    try:
        base.ingest(
            "The secret quay crane lifts 90 tonnes.",
            collection=secret,
            name="secret-quay",
            metadata={"side": "north", "classified": True},
        )
        for side in ("east", "west"):
            base.ingest(
                f"The {side} quay crane lifts {40 if side == 'east' else 70} tonnes.",
                collection=name,
                name=f"{side}-quay",
                metadata={"side": side},
            )
        runner = CliRunner()
        done = runner.invoke(
            app,
            [
                "ask",
                "How much does the quay crane lift?",
                "-c",
                name,
                "--where",
                "side=west",
                "--checkpointer",
                "none",
                "--json",
            ],
        )
        assert done.exit_code == 0, done.output
        assert "70 tonnes" in done.stdout and "40 tonnes" not in done.stdout
        for where in ("side=north", "classified=true"):  # matches nothing; another's metadata
            empty = runner.invoke(
                app,
                ["ask", "How much does the quay crane lift?", "-c", name, "--where", where]
                + ["--checkpointer", "none", "--json"],
            )
            assert "tonnes" not in empty.stdout, empty.output
            assert json.loads(empty.stdout)["chunks"] == [], empty.stdout
        bad = runner.invoke(app, ["ask", "crane?", "-c", name, "--where", "side"])
        assert bad.exit_code == 1 and "--where takes KEY=VALUE" in bad.stderr
    finally:
        base.delete_collection(name)
        base.delete_collection(secret)
        base.close()
