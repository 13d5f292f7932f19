"""Grounding: contract, judge parsing, attribution, the local heuristic, and the graph node."""

from __future__ import annotations

import logging
import time

import pytest
from langchain_core.messages import AIMessage

from arcana_loop.core.context import LoopContext
from arcana_loop.core.sources import without_citations
from arcana_loop.graph import build_graph, ground, make_deps, run
from arcana_loop.grounding.apply import ground_answer
from arcana_loop.grounding.attribution import search_index
from arcana_loop.grounding.llm_judge import LLMJudgeGrounder, parse_judge_json
from arcana_loop.grounding.local import HeuristicSentenceGrounder
from arcana_loop.grounding.resolve import resolve_grounder
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.grounding.types import GroundingError
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer, chunk, search

CHUNKS = [
    chunk(
        "c1",
        "asyncio.wait_for runs a coroutine with a timeout and cancels it when the timeout expires.",
        0.9,
    ),
    chunk("c2", "json.loads parses a JSON document from a string into Python objects.", 0.8),
]
HISTORY = [
    {
        "tool": "search",
        "args": {"query": "first"},
        "iteration": 0,
        "summary": "",
        "returned_chunk_ids": ["c1"],
    },
    {
        "tool": "search",
        "args": {"query": "second"},
        "iteration": 2,
        "summary": "",
        "returned_chunk_ids": ["c1", "c2"],
    },
]


class Recorder:
    def __init__(self, result=None, error=None, delay=0.0):
        self.result, self.error, self.delay, self.calls = result, error, delay, []

    def ground(self, answer, chunks, *, question, **opts):
        self.calls.append((answer, question))
        time.sleep(self.delay)
        if self.error:
            raise self.error
        return self.result


GOOD = {
    "score": 0.5,
    "faithful_spans": [
        {
            "text": "A",
            "start": 0,
            "end": 1,
            "score": 1.0,
            "verdict": "supported",
            "sources": [{"chunk_id": "c2", "score": 1.0}],
        }
    ],
    "hallucinated_spans": [],
    "claims": [
        {
            "text": "A",
            "verdict": "supported",
            "start": 0,
            "end": 1,
            "sources": [{"chunk_id": "zz", "score": 1.0}],
        }
    ],
}


@pytest.mark.parametrize(
    ("answer_text", "chunks", "error"),
    [("A", CHUNKS, "boom"), (None, CHUNKS, None), ("A", [], None)],
)
def test_short_circuits_never_call_the_grounder(answer_text, chunks, error):
    grounder = Recorder(GOOD)
    assert (
        ground_answer(
            question="q",
            answer=answer_text,
            chunks=chunks,
            tool_history=HISTORY,
            error=error,
            grounder=grounder,
        )
        is None
    )
    assert grounder.calls == []


def test_attribution_uses_the_earliest_search_and_none_for_unknown_ids():
    result = ground_answer(
        question="q", answer="A.", chunks=CHUNKS, tool_history=HISTORY, grounder=Recorder(GOOD)
    )
    source = result["faithful_spans"][0]["sources"][0]
    assert (source["search_iteration"], source["search_query"]) == (2, "second")
    unknown = result["claims"][0]["sources"][0]
    assert unknown["search_iteration"] is None and unknown["search_query"] is None
    assert search_index(HISTORY)["c1"] == (0, "first")


@pytest.mark.parametrize(
    "grounder",
    [
        Recorder(error=RuntimeError("model failed")),
        Recorder({"score": 7}),
        Recorder("garbage"),
        Recorder(GOOD, delay=0.5),
    ],
)
def test_failing_grounders_leave_none_and_log(grounder, caplog):
    with caplog.at_level(logging.WARNING, logger="arcana_loop.grounding"):
        out = ground_answer(
            question="q",
            answer="A.",
            chunks=CHUNKS,
            tool_history=HISTORY,
            grounder=grounder,
            timeout=0.2,
        )
    assert out is None and caplog.records
    # one logger hierarchy: a level set on the package's logger reaches grounding's
    assert all(r.name.startswith("arcana_loop.") for r in caplog.records)


@pytest.mark.parametrize(
    ("grounder", "said"),
    [
        (Recorder(error=RuntimeError("model failed")), "failed: RuntimeError: model failed"),
        (Recorder({"score": 7}), "returned an unusable result"),
    ],
)
def test_a_failing_grounder_is_said_in_the_runs_error_and_the_answer_stands(grounder, said):
    result = run(
        "Q?",
        controller_llm=ScriptedChatModel(responses=[search("q"), answer("A [c1].")]),
        search_fn=ScriptedSearch([CHUNKS]),
        grounder=grounder,
    )
    assert result.terminated_by == "answered" and result.answer == "A [c1]."
    assert result.grounding is None
    assert said in result.error and result.error.endswith("the answer stands, ungrounded")


@pytest.mark.parametrize("context", [{"grounder": "llm_judge"}, {"grounder": "bogus"}])
def test_a_grounder_that_could_not_run_is_refused_before_the_first_turn(context):
    # a served run's options come as its context; the offline controller is no judge
    model = ScriptedChatModel(responses=[answer("never")])
    found = ScriptedSearch([CHUNKS])
    compiled = build_graph(make_deps(controller_llm="offline", search_fn=found)).compile()
    with pytest.raises(ValueError, match="needs a model to judge with|unknown grounder 'bogus'"):
        compiled.invoke({"question": "Q?"}, context=LoopContext(**context))
    assert found.calls == [] and model.calls == []
    with pytest.raises(ValueError, match="needs a model to judge with|unknown grounder 'bogus'"):
        run("Q?", controller_llm="offline", search_fn=found, **context)
    assert found.calls == []


def test_async_grounders_are_awaited_and_timeouts_bounded():
    import asyncio
    import threading

    cancelled = threading.Event()

    class Slow:
        async def aground(self, answer, chunks, *, question, **opts):
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return GOOD

    class Quick:
        async def aground(self, answer, chunks, *, question, **opts):
            return GOOD

    assert (
        ground_answer(
            question="q",
            answer="A",
            chunks=CHUNKS,
            tool_history=HISTORY,
            grounder=Slow(),
            timeout=0.1,
        )
        is None
    )
    assert cancelled.wait(1), "a timed-out async grounder is cancelled, not left running"
    assert (
        ground_answer(
            question="q", answer="A", chunks=CHUNKS, tool_history=HISTORY, grounder=Quick()
        )["score"]
        == 0.5
    )


def test_events_are_emitted_start_and_stop():
    events = []
    ground_answer(
        question="q",
        answer="A",
        chunks=CHUNKS,
        tool_history=HISTORY,
        grounder=Recorder(GOOD),
        emit=events.append,
    )
    assert [e["event"] for e in events] == ["ground_start", "ground_stop"]
    assert (
        events[1]["score"] == 0.5
        and events[1]["faithful_span_count"] == 1
        and events[1]["hallucinated_span_count"] == 0
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Sure! {"claims": []} hope that helps', {"claims": []}),
        (
            '{"claims": [{"text": "a } b {", "verdict": "supported"}]}',
            {"claims": [{"text": "a } b {", "verdict": "supported"}]},
        ),
        ('{"claims": [{"text": "say \\"}\\" now"}]}', {"claims": [{"text": 'say "}" now'}]}),
    ],
)
def test_judge_json_extraction(text, expected):
    assert parse_judge_json(text) == expected


@pytest.mark.parametrize("text", ["no json here", '{"claims": [', "[1, 2]", "{not: json}"])
def test_judge_json_extraction_errors(text):
    with pytest.raises(GroundingError):
        parse_judge_json(text)


def test_llm_judge_verdicts_spans_and_indices_with_non_ascii_text():
    answer_text = "Zoë's café — 東京 opens at nine. It serves naïve tea."
    reply = (
        '{"claims": [{"text": "Zoë\'s café — 東京 opens at nine.", "verdict": "supported", "chunk_indices": [1, 5, "2"]},'
        '{"text": "It serves naïve tea.", "verdict": "contradicted", "chunk_indices": [2]},'
        '{"text": "not in the answer", "verdict": "Supported"}, {"text": "", "verdict": "supported"}]}'
    )
    judge_model = ScriptedChatModel(responses=[AIMessage(content=reply)])
    result = LLMJudgeGrounder(judge_model).ground(answer_text, CHUNKS, question="q")
    assert result.score == pytest.approx(
        2 / 3
    )  # "Supported" is case-folded; the empty claim is dropped
    span = result.faithful_spans[0]
    assert answer_text[span.start : span.end] == span.text
    assert [s.chunk_id for s in span.sources] == ["c1"]
    assert result.hallucinated_spans[0].verdict == "contradicted"
    assert [c.start for c in result.claims][2] is None  # counted, but no span
    assert judge_model.calls[0]["kwargs"] == {"temperature": 0.0, "max_tokens": 2048}


def test_llm_judge_empty_answer_and_no_chunks_make_no_call():
    model = ScriptedChatModel(responses=[])
    assert LLMJudgeGrounder(model).ground("  ", CHUNKS, question="q").score == 1.0
    assert LLMJudgeGrounder(model).ground("x", [], question="q").score == 0.0
    assert model.calls == []


def test_sentence_offsets_are_exact():
    text = "  Première phrase. Deuxième? 3.5 stays whole\n- a bullet"
    for sentence, start, end in split_sentences(text):
        assert text[start:end] == sentence
    assert [s for s, _, _ in split_sentences(text)] == [
        "Première phrase.",
        "Deuxième?",
        "3.5 stays whole",
        "- a bullet",
    ]


def test_local_grounder_separates_supported_from_invented():
    grounder = HeuristicSentenceGrounder()
    good = grounder.ground(
        "asyncio.wait_for runs a coroutine with a timeout.", CHUNKS, question="q"
    )
    bad = grounder.ground(
        "The moon landing happened in 1969 with Apollo eleven.", CHUNKS, question="q"
    )
    assert good.score >= grounder.threshold > bad.score
    assert good.faithful_spans[0].sources[0].chunk_id == "c1"
    assert bad.hallucinated_spans


def test_local_grounder_reads_a_claim_without_its_citations():
    # real chunk ids are 32 hex digits: counted as words, they made a sentence quoted
    # word for word from its chunk look a third unsupported
    cited = "62ca57702228a85e0f0b97e7936a5134"
    chunks = [
        chunk(
            cited, "Use rollback.sh to return to the last release. It keeps the database as it is."
        ),
        chunk("a2bfe78f5dcdb9e2eefc4cbdacaa1045", "Run deploy.sh prod from the release branch."),
    ]
    answer_text = (
        f"It keeps the database as it is [{cited}]. It also restarts the mail relay [{cited}]."
    )
    result = HeuristicSentenceGrounder().ground(answer_text, chunks, question="q")
    quoted, invented = result.claims
    assert quoted.verdict == "supported" and invented.verdict == "unsupported"
    # the claims are still the answer as written, ids and offsets included
    assert (
        answer_text[quoted.start : quoted.end]
        == quoted.text
        == f"It keeps the database as it is [{cited}]."
    )
    assert quoted.sources[0].chunk_id == cited


def test_without_citations_leaves_out_only_the_ids_given():
    text = "Call wait_for [c1, c2] or see c2; list[int] stays [c9]."
    assert without_citations(text, ["c1", "c2"]) == "Call wait_for or see; list[int] stays [c9]."
    assert without_citations(text, []) == text


def test_resolve_grounder_by_object_function_and_name():
    assert isinstance(resolve_grounder("local"), HeuristicSentenceGrounder)
    assert isinstance(resolve_grounder("llm_judge"), LLMJudgeGrounder)
    fn = resolve_grounder(lambda answer, chunks, *, question, **o: GOOD)
    assert fn.ground("a", [], question="q") == GOOD
    with pytest.raises(ValueError, match="local"):
        resolve_grounder("nope")


def test_node_and_function_agree():
    def loop():
        return run(
            "How?",
            controller_llm=ScriptedChatModel(
                responses=[search("q"), answer("asyncio.wait_for runs a coroutine with a timeout.")]
            ),
            search_fn=ScriptedSearch([CHUNKS]),
            grounder="local",
        )

    in_graph = loop()
    assert in_graph.grounding is not None
    later = ground(loop(), grounder="local")
    assert later.grounding == in_graph.grounding


def test_grounding_never_loses_the_answer():
    result = run(
        "How?",
        controller_llm=ScriptedChatModel(responses=[search("q"), answer("draft")]),
        search_fn=ScriptedSearch([CHUNKS]),
        grounder=Recorder(error=RuntimeError("judge down")),
    )
    assert result.answer == "draft" and result.grounding is None


def test_low_support_sends_the_answer_back_once():
    grounder = Recorder(None)
    scores = iter([0.2, 1.0])

    def judge(answer, chunks, *, question, **opts):
        score = next(scores)
        verdict = "supported" if score == 1.0 else "unsupported"
        return {
            "score": score,
            "claims": [{"text": answer, "verdict": verdict, "start": 0, "end": len(answer)}],
        }

    model = ScriptedChatModel(
        responses=[search("q"), answer("Invented claim."), answer("Supported claim.")]
    )
    result = run(
        "How?",
        controller_llm=model,
        search_fn=ScriptedSearch([CHUNKS]),
        grounder=judge,
        min_support=0.8,
        max_iterations=2,
    )
    assert result.answer == "Supported claim."
    assert result.repair == {
        "ran": True,
        "unsupported_claims": ["Invented claim."],
        "score_before": 0.2,
        "score_after": 1.0,
    }
    assert result.coverage == "supported" and result.terminated_by == "answered"
    assert "Invented claim." in model.calls[2]["messages"][-1].content
    del grounder


def test_ground_stop_event_in_the_graph_stream():
    compiled = build_graph(
        make_deps(
            controller_llm=ScriptedChatModel(responses=[search("q"), answer("a")]),
            search_fn=ScriptedSearch([CHUNKS]),
            grounder="local",
        )
    ).compile()
    kinds = [
        e["event"]
        for e in compiled.stream({"question": "Q?"}, context=LoopContext(), stream_mode="custom")
    ]
    assert kinds[-3:] == ["ground_start", "ground_stop", "loop_stop"]
