"""A question is sent an earlier question of its thread only when it may read every collection that one could.

On one thread, question 1 is locked to ``secret`` and question 2 to ``public``. Whatever
the loop or a model wrote in question 1 after its question text (search queries and
results, a give-up's reason, a draft, an answer, a synthesis, any tool's result) may
carry the secret's text, so no model call of question 2 (controller, answer model,
synthesis, grounding judge) is sent any of it; a question whose scope holds question 1's
is sent question 1's compacted history as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from arcana_loop.core.context import LoopContext
from arcana_loop.graph import run
from arcana_loop.graph.build import build_graph, make_deps
from arcana_loop.grounding.llm_judge import LLMJudgeGrounder
from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.knowledge.entities import EntitySearchOptions
from arcana_loop.nodes.conversation import OUT_OF_SCOPE_ANSWER, SCOPE_KEY, compact_earlier
from arcana_loop.tools.chunks import COMPACTED_NOTE
from arcana_loop.tools.scoping import normalize_scope
from tests.fakes import ScriptedChatModel, ScriptedSearch, calls, chunk, give_up, search, tool_call
from tests.knowledge.helpers import HashEmbeddings

pytestmark = pytest.mark.reliability

TOKEN = "OCELOT-7731"
FIRST = "What is the service key rotation policy?"
SECOND = "When does the cafeteria open?"
SECRET_TEXT = f"The {TOKEN} service key rotates every 30 days."
SECRET = chunk(
    "s1",
    SECRET_TEXT,
    collection="secret",
    metadata={"source": f"keys/{TOKEN}.md", "section": f"{TOKEN} rotation"},
)
PUBLIC = chunk("p1", "The cafeteria opens at nine.", collection="public")
JUDGED = '{"claims": [{"text": "It opens at nine.", "verdict": "supported", "chunk_indices": [1]}]}'


def _found(query: str, collection: Any = None, **_: Any) -> list[dict[str, Any]]:
    """A search that keeps to its scope: the chunks of the collections asked for (``None``: all)."""
    wanted = {collection} if isinstance(collection, str) else collection
    return [c for c in (SECRET, PUBLIC) if wanted is None or c["collection"] in wanted]


def _lookup(entity: str) -> str:
    return f"{entity}: {SECRET_TEXT} (collection secret)"


LOOKUP = StructuredTool.from_function(
    func=_lookup, name="lookup", description="Look an entity up by name."
)

FIRST_QUESTIONS: dict[str, dict[str, Any]] = {
    "gave_up": {
        "controller": [
            search(f"{TOKEN} rotation policy"),
            give_up(f"Found {TOKEN} but cannot confirm it"),
        ]
    },
    "answered_and_rewritten": {
        "controller": [
            search(f"{TOKEN} rotation policy"),
            calls(
                tool_call("answer", text=f"The {TOKEN} key rotates every 30 days [s1]."),
                text=f"Draft on {TOKEN}.",
            ),
        ],
        "answerer": [f"{TOKEN}: rotated every 30 days [s1]."],
    },
    "plain_text": {
        "controller": [search(f"{TOKEN} rotation policy"), f"{TOKEN} rotates every 30 days."]
    },
    "tool_result": {
        "controller": [
            calls(tool_call("lookup", entity=TOKEN)),
            give_up(f"Found {TOKEN} but cannot confirm it"),
        ],
        "tools": [LOOKUP],
    },
    "synthesized": {
        "controller": [search(f"{TOKEN} rotation policy")],
        "synthesizer": lambda messages, opts: f"From the notes: {TOKEN} rotates every 30 days.",
        "max_iterations": 1,
    },
}


def _ask_first(saver: InMemorySaver, collection: Any, script: dict[str, Any]) -> str:
    options: dict[str, Any] = {
        "controller_llm": ScriptedChatModel(responses=list(script["controller"])),
        "search_fn": ScriptedSearch(_found),
        "checkpointer": saver,
        "collection": collection,
    }
    if "answerer" in script:
        options["answer_llm"] = ScriptedChatModel(responses=list(script["answerer"]))
    for key in ("tools", "synthesizer", "max_iterations"):
        if key in script:
            options[key] = script[key]
    first = run(FIRST, **options)
    assert any(TOKEN in json.dumps(m.model_dump(), default=str) for m in first.messages[1:])
    return first.thread_id


class Second:
    """Question 2's models, each recording what it was sent."""

    def __init__(self) -> None:
        self.controller = ScriptedChatModel(
            responses=[search("cafeteria hours"), calls(tool_call("answer", text="At nine [p1]."))]
        )
        self.answerer = ScriptedChatModel(responses=["It opens at nine [p1]."])
        self.judge = ScriptedChatModel(responses=[JUDGED], repeat_last=True)
        self.synthesized: list[list[BaseMessage]] = []

    def synthesizer(self, messages: list[BaseMessage], opts: dict[str, Any]) -> str:
        self.synthesized.append(list(messages))
        return "It opens at nine [p1]."

    def sent(self) -> list[list[BaseMessage]]:
        """Every request any model of question 2 was sent."""
        models = (self.controller, self.answerer, self.judge)
        return [c["messages"] for m in models for c in m.calls] + self.synthesized


def _ask_second(saver: InMemorySaver, thread_id: str, collection: Any, shape: str) -> Second:
    second = Second()
    options: dict[str, Any] = {"controller_llm": second.controller}
    if shape == "answered":
        options.update(answer_llm=second.answerer, grounder=LLMJudgeGrounder(second.judge))
    else:  # the turn budget runs out after a search: the synthesis writes the answer
        options.update(synthesizer=second.synthesizer, max_iterations=1)
    result = run(
        SECOND,
        search_fn=ScriptedSearch(_found),
        checkpointer=saver,
        thread_id=thread_id,
        collection=collection,
        **options,
    )
    assert result.answer and "nine" in result.answer
    return second


def _everything(message: BaseMessage) -> str:
    """All a model could be sent of a message: content, tool calls, additional kwargs, metadata, artifact."""
    return json.dumps(message.model_dump(), default=str)


@pytest.mark.parametrize("shape", ["answered", "synthesized"])
@pytest.mark.parametrize("first", FIRST_QUESTIONS)
def test_no_model_of_a_question_on_another_collection_is_sent_the_earlier_questions_text(
    first: str, shape: str
) -> None:
    saver = InMemorySaver()
    thread_id = _ask_first(saver, "secret", FIRST_QUESTIONS[first])
    second = _ask_second(saver, thread_id, "public", shape)

    requests = second.sent()
    # controller twice, answer model, judge; or controller once, synthesis
    assert len(requests) == (4 if shape == "answered" else 2)
    for request in requests:
        for message in request:
            assert TOKEN not in _everything(message), (type(message).__name__, _everything(message))
    # question 1 is there as the user asked it, and all after it as one marker
    assert _earlier(second.controller.calls[0]["messages"]) == [
        ("human", FIRST, None),
        ("ai", OUT_OF_SCOPE_ANSWER, None),
    ]


def _earlier(request: list[BaseMessage]) -> list[tuple[str, str, Any]]:
    """What a request holds before question 2's text: type, text, and tool calls' arguments."""
    before = next(
        i for i, m in enumerate(request) if isinstance(m, HumanMessage) and m.text == SECOND
    )
    return [
        (
            m.type,
            m.text,
            [c["args"] for c in m.tool_calls]
            if isinstance(m, AIMessage) and m.tool_calls
            else None,
        )
        for m in request[1:before]
    ]


@pytest.mark.parametrize(
    ("first_scope", "second_scope"),
    [("all", "public"), (["secret", "public"], "public"), ("secret", ["public", "other"])],
)
def test_a_question_is_withheld_whenever_its_scope_is_not_within_the_new_one(
    first_scope: Any, second_scope: Any
) -> None:
    saver = InMemorySaver()
    thread_id = _ask_first(saver, first_scope, FIRST_QUESTIONS["gave_up"])
    second = _ask_second(saver, thread_id, second_scope, "answered")
    assert _earlier(second.controller.calls[0]["messages"]) == [
        ("human", FIRST, None),
        ("ai", OUT_OF_SCOPE_ANSWER, None),
    ]


@pytest.mark.parametrize(
    ("first_scope", "second_scope"),
    [("secret", "secret"), ("secret", "all"), ("secret", ["public", "secret"]), ("all", "all")],
)
def test_a_question_whose_scope_holds_the_earlier_ones_is_sent_its_compacted_history(
    first_scope: Any, second_scope: Any
) -> None:
    saver = InMemorySaver()
    thread_id = _ask_first(saver, first_scope, FIRST_QUESTIONS["gave_up"])
    second = _ask_second(saver, thread_id, second_scope, "answered")

    earlier = _earlier(second.controller.calls[0]["messages"])
    assert [kind for kind, _, _ in earlier] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert earlier[0][1] == FIRST
    assert earlier[1][2] == [{"query": f"{TOKEN} rotation policy"}]
    result = earlier[2][1]  # by chunk id and labels, without the text
    assert COMPACTED_NOTE in result and 'id="s1"' in result and SECRET_TEXT not in result
    assert earlier[3][2] == [{"reason": f"Found {TOKEN} but cannot confirm it"}]
    assert f"Found {TOKEN} but cannot confirm it" in earlier[5][1]


def test_a_search_that_strays_outside_the_scope_withholds_its_question() -> None:
    """A search function that ignores the scope: what came back counts, not only what was asked."""
    saver = InMemorySaver()
    strayed = ScriptedSearch(lambda query, **_: [SECRET, PUBLIC])
    first = run(
        FIRST,
        controller_llm=ScriptedChatModel(
            responses=[search("rotation policy"), calls(tool_call("answer", text=f"{TOKEN} [s1]."))]
        ),
        search_fn=strayed,
        checkpointer=saver,
        collection="public",
    )
    second = _ask_second(saver, first.thread_id, "public", "answered")
    assert _earlier(second.controller.calls[0]["messages"]) == [
        ("human", FIRST, None),
        ("ai", OUT_OF_SCOPE_ANSWER, None),
    ]


def test_each_question_records_the_scope_it_was_asked_under_and_no_model_is_sent_it() -> None:
    controller = ScriptedChatModel(
        responses=[search("policy"), give_up("none"), search("hours"), give_up("none")]
    )
    compiled = build_graph(
        make_deps(controller_llm=controller, search_fn=ScriptedSearch(_found))
    ).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "recorded"}}
    compiled.invoke(
        {"question": FIRST, "collection": ["secret", "public"]}, config, context=LoopContext()
    )
    out = compiled.invoke(
        {
            "messages": [
                HumanMessage(content=SECOND, id="chat-1", additional_kwargs={SCOPE_KEY: "all"})
            ],
            "collection": "public",
        },
        config,
        context=LoopContext(),
    )
    opened = [m for m in out["messages"] if isinstance(m, HumanMessage)]
    assert [(m.text, m.additional_kwargs.get(SCOPE_KEY)) for m in opened] == [
        (FIRST, ["secret", "public"]),
        (SECOND, "public"),  # what the client claimed is replaced by the run's scope
    ]
    ids = [m.id for m in out["messages"]]
    assert ids.count("chat-1") == 1 and ids.index("chat-1") == 6  # in place, after question 1's six
    for call in controller.calls:
        assert not any(SCOPE_KEY in m.additional_kwargs for m in call["messages"])


def test_history_a_client_sent_counts_as_asked_on_every_collection() -> None:
    history = [
        HumanMessage(content="Earlier?", id="h1"),
        AIMessage(content=f"Earlier answer with {TOKEN}.", id="a1"),
        HumanMessage(content=SECOND, id="h2"),
    ]
    narrow = compact_earlier(history, "h2", normalize_scope("public"))
    assert [(m.type, m.text) for m in narrow] == [
        ("human", "Earlier?"),
        ("ai", OUT_OF_SCOPE_ANSWER),
        ("human", SECOND),
    ]
    assert [m.text for m in compact_earlier(history, "h2", normalize_scope("all"))] == [
        "Earlier?",
        f"Earlier answer with {TOKEN}.",
        SECOND,
    ]


class KilledOnce:
    """A search whose first call stops the process (as a kill would); later calls search."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return _found(query, **kwargs)


def test_a_question_interrupted_under_one_scope_is_asked_afresh_under_another() -> None:
    saver = InMemorySaver()
    first = ScriptedChatModel(responses=[search(f"{TOKEN} rotation policy")])
    with pytest.raises(KeyboardInterrupt):
        run(
            FIRST,
            controller_llm=first,
            search_fn=KilledOnce(),
            checkpointer=saver,
            thread_id="t",
            collection="secret",
        )
    again = ScriptedChatModel(responses=[search("rotation policy"), give_up("Nothing public.")])
    result = run(
        FIRST,
        controller_llm=again,
        search_fn=ScriptedSearch(_found),
        checkpointer=saver,
        thread_id="t",
        collection="public",
    )
    assert (result.question_index, result.terminated_by) == (1, "gave_up")
    assert [e["args"].get("query") for e in result.tool_history][:1] == ["rotation policy"]
    for call in again.calls:
        for message in call["messages"]:
            assert TOKEN not in _everything(message)


@pytest.mark.postgres
def test_an_explored_entity_of_another_collection_is_withheld(kb: KnowledgeBase) -> None:
    base = KnowledgeBase(
        kb.url,
        embeddings=HashEmbeddings(),
        schema=kb.schema,
        entity_options=EntitySearchOptions(entity_threshold=0.3),
    )
    try:
        base.ingest(
            f"KestrelVault rotates the {TOKEN} key every 30 days.",
            collection="secret",
            name="s",
            entities=True,
        )
        base.ingest(
            "KestrelVault also names the cafeteria, open at nine.",
            collection="public",
            name="p",
            entities=True,
        )
        saver = InMemorySaver()
        first = run(
            FIRST,
            controller_llm=ScriptedChatModel(
                responses=[
                    calls(tool_call("explore", entity="KestrelVault")),
                    give_up("Cannot confirm it."),
                ]
            ),
            search_fn=base.search,
            checkpointer=saver,
            collection="secret",
            explore_tool=True,
        )
        explored = [m for m in first.messages if isinstance(m, ToolMessage) and m.name == "explore"]
        assert TOKEN in str(explored[0].content)
        second = ScriptedChatModel(
            responses=[calls(tool_call("explore", entity="KestrelVault")), give_up("Nothing more.")]
        )
        run(
            SECOND,
            controller_llm=second,
            search_fn=base.search,
            checkpointer=saver,
            thread_id=first.thread_id,
            collection="public",
            explore_tool=True,
        )
    finally:
        base.close()
    assert len(second.calls) == 2
    for call in second.calls:
        for message in call["messages"]:
            assert TOKEN not in _everything(message), _everything(message)
