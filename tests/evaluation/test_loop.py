import pytest
from langchain_core.messages import AIMessage, HumanMessage

from arcana_loop.evaluation.cases import CaseSet
from arcana_loop.evaluation.loop import evaluate_loop, outcome_of, repeated_searches, summarize
from arcana_loop.evaluation.options import OPTION_PAIRS, compare_options, options_table_markdown
from arcana_loop.evaluation.tokens import (
    EstimatingOfflineController,
    estimate_tokens,
    message_tokens,
)
from arcana_loop.graph.run import LoopResult
from tests.evaluation.conftest import DOCS, tiny_cases
from tests.fakes import ScriptedChatModel, ScriptedSearch, chunk


def search_docs(query, **kwargs):
    words = set(query.lower().replace("?", "").split())
    hits = [
        chunk(s, t, metadata={"source": s})
        for s, t in DOCS.items()
        if words & set(t.lower().split())
    ]
    return hits[:3]


def result(terminated_by, answer="x", history=()):
    return LoopResult(
        question="Q",
        answer=answer,
        terminated_by=terminated_by,
        iterations=1,
        tool_history=list(history),
        chunks=[],
    )


def test_outcome_of_a_run():
    assert outcome_of(result("answered")) == "answered"
    assert outcome_of(result("max_iterations", answer="synthesised")) == "answered"
    assert outcome_of(result("max_iterations", answer=None)) == "error"
    assert outcome_of(result("gave_up")) == "gave_up"
    assert outcome_of(result("error", answer=None)) == "error"


def event(query, collection=None, duplicate=False):
    entry = {
        "tool": "search",
        "args": {"query": query, **({"collection": collection} if collection else {})},
        "iteration": 0,
        "summary": "",
        "returned_chunk_ids": [],
    }
    return {**entry, "duplicate_of": 0} if duplicate else entry


def test_repeated_searches_are_counted_whether_or_not_the_guard_caught_them():
    history = [
        event("asyncio timeout"),
        event("Asyncio  timeout!"),
        event("asyncio timeout", collection="other"),
        event("json"),
        event("asyncio timeout", duplicate=True),
    ]
    assert repeated_searches(history) == 2
    assert repeated_searches([{"tool": "answer", "args": {"text": "x"}}]) == 0


def test_summarize_hand_made_rows():
    def row(kind, expected, outcome, correctness, searches, repeated, grounding, tokens):
        return {
            "kind": kind,
            "expected": expected,
            "outcome": outcome,
            "outcome_ok": outcome == expected,
            "correctness": correctness,
            "searches": searches,
            "repeated_searches": repeated,
            "duplicate_searches": repeated,
            "searches_sent": searches - repeated,
            "grounding_score": grounding,
            "iterations": searches + 1,
            "tokens": tokens,
            "controller_input_tokens": tokens,
            "latency_s": 0.1,
            "repaired": False,
            "terminated_by": outcome,
        }

    summary = summarize(
        [
            row("single", "answered", "answered", 1.0, 2, 1, 0.8, 100),
            row("single", "answered", "gave_up", 0.0, 2, 0, 0.1, 300),
            row("unanswerable", "gave_up", "gave_up", None, 1, 0, 0.2, 200),
            row("unanswerable", "gave_up", "answered", None, 1, 0, 0.4, None),
        ]
    )
    assert summary["answer_correctness"] == 0.5
    assert summary["outcome_accuracy"] == 0.5
    assert (
        summary["answered_when_answerable"] == 0.5 and summary["gave_up_when_unanswerable"] == 0.5
    )
    assert summary["grounding_score"] == pytest.approx(0.6)  # answered rows only
    assert summary["duplicate_search_rate"] == pytest.approx(1 / 6)
    assert summary["searches_per_question"] == 1.5 and summary["searches_sent_per_question"] == 1.25
    assert summary["tokens_per_question"] == 200  # the row without tokens is left out
    assert summary["terminated_by"] == {"answered": 2, "gave_up": 2}
    assert summary["by_kind"]["single"] == {
        "cases": 2,
        "outcome_accuracy": 0.5,
        "answer_correctness": 0.5,
        "right": 0.5,
    }
    assert summary["distributions"]["searches"]["max"] == 2


def test_token_estimates():
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2
    message = AIMessage(
        content="abcd",
        tool_calls=[{"name": "search", "args": {"query": "q"}, "id": "1", "type": "tool_call"}],
    )
    assert message_tokens(message) > message_tokens(AIMessage(content="abcd")) == 1
    model = EstimatingOfflineController().bind_tools(
        [{"type": "function", "function": {"name": "search"}}]
    )
    reply = model.invoke([HumanMessage(content="How do I time out a coroutine?")])
    assert reply.tool_calls[0]["name"] == "search"
    usage = reply.usage_metadata
    assert usage["input_tokens"] > estimate_tokens(
        "How do I time out a coroutine?"
    )  # the tool schemas count too
    assert (
        usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        and usage["output_tokens"] > 0
    )


def test_offline_loop_evaluation_with_a_scripted_search():
    search = ScriptedSearch(search_docs)
    report = evaluate_loop(tiny_cases(), search_fn=search, collection=None)
    rows = {r["id"]: r for r in report["per_case"]}
    assert (
        report["kind"] == "loop"
        and report["controller"] == "offline-estimated"
        and report["tokens_estimated"]
    )
    assert rows["timeout"]["outcome"] == "answered" and rows["timeout"]["correctness"] == 1.0
    assert (
        rows["timeout"]["correctness_method"] == "key_facts"
        and "wait_for" in rows["timeout"]["answer"]
    )
    assert (
        rows["none"]["expected"] == "gave_up"
        and rows["none"]["outcome_ok"]
        and rows["none"]["correctness"] is None
    )
    for row in rows.values():
        assert row["searches"] >= 1 and row["controller_input_tokens"] > 0 and row["latency_s"] > 0
        assert (row["grounding_score"] is not None) == (
            row["outcome"] == "answered"
        )  # a give-up is not grounded
    assert sum(report["summary"]["terminated_by"].values()) == 4
    assert search.calls  # the loop used the given search function


def test_the_judge_scores_answers_and_a_junk_reply_falls_back_to_key_facts():
    judge = ScriptedChatModel(
        responses=['{"score": 0.25, "reason": "half right"}', "I think it is fine.", '{"score": 7}']
    )
    cases = CaseSet([c for c in tiny_cases().cases if c.id != "json"])
    report = evaluate_loop(cases, search_fn=search_docs, judge_model=judge)
    rows = {r["id"]: r for r in report["per_case"]}
    assert (
        rows["timeout"]["correctness"] == 0.25 and rows["timeout"]["correctness_method"] == "judge"
    )
    assert rows["timeout"]["judge_reason"] == "half right"
    assert (
        rows["rmtree"]["correctness_method"] == "key_facts"
        and "no JSON object" in rows["rmtree"]["judge_error"]
    )
    assert len(judge.calls) == 2  # never for the case expected to give up
    prompt = judge.calls[0]["messages"][0].content
    assert (
        "<question>How do I run a coroutine with a timeout?</question>" in prompt
        and "<key_facts>wait_for</key_facts>" in prompt
    )
    assert report["judge"] == "ScriptedChatModel"


def test_a_failing_controller_is_recorded_as_an_error_and_the_set_goes_on():
    def broken(messages, tools, opts):
        raise RuntimeError("provider down")

    report = evaluate_loop(tiny_cases(), search_fn=search_docs, controller=broken)
    assert report["summary"]["errors"] == 4 and report["summary"]["answer_correctness"] == 0.0
    assert all("provider down" in (r["error"] or "") for r in report["per_case"])
    assert report["controller"] == "broken" and not report["tokens_estimated"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"bogus": 1}, TypeError),
        ({"max_parallel_searches": 0}, ValueError),
        ({"duplicate_guard": "yes"}, TypeError),
    ],
)
def test_bad_options_fail_before_any_case_runs(options, error):
    search = ScriptedSearch(search_docs)
    with pytest.raises(error):
        evaluate_loop(tiny_cases(), search_fn=search, options=options)
    assert search.calls == []


def test_options_are_passed_to_every_run():
    with_ledger = evaluate_loop(tiny_cases(), search_fn=search_docs)
    without = evaluate_loop(tiny_cases(), search_fn=search_docs, options={"budget_ledger": False})
    assert without["options"] == {"budget_ledger": False}
    for a, b in zip(with_ledger["per_case"], without["per_case"], strict=True):
        assert (
            b["controller_input_tokens"] < a["controller_input_tokens"]
        )  # the ledger is text sent every turn


@pytest.mark.postgres
def test_loop_evaluation_end_to_end_on_the_knowledge_base(tiny_kb):
    report = evaluate_loop(tiny_cases(), search_fn=tiny_kb.search)
    rows = {r["id"]: r for r in report["per_case"]}
    assert report["collection"] == "eval-tiny"
    assert rows["timeout"]["outcome"] == "answered" and rows["timeout"]["correctness"] == 1.0
    assert rows["none"]["outcome"] == "gave_up"
    assert report["summary"]["outcome_accuracy"] == sum(r["outcome_ok"] for r in rows.values()) / 4


@pytest.mark.postgres
def test_options_comparison_side_by_side(tiny_kb):
    seen = []
    report = compare_options(tiny_cases(), search_fn=tiny_kb.search, progress=seen.append)
    assert report["kind"] == "options" and len(report["rows"]) == 2 * len(OPTION_PAIRS)
    assert (
        len(report["runs"]) == len(seen) == 6
    )  # the default settings run once, not once per option
    rows = {(r["option"], r["setting"]): r for r in report["rows"]}
    assert (
        rows[("budget_ledger", "off")]["controller_input_tokens_per_question"]
        < rows[("budget_ledger", "on")]["controller_input_tokens_per_question"]
    )
    assert rows[("duplicate_guard", "on")] == {
        **rows[("show_chunks_once", "on")],
        "option": "duplicate_guard",
        "setting": "on",
    }
    table = options_table_markdown(report)
    assert table.count("\n") == 1 + len(report["rows"]) and "| min_support | 0.7 |" in table
