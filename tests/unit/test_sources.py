"""An answer's sources as data: in the result and as citation annotations on its message."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from arcana_loop.graph import run
from arcana_loop.graph.sources import cited_sources
from tests.fakes import ScriptedSearch, answer, chunk, scripted, search


def _chunk(chunk_id: str, text: str, **metadata: object) -> dict:
    return {**chunk(chunk_id, text), "metadata": metadata}


CHUNKS = [
    _chunk(
        "c1",
        "Berth seven is twelve metres deep.",
        source="/docs/berths.md",
        section="Berths > Depth",
    ),
    _chunk("c2", "The crane lifts forty tonnes.", source="/docs/report.pdf", page=2, page_end=3),
    _chunk("c3", "Tides turn at six.", source="/docs/tides.md"),
]


def test_the_result_lists_each_cited_chunk_once_in_order_of_first_citation():
    result = run(
        "How deep is berth seven and what can the crane lift?",
        controller_llm=scripted(
            search("berth"), answer("Crane: 40 t [c2]. Berth: 12 m [c1], see [c2].")
        ),
        search_fn=ScriptedSearch([CHUNKS]),
    )
    assert [s["chunk_id"] for s in result.sources] == ["c2", "c1"]  # c3 was found, never cited
    crane, berth = result.sources
    assert (crane["title"], crane["pages"], crane["section"]) == ("report", "2\u20133", None)
    assert (berth["title"], berth["section"], berth["source"]) == (
        "berths",
        "Berths > Depth",
        "/docs/berths.md",
    )
    assert berth["cited_text"] == "Berth seven is twelve metres deep."
    final = result.messages[-1]
    assert isinstance(final, AIMessage) and final.text == result.answer
    (block,) = final.content
    assert isinstance(block, dict)
    spans = [
        (a["extras"]["chunk_id"], a["start_index"], a["end_index"]) for a in block["annotations"]
    ]
    assert [result.answer[s:e] for _, s, e in spans] == ["c2", "c1", "c2"]
    assert [a["title"] for a in block["annotations"]] == ["report", "berths", "report"]
    assert result.to_dict()["sources"] == result.sources  # JSON output carries them


def test_an_answer_citing_nothing_has_no_sources_and_plain_content():
    result = run(
        "Q?",
        controller_llm=scripted(search("x"), answer("No citation here.")),
        search_fn=ScriptedSearch([CHUNKS]),
    )
    assert result.sources == [] and result.messages[-1].content == "No citation here."


def test_an_id_that_is_not_a_gathered_chunk_is_no_source():
    assert cited_sources("see [zz9]", CHUNKS) == []
    assert cited_sources(None, CHUNKS) == []


def test_a_follow_up_sends_the_earlier_answer_as_plain_text():
    from langgraph.checkpoint.memory import InMemorySaver

    model = scripted(search("berth"), answer("12 m [c1]."), answer("Yes."))
    saver = InMemorySaver()
    first = run(
        "How deep?", controller_llm=model, search_fn=ScriptedSearch([CHUNKS]), checkpointer=saver
    )
    run(
        "Really?",
        controller_llm=model,
        search_fn=ScriptedSearch([CHUNKS]),
        checkpointer=saver,
        thread_id=first.thread_id,
    )
    earlier = [
        m for m in model.calls[-1]["messages"] if isinstance(m, AIMessage) and m.name == "answer"
    ]
    assert earlier and all(isinstance(m.content, str) for m in earlier)
