"""Stale answers: finished threads whose answer rests on text the knowledge base no longer holds.

Each finished question keeps the chunks its answer rests on, with the hash of the text
it read (`nodes.pins`). `stale_answers` reads the latest state of every thread on a
checkpointer, asks the knowledge base once for the current versions of every pinned
chunk (`KnowledgeBase.chunk_versions`) and lists the threads whose answer rests on a
chunk changed or deleted since. The knowledge base knows nothing of threads: the
comparison is made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from arcana_loop.core.state import EvidencePin, StaleChunk
from arcana_loop.graph.checkpoints import resolve_checkpointer
from arcana_loop.nodes.pins import VersionsFn, evidence_changes

_OPENINGS = ("input", "update", "fork")
"""The checkpoint sources a thread can begin with: a run's input, or a state written by
hand (a fork or replay copies a checkpoint's values into a new thread)."""


@dataclass(frozen=True)
class PinnedAnswer:
    """A thread's last finished answer and the chunks it rests on."""

    thread_id: str
    question: str
    question_index: int
    evidence: list[EvidencePin]


@dataclass
class StaleAnswer:
    """A finished thread whose answer rests on chunks that changed or were deleted since."""

    thread_id: str
    question: str
    question_index: int
    """Which question of the thread's conversation the answer is (0-based): its last."""
    changed: list[StaleChunk] = field(default_factory=list)
    """Chunks whose document is still stored, with other text (``chunk_id``, ``collection``, ``source``)."""
    deleted: list[StaleChunk] = field(default_factory=list)
    """Chunks whose document is gone."""

    def to_dict(self) -> dict[str, Any]:
        """The stale answer as JSON-ready data."""
        return asdict(self)


def _thread_ids(saver: Any) -> list[str]:
    """Every thread on the saver, read whole before any is opened (a saver may hold a lock while it lists)."""
    ids = (
        str(checkpoint.config["configurable"]["thread_id"])
        for source in _OPENINGS
        for checkpoint in list(saver.list(None, filter={"source": source}))
    )
    return list(dict.fromkeys(ids))


def pinned_answers(checkpointer: Any, *, collection: str | None = None) -> list[PinnedAnswer]:
    """The finished threads on a checkpointer whose last answer rests on pinned chunks (of `collection`, if given).

    Raises:
        ValueError: for an unknown checkpointer spec, or none.
    """
    from arcana_loop.graph.build import build_graph, make_deps

    saver = resolve_checkpointer(checkpointer)
    if saver is None:
        raise ValueError("stale answers are read from a checkpointer: name the one the runs used")
    compiled = build_graph(make_deps()).compile(checkpointer=saver)
    answers = []
    for thread_id in _thread_ids(saver):
        snapshot = compiled.get_state({"configurable": {"thread_id": thread_id}})
        values = snapshot.values
        if snapshot.next or not values.get("terminated_by"):
            continue  # a question under way has no pinned answer yet
        pins = [
            p
            for p in values.get("evidence") or []
            if collection is None or p.get("collection") == collection
        ]
        if pins:
            question = str(values.get("question") or "")
            index = int(values.get("question_index") or 0)
            answers.append(PinnedAnswer(thread_id, question, index, pins))
    return answers


def stale_among(answers: Sequence[PinnedAnswer], versions: VersionsFn) -> list[StaleAnswer]:
    """The answers among these whose evidence changed since, from one lookup of the current versions."""
    chunk_ids = [
        i for a in answers for p in a.evidence for i in (p["chunk_id"], *p["section_chunks"])
    ]
    document_ids = [str(p["document_id"]) for a in answers for p in a.evidence if p["document_id"]]
    if not document_ids:
        return []
    now = versions(chunk_ids, document_ids)
    stale = []
    for answer in answers:
        changed, deleted = evidence_changes(answer.evidence, now)
        if changed or deleted:
            stale.append(
                StaleAnswer(
                    answer.thread_id, answer.question, answer.question_index, changed, deleted
                )
            )
    return stale


def stale_answers(
    checkpointer: Any = "postgres",
    *,
    collection: str | None = None,
    knowledge_base: Any = None,
) -> list[StaleAnswer]:
    """The finished threads whose answer rests on a chunk whose text has changed or been deleted since.

    Args:
        checkpointer: where the threads are (a saver or a spec, as `run` takes it); the
            command line's ``ask`` and ``chat`` store theirs in ``"postgres"``.
        collection: only answers resting on chunks of this collection, and only those
            chunks; every collection when ``None`` or ``"all"``.
            A deleted collection's name still lists the answers that rested on it.
        knowledge_base: the `KnowledgeBase` the answers searched; the default one when ``None``.

    Raises:
        ValueError: for an unknown checkpointer spec, or a malformed collection name.
        TypeError: for a collection that is not one name (a list of them, say).
    """
    collection = _one_collection(collection)
    if knowledge_base is None:
        from arcana_loop import knowledge

        knowledge_base = knowledge.default_knowledge_base()
    answers = pinned_answers(checkpointer, collection=collection)
    return stale_among(answers, knowledge_base.chunk_versions)


def _one_collection(collection: object) -> str | None:
    """The collection to filter by, in the spelling stored: ``None`` for every one."""
    if collection is None:
        return None
    if not isinstance(collection, str):
        raise TypeError(
            f"collection must be one collection's name, or None for every one; got {type(collection).__name__}"
        )
    from arcana_loop.knowledge.names import means_every_collection, normalize_collection_name

    if means_every_collection(collection):
        return None
    return normalize_collection_name(collection)
