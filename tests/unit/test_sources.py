"""An answer's sources as data: in the result and as citation annotations on its message."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from arcana_loop.core.sources import (
    EXTRACTED_NOTE,
    answer_text,
    cited_sources,
    render_citations,
    source_place,
)
from arcana_loop.graph import run
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
    # a path relative to the folder the files came from, never the machine's
    assert (berth["title"], berth["section"], berth["source"]) == (
        "berths",
        "Berths > Depth",
        "berths.md",
    )
    assert berth["cited_text"] == "Berth seven is twelve metres deep."
    assert result.answer == "Crane: 40 t [c2]. Berth: 12 m [c1], see [c2]."  # the data keeps ids
    final = result.messages[-1]
    assert isinstance(final, AIMessage)
    assert final.text == "Crane: 40 t [1]. Berth: 12 m [2], see [1]."  # people read numbers
    (block,) = final.content
    assert isinstance(block, dict)
    spans = [
        (a["extras"]["chunk_id"], a["start_index"], a["end_index"]) for a in block["annotations"]
    ]
    assert [(c, final.text[s - 1 : e + 1]) for c, s, e in spans] == [
        ("c2", "[1]"),
        ("c1", "[2]"),
        ("c2", "[1]"),
    ]
    assert [a["title"] for a in block["annotations"]] == ["report", "berths", "report"]
    assert result.to_dict()["sources"] == result.sources  # JSON output carries them
    assert result.readable_answer == (
        "Crane: 40 t [1]. Berth: 12 m [2], see [1].\n\nSources:\n"
        "[1] report.pdf (pages 2\u20133)\n[2] berths.md > Berths > Depth"
    )


def test_a_source_named_under_a_scheme_is_listed_by_its_title_and_section():
    (source,) = cited_sources(
        "[j1]",
        [_chunk("j1", "t", source="pydoc:json#dumps", section="json.dumps", title="json")],
    )
    assert source_place(source) == "json > json.dumps"


def test_a_title_that_opens_the_section_path_is_not_said_twice():
    chunks = [
        _chunk(
            "m1",
            "t",
            source="/docs/guides/deploy.md",
            section="Deploying > Rollback",
            title="Deploying",
        ),
        _chunk("m2", "t", source="/docs/guides/deploy.md", section="Deploying", title="Deploying"),
        _chunk(
            "m3", "t", source="/docs/guides/deploy.md", section="Deployingly", title="Deploying"
        ),
    ]
    places = [source_place(s) for s in cited_sources("[m1] [m2] [m3]", chunks)]
    assert places == [
        "Deploying (deploy.md) > Rollback",
        "Deploying (deploy.md)",
        "Deploying (deploy.md) > Deployingly",
    ]


def test_ids_are_numbered_in_brackets_and_out_of_them_and_only_as_whole_words():
    sources = cited_sources("[c3, c1] then c3; wait_for [wait]", [*CHUNKS, chunk("wait", "w")])
    assert [s["chunk_id"] for s in sources] == ["c3", "c1", "wait"]
    text, spans = render_citations("[c3, c1] then c3; wait_for [wait]", sources)
    assert text == "[1, 2] then [1]; wait_for [3]"
    assert [(text[s:e], i) for s, e, i in spans] == [("1", 0), ("2", 1), ("1", 0), ("3", 2)]


def test_a_served_answer_lists_its_numbered_sources_in_words():
    result = run(
        "How deep is berth seven?",
        controller_llm=scripted(search("berth"), answer("Berth: 12 m [c1].")),
        search_fn=ScriptedSearch([CHUNKS]),
        sources_footer=True,
    )
    answer_block, footer = result.messages[-1].content
    assert answer_block["text"] == "Berth: 12 m [1]."
    assert footer["text"] == "\n\nSources:\n[1] berths.md > Berths > Depth"


def test_paths_are_relative_to_the_folder_their_collection_was_ingested_from():
    found = [
        {**_chunk("g1", "Guide.", source="/srv/site/docs/guides/setup.md"), "collection": "docs"},
        {**_chunk("d1", "Deploy.", source="/srv/site/docs/deploy.md"), "collection": "docs"},
        {**_chunk("n1", "Note.", source="/home/me/notes/n.md"), "collection": "notes"},
        {**_chunk("p1", "Py.", source="pydoc:json"), "collection": "docs"},
    ]
    result = run(
        "Q?",
        controller_llm=scripted(search("x"), answer("[g1] [d1] [n1] [p1]")),
        search_fn=ScriptedSearch([found]),
    )
    assert [s["source"] for s in result.sources] == [
        "guides/setup.md",
        "deploy.md",
        "n.md",
        "pydoc:json",
    ]
    shown = "".join(str(m.content) for m in result.messages) + str(result.to_dict())
    assert "/srv/" not in shown and "/home/" not in shown  # nor in the chunks the model read


def test_how_the_answer_was_made_is_in_the_result():
    written = run(
        "Q?",
        controller_llm=scripted(search("berth"), answer("Berth: 12 m [c1].")),
        search_fn=ScriptedSearch([CHUNKS]),
    )
    assert written.answer_kind == "written"

    def berths(query, collection=None, limit=5, **_):
        return CHUNKS[:1]

    extracted = run("How deep is berth seven?", controller_llm="offline", search_fn=berths)
    assert (
        extracted.answer_kind == "extracted" and extracted.to_dict()["answer_kind"] == "extracted"
    )
    closing = extracted.messages[-1]  # what a chat client shows says so too
    assert closing.text.endswith(EXTRACTED_NOTE) and answer_text(closing.content) != EXTRACTED_NOTE
    assert EXTRACTED_NOTE not in written.messages[-1].text
    given_up = run(
        "Q?", controller_llm="offline", search_fn=lambda query, collection=None, limit=5, **_: []
    )
    assert given_up.terminated_by == "gave_up" and given_up.answer_kind is None


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
