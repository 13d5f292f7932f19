"""The loop's state: what exists during a run, and how each field evolves.

`LoopInput` is what a caller sends, `LoopOutput` is the public result, and
`LoopState` is everything the nodes read and write. The growing fields (messages,
tool history, chunks) are delta channels (see ``core.channels``): checkpoints store
what each step added, not the whole list again. Every node returns a partial
update; nothing is mutated in place (a mutation would be visible to later nodes
in the live run but missing from every checkpoint, so replay would diverge).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from langchain_core.messages import AnyMessage
from langgraph.channels.delta import DeltaChannel
from typing_extensions import TypedDict

from arcana_loop.core.channels import (
    add_usage as add_usage,  # re-exported: nodes sum usage with it
)
from arcana_loop.core.channels import fold_appended, fold_chunks, fold_messages, fold_usages
from arcana_loop.knowledge.types import Chunk

TerminatedBy = Literal["answered", "gave_up", "max_iterations", "error"]
"""How a run ended.

- ``answered``: the controller called the ``answer`` tool or replied with plain text.
- ``gave_up``: the controller called the ``give_up`` tool, or the scope holds nothing to search.
- ``max_iterations``: the turn budget ran out before a terminating tool.
- ``error``: the controller's LLM call failed; ``error`` says why.
"""

MESSAGE_SNAPSHOT_EVERY = 500
"""How many writes to ``messages`` pass between two whole copies of the conversation in a checkpoint.

`DeltaChannel` stores a channel's whole value once every so many updates (LangGraph's
default is 100), so that rebuilding a state does not replay every write since the thread
began. A copy of a long conversation is the largest thing a thread stores, and a
question writes ``messages`` about seven times: every 100 updates meant a copy every 14
questions, quadratic bytes in a long chat. Every 500 means a copy every 70 questions,
about where ``chunks`` (written once or twice a question) takes its own, so the walk back
to a copy is hardly longer; loading a 60-question thread replays more writes
(`bench.checkpoint_bench` measures both)."""
_MESSAGES: DeltaChannel[list[AnyMessage]] = DeltaChannel(
    fold_messages, snapshot_frequency=MESSAGE_SNAPSHOT_EVERY
)

CollectionSpec = str | list[str] | None
"""``"all"``/``None`` (unrestricted), one name, or a list of names (``[]`` matches nothing)."""


SYNTHESIS = "synthesis"
"""The history name of the fallback synthesis step (not a tool the controller can call)."""


class ToolEvent(TypedDict):
    """One entry of the tool history: a tool call the loop executed, or the synthesis step."""

    tool: str
    """``"search"``, ``"answer"``, ``"give_up"``, ``"synthesis"`` or a custom tool's name."""
    args: dict[str, Any]
    """The arguments as the controller sent them (the synthesis text for ``synthesis``)."""
    iteration: int
    """The 0-based controller turn that made the call."""
    summary: str
    """The tool result the controller saw, or ``Answered.``/``Gave up: ...``/``Synthesized from N chunks``."""
    returned_chunk_ids: list[str]
    """Ids a search returned, in order; empty for every other tool."""
    duplicate_of: NotRequired[int]
    """For a search not sent again because it repeated one: the iteration of the earlier search."""
    entities: NotRequired[dict[str, Any]]
    """For a search the knowledge graph took part in: ``used``, ``matched_entities``, ``entity_chunks`` (returned chunks it found)."""
    ignored_args: NotRequired[list[str]]
    """Arguments the call sent that the tool's offered schema does not have; they were not used."""
    error: NotRequired[str]
    """For a search that failed: why (``summary`` is ``search error: `` and this reason)."""
    unmatched: NotRequired[list[str]]
    """For a search: the query's words no chunk of its scope holds (``knowledge.types.SearchResults``)."""


class ResolvedScope(TypedDict):
    """A question's collection scope as ``start`` resolved it (``tools.scoping.Scope`` as data)."""

    kind: Literal["all", "lock", "pick", "none"]
    names: list[str]
    """The allowed collections, in the caller's order (NFC, as the knowledge base stores them)."""


class QuestionSetup(TypedDict):
    """What ``start`` works out once per question for every node of it, as one state field.

    LangGraph copies and visits every channel of the graph on every step and router read;
    what is worked out together is kept together (as two fields it measured the same by
    instruction count, within the 0.5 M a loop that runs of one tree differ by).
    """

    scope: ResolvedScope
    """The question's ``collection``, checked and resolved (``tools.scoping.Scope`` as data)."""
    offered: list[str]
    """The tools the controller is offered, in order."""


Coverage = Literal["supported", "partially_supported", "unsupported"]
"""How much of a grounded answer the evidence holds (see ``nodes.evidence``)."""

BudgetStop = Literal["iterations", "tokens", "seconds"]
"""Which budget ended a ``max_iterations`` run."""

AnswerKind = Literal["written", "extracted"]
"""How an answer was made (``core.sources.answer_kind``).

- ``written``: a model wrote it.
- ``extracted``: passages quoted as the searches found them (the offline controller); no model wrote it.
"""


class EvidencePin(TypedDict):
    """One chunk a finished answer rests on, as the run read it (`nodes.pins`)."""

    chunk_id: str
    collection: str | None
    source: str | None
    """The document's source as the run read it (a file's path relative to the folder ingested, a name)."""
    document_id: str | None
    """``None`` for a chunk that did not come from the knowledge base (a custom search function's)."""
    document_hash: str | None
    """The document's content hash when the answer was pinned, if the knowledge base could say."""
    text_hash: str
    """`knowledge.text_hash` of the chunk's own text, as the run read it."""
    span: list[int] | None
    """``[start, end]`` of the chunk's own text within the text the run read (its whole section);
    ``None`` when the run read the chunk's text alone."""
    section_chunks: list[str]
    """The other chunks whose text the run read with it (its section's), by id."""
    cited: bool
    """The answer cites it; otherwise a supported claim of the grounding rests on it."""


class StaleChunk(TypedDict):
    """A chunk an answer rests on whose text has changed or gone since (`graph.stale`)."""

    chunk_id: str
    collection: str | None
    source: str | None


class StaleEvidence(TypedDict):
    """What a follow-up says before answering when the evidence of the thread's previous answer has changed."""

    note: str
    changed: list[StaleChunk]
    """Chunks whose document is still stored, with other text."""
    deleted: list[StaleChunk]
    """Chunks whose document is gone."""


class LoopInput(TypedDict):
    """What a run starts from: a ``question``, or ``messages`` whose last human message is the question.

    Chat clients (LangGraph Studio's chat view, agent-chat-ui, ``useStream``) send
    ``{"messages": [{"type": "human", "content": ...}]}``; programmatic callers send
    ``{"question": ...}``. On a thread that already holds a conversation, either starts
    a new question in it (see ``nodes.conversation``).
    """

    question: NotRequired[str]
    collection: NotRequired[CollectionSpec]
    messages: Annotated[NotRequired[list[AnyMessage]], _MESSAGES]
    """The conversation of the thread, without the system prompt (rebuilt per call).

    Starts with the first question; every assistant tool call is answered by a tool
    message, so the conversation is valid for OpenAI-style APIs whenever it is sent
    again; each question ends with its answer as an assistant message with text."""


class RunInput(LoopInput):
    """What `run` and `arun` send: the input and the run's options (the served graph's input is `LoopInput`)."""

    options: NotRequired[dict[str, Any]]


class LoopOutput(TypedDict):
    """The public result of a run, as Studio and server clients see it.

    The answer comes first and the bulky fields last: a client that shows the output
    as text (an MCP tool result is the output's text) shows the answer first.
    """

    answer: str | None
    terminated_by: TerminatedBy | None
    answer_kind: AnswerKind | None
    error: str | None
    stale_evidence: StaleEvidence | None
    coverage: Coverage | None
    question: str
    iterations: int
    grounding: dict[str, Any] | None
    repair: dict[str, Any] | None
    usage: dict[str, Any]
    thread_usage: dict[str, Any]
    question_index: int
    budget_stop: BudgetStop | None
    sources: list[dict[str, Any]]
    evidence: list[EvidencePin]
    tool_history: list[ToolEvent]
    chunks: list[Chunk]
    messages: list[AnyMessage]


class AnswerOutput(TypedDict):
    """The result of the served ``arcana-loop-answer`` graph: the answer and where it comes from, nothing more.

    For clients that show a result as its text (an MCP tool result is the Python repr of
    the run's output, langgraph-api offering no hook to shape it): a few hundred bytes,
    answer first, where `LoopOutput` is tens of kilobytes of chunks and messages.
    """

    answer: str | None
    terminated_by: TerminatedBy | None
    answer_kind: AnswerKind | None
    """``extracted`` for passages quoted as found (no model wrote them), ``written`` for a model's answer."""
    error: str | None
    sources: list[dict[str, Any]]
    """The chunks the answer cites (`core.sources.Source`: title, source, section, pages, chunk id, cited text)."""


RESULT_KEYS = tuple(LoopOutput.__annotations__)
"""The state keys of a run's result, in `LoopOutput`'s order (`graph.run.LoopResult` adds ``thread_id`` and ``grounded_in_chunks``)."""


class LoopState(LoopInput):
    """Everything the nodes share during a run.

    A thread holds one conversation; the fields below ``messages`` and ``thread_usage``
    describe its current question and start fresh when a new question is asked.
    """

    tool_history: Annotated[list[ToolEvent], DeltaChannel(fold_appended)]
    """This question's executed tool calls in order; appended to, and replaced by an empty list
    (a ``{"replace": []}`` write) when a new question starts."""
    chunks: Annotated[NotRequired[list[Chunk]], DeltaChannel(fold_chunks)]
    """This question's chunks, best first, capped. ``tools`` writes a `ChunkMerge` of the turn's
    finds (the cap travels in the write, since it is a context value); a list replaces them."""
    question_index: NotRequired[int]
    """The 0-based number of the current question in the thread's conversation."""
    question_message_id: NotRequired[str | None]
    """Id of the human message that opened the current question (how a new one is told apart)."""
    thread_usage: Annotated[NotRequired[dict[str, Any]], add_usage]
    """``usage`` summed over every question of the thread."""
    iterations: NotRequired[int]
    """Controller turns run so far for this question, the failing one included."""
    terminated_by: NotRequired[TerminatedBy | None]
    sources: NotRequired[list[dict[str, Any]]]
    """The chunks the question's answer cites (`core.sources`), written when it ends."""
    answer_kind: NotRequired[AnswerKind | None]
    """How the question's answer was made (`AnswerKind`), written when it ends; ``None`` without one."""
    evidence: NotRequired[list[EvidencePin]]
    """The chunks the question's answer rests on, with their versions (`nodes.pins`), written when it ends."""
    stale_evidence: NotRequired[StaleEvidence | None]
    """Written when a question opens on a thread whose previous answer's evidence has changed since."""
    answer: NotRequired[str | None]
    error: NotRequired[str | None]
    grounding: NotRequired[dict[str, Any] | None]
    usage: Annotated[dict[str, Any], DeltaChannel(fold_usages)]
    """This question's tokens per role (``controller``, ``answerer``, ``synthesis``) and seconds per node, summed."""
    started_at: NotRequired[float]
    """Wall-clock time (``time.time()``) the question opened (the ``start`` step), for the time budget."""
    budget_stop: NotRequired[BudgetStop | None]
    repairs: NotRequired[int]
    """Answers sent back to the controller because their grounding fell below ``min_support``."""
    repair: NotRequired[dict[str, Any] | None]
    """``{"ran", "unsupported_claims", "score_before", "score_after"}`` once a repair ran."""
    coverage: NotRequired[Coverage | None]
    search_nudged: NotRequired[bool]
    """An answer made before any search was sent back (see ``nodes.search_first``); only once per run."""
    question_setup: NotRequired[QuestionSetup]
    """The question's scope and offered tools, worked out once by ``start``; every node reads them here."""
    options: NotRequired[dict[str, Any]]
    """The run's options (its `LoopContext` as JSON). LangGraph does not checkpoint the context,
    and resumes, traces and recorded replays need it: `run` sends them with its input
    (`RunInput`), so the input checkpoint holds them before any model call; the ``start``
    step writes them when the input did not (a served run), or replaces them when they
    differ from the context."""


class ControllerRouteView(TypedDict):
    """What the router after ``controller`` reads.

    Routers read narrow views: each channel in a view is read, with the node's writes applied, on
    every step (LangGraph copies the whole graph's channels for that read whatever the view).
    The three views save 2.3 M instructions a loop, 9.5 % of the minimal StateGraph's
    (``bench.loop_instructions``): short of the 10 % a speed tweak must earn, but without them
    ``run()`` would be 1.58x the minimal StateGraph, past the loop benchmark's 1.5x guard.
    """

    terminated_by: NotRequired[TerminatedBy | None]
    messages: Annotated[list[AnyMessage], _MESSAGES]
    chunks: Annotated[NotRequired[list[Chunk]], DeltaChannel(fold_chunks)]
    search_nudged: NotRequired[bool]


class ToolsRouteView(TypedDict):
    """What the router after ``tools`` reads."""

    terminated_by: NotRequired[TerminatedBy | None]
    tool_history: Annotated[list[ToolEvent], DeltaChannel(fold_appended)]


class OutcomeView(TypedDict):
    """What the routers after ``answerer``, ``synthesis`` and ``ground`` read."""

    terminated_by: NotRequired[TerminatedBy | None]
