"""The page's view of a thread (`ui.evidence.evidence_view`), from real runs with scripted models."""

from __future__ import annotations

import uuid
from typing import Any

from arcana_loop import run
from arcana_loop.ui.evidence import evidence_view, highlight
from tests.fakes import ScriptedSearch, answer, chunk, give_up, scripted, search

GRAIN = chunk(
    "c-grain",
    "Bulk terminal\nThe bulk terminal's silos store 60,000 tonnes of grain.\n"
    "Ships unload grain at 800 tonnes an hour.",
    metadata={"source": "/docs/capacity.pdf", "title": "Capacity Report", "page": 3},
    collection="harbor",
)
YARD = chunk(
    "c-yard",
    "Container terminal\nIts yard holds 9,800 TEU at once on 14 hectares.",
    metadata={"source": "/docs/capacity.pdf", "title": "Capacity Report", "page": 2, "page_end": 3},
    collection="harbor",
)


def _values(result: Any) -> dict[str, Any]:
    """A run's result as the server's state values (messages as JSON dicts)."""
    return result.to_dict(messages=True)  # type: ignore[no-any-return]


def test_citations_are_numbered_in_the_text_and_open_the_supporting_sentence() -> None:
    text = "The silos store 60,000 tonnes of grain [c-grain]. The yard holds 9,800 TEU [c-yard]."
    result = run(
        "How much grain and how many containers?",
        controller_llm=scripted(search("grain silos"), search("container yard"), answer(text)),
        search_fn=ScriptedSearch([[GRAIN], [YARD, GRAIN]]),
    )
    view = evidence_view(_values(result))

    assert view["terminated_by"] == "answered"
    assert view["answer"] == [
        {"text": "The silos store 60,000 tonnes of grain "},
        {"cite": 1, "chunk_id": "c-grain"},
        {"text": ". The yard holds 9,800 TEU "},
        {"cite": 2, "chunk_id": "c-yard"},
        {"text": "."},
    ]
    grain, yard = view["citations"]
    start, end = grain["highlight"]
    assert grain["text"][start:end] == "The bulk terminal's silos store 60,000 tonnes of grain."
    assert (grain["title"], grain["source"], grain["pages"]) == (
        "Capacity Report",
        "capacity.pdf",  # a machine path is shown relative to its folder (core.sources)
        "3",
    )
    assert grain["found_by"] == {"turn": 1, "query": "grain silos"}  # found again on turn 2
    assert yard["found_by"] == {"turn": 2, "query": "container yard"}
    assert yard["pages"] == "2\u20133"
    assert yard["claim"] == "The yard holds 9,800 TEU."
    assert [s["tool"] for s in view["steps"]] == ["search", "search", "answer"]
    assert [s["chunks"] for s in view["steps"]] == [1, 2, 0]
    assert view["totals"]["searches"] == 2 and view["totals"]["chunks"] == 2


def test_claims_carry_their_verdict_citations_and_first_search() -> None:
    text = "The silos store 60,000 tonnes of grain [c-grain]. Ships sail to Mars daily."
    result = run(
        "How much grain?",
        controller_llm=scripted(search("grain silos"), answer(text)),
        search_fn=ScriptedSearch([[GRAIN]]),
        grounder="local",
    )
    claims = evidence_view(_values(result))["claims"]
    assert [c["verdict"] for c in claims] == ["supported", "unsupported"]
    assert claims[0]["text"] == "The silos store 60,000 tonnes of grain."
    (evidence,) = claims[0]["evidence"]
    start, end = evidence["highlight"]
    assert evidence["n"] == 1
    assert GRAIN["text"][start:end] == "The bulk terminal's silos store 60,000 tonnes of grain."
    assert claims[0]["found_by"] == {"turn": 1, "query": "grain silos"}
    # an unsupported claim shows the closest sentence of the passage the grounder compared it with
    (compared,) = claims[1]["evidence"]
    start, end = compared["highlight"]
    assert GRAIN["text"][start:end] == "Ships unload grain at 800 tonnes an hour."


def test_earlier_questions_keep_their_numbered_citations_on_a_thread() -> None:
    thread = str(uuid.uuid4())
    controller = scripted(
        search("grain"),
        answer("The silos store 60,000 tonnes of grain [c-grain]."),
        search("yard"),
        answer("The yard holds 9,800 TEU [c-yard]."),
    )
    options: dict[str, Any] = {
        "controller_llm": controller,
        "search_fn": ScriptedSearch([[GRAIN], [YARD]]),
        "checkpointer": "memory",
        "thread_id": thread,
    }
    assert run("How much grain?", **options).thread_id == thread
    view = evidence_view(_values(run("And the yard?", **options)))

    assert view["question"] == "And the yard?"
    (earlier,) = view["earlier"]
    assert earlier["question"] == "How much grain?"
    assert earlier["answer"][1] == {"cite": 1, "chunk_id": "c-grain"}
    (cited,) = earlier["citations"]
    # an earlier question's chunks are gone from the state: its annotation's start of the text
    assert cited["partial"] and cited["title"] == "Capacity Report" and cited["pages"] == "3"
    assert cited["text"].startswith("Bulk terminal")
    assert [c["chunk_id"] for c in view["citations"]] == ["c-yard"]


def test_a_give_up_shows_its_reason_and_no_citations() -> None:
    result = run(
        "How many cranes?",
        controller_llm=scripted(search("cranes"), give_up("nothing about cranes [c-grain]")),
        search_fn=ScriptedSearch([[GRAIN]]),
    )
    view = evidence_view(_values(result))
    assert view["terminated_by"] == "gave_up"
    assert "nothing about cranes" in "".join(p.get("text", "") for p in view["answer"])
    assert view["claims"] == []


def test_an_answer_without_annotations_is_cited_by_the_ids_in_its_text() -> None:
    values = {
        "question": "How much grain?",
        "answer": "60,000 tonnes [c-grain].",
        "terminated_by": "answered",
        "chunks": [GRAIN],
        "messages": [
            {"type": "human", "content": "How much grain?"},
            {"type": "ai", "name": "answer", "content": "60,000 tonnes [c-grain]."},
        ],
    }
    view = evidence_view(values)
    assert view["answer"][1] == {"cite": 1, "chunk_id": "c-grain"}
    assert view["citations"][0]["found_by"] is None  # no tool history sent


def test_highlight_picks_the_sentence_or_line_sharing_most_words() -> None:
    passage = "Container terminal\nThe terminal handled 412,000 TEU.\nIts yard holds 9,800 TEU."
    start, end = highlight("The terminal handled 412,000 TEU [x].", passage) or (0, 0)
    assert passage[start:end] == "The terminal handled 412,000 TEU."  # not its heading line
    assert highlight("Unrelated words entirely", passage) is None
    wrapped = (
        "Returns the result. When a timeout occurs,\nit cancels the task and raises TimeoutError."
    )
    start, end = highlight("It cancels the task and raises TimeoutError.", wrapped) or (0, 0)
    assert wrapped[start:end].startswith(
        "When a timeout occurs,\nit cancels"
    )  # one sentence, wrapped
    # an extracted answer leads with the section's title: its heading is still no evidence
    keys = "## Rotating session keys and refresh tokens safely\n\nKeys expire after 30 minutes."
    claim = "Rotating session keys and refresh tokens safely: Keys expire after 30 minutes [x]."
    start, end = highlight(claim, keys) or (0, 0)
    assert keys[start:end] == "Keys expire after 30 minutes."


def test_ids_in_one_bracket_become_numbers_side_by_side() -> None:
    result = run(
        "How much grain and how many containers?",
        controller_llm=scripted(search("terminals"), answer("Both terminals [c-grain, c-yard].")),
        search_fn=ScriptedSearch([[GRAIN, YARD]]),
    )
    view = evidence_view(_values(result))
    assert view["answer"] == [
        {"text": "Both terminals "},
        {"cite": 1, "chunk_id": "c-grain"},
        {"cite": 2, "chunk_id": "c-yard"},
        {"text": "."},
    ]
    assert [c["claim"] for c in view["citations"]] == ["Both terminals."] * 2


def test_a_claim_is_backed_by_its_own_citations_and_the_best_scoring_source() -> None:
    # ids long enough that the numbers people read move every offset after the first
    grain, yard = {**GRAIN, "id": "c-grain-" + "0" * 24}, {**YARD, "id": "c-yard-" + "0" * 24}
    text = f"Grain goes to silos [{grain['id']}]. Containers go to the yard [{yard['id']}]."
    result = run(
        "Where do things go?",
        controller_llm=scripted(search("terminals"), answer(text)),
        search_fn=ScriptedSearch([[grain, yard]]),
    )
    values = _values(result)
    first = {"chunk_id": grain["id"], "score": 0.9, "search_iteration": 0}
    weak = {"chunk_id": yard["id"], "score": 0.2, "search_iteration": 0}
    cut = text.index(" Containers")
    values["grounding"] = {
        "score": 1.0,
        "claims": [
            {
                "text": text[:cut],
                "verdict": "supported",
                "start": 0,
                "end": cut,
                "sources": [weak, first],
            },
            {
                "text": text[cut + 1 :],
                "verdict": "supported",
                "start": cut + 1,
                "end": len(text),
                "sources": [first, weak],
            },
        ],
    }
    claims = evidence_view(values)["claims"]
    assert [e["n"] for e in claims[0]["evidence"]] == [1]  # the weak overlap is left out
    assert [e["n"] for e in claims[1]["evidence"]] == [1, 2]  # its own citation, and the best


def test_a_follow_up_whose_earlier_evidence_changed_carries_the_note_to_the_page() -> None:
    result = run(
        "How much grain?",
        controller_llm=scripted(search("grain"), answer("60,000 tonnes [c-grain].")),
        search_fn=ScriptedSearch([[GRAIN]]),
    )
    values = _values(result)
    assert evidence_view(values)["stale_note"] is None
    note = "Earlier evidence has changed: 1 passage of capacity.pdf that changed since."
    values["stale_evidence"] = {"note": note, "changed": [], "deleted": []}
    assert evidence_view(values)["stale_note"] == note
