"""Test-case generation: one question per sampled chunk, written by a chat model.

Each sampled chunk is shown to the model with `GENERATE_QUESTION_PROMPT`; the
reply's JSON object (prose and code fences around it are ignored) gives the
question and its key facts, and the chunk itself is the one relevant id. A reply
without a usable question is skipped and reported, never turned into a case.
Generated cases are a starting point: they are only as good as the model's
questions, and key facts are checked against the chunk text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage

from arcana_loop.evaluation.cases import CaseSet, EvalCase, KeyFact
from arcana_loop.evaluation.metrics import fact_found
from arcana_loop.evaluation.parse import parse_json_object, reply_text
from arcana_loop.evaluation.prompts import GENERATE_QUESTION_PROMPT
from arcana_loop.nodes.models import ModelSpec, resolve_model

MAX_PASSAGE_CHARS = 4000
"""Chunk text past this is cut before it goes into the prompt."""

_SAMPLE_SQL = """
SELECT c.id, c.text, c.metadata, d.source
FROM kb_chunks c
JOIN kb_documents d ON d.id = c.document_id
JOIN kb_collections k ON k.id = c.collection_id
WHERE k.name = %s AND length(btrim(c.text)) >= %s
ORDER BY md5(c.id || %s)
LIMIT %s
"""


@dataclass
class Generated:
    """What a generation run produced: the cases, and the chunks whose reply was skipped."""

    cases: CaseSet
    skipped: list[dict[str, str]] = field(default_factory=list)
    """``{"chunk_id", "reason"}`` per chunk that gave no case."""


def sample_chunks(
    kb: Any, collection: str, n: int, *, seed: int = 0, min_chars: int = 80
) -> list[dict[str, Any]]:
    """Return up to ``n`` chunks of a collection, in a pseudo-random order fixed by ``seed``.

    Chunks shorter than ``min_chars`` (headings, fragments) are left out: they rarely
    state a fact worth asking about.

    Raises:
        ValueError: for an ``n`` below 1 or a collection the knowledge base does not have.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if collection not in {c.name for c in kb.collections()}:
        raise ValueError(f"no collection named {collection!r}")
    with kb.pool().connection() as conn:
        rows = conn.execute(_SAMPLE_SQL, (collection, min_chars, str(seed), n)).fetchall()
    return [
        {
            "id": r[0],
            "text": r[1],
            "metadata": {**(r[2] or {}), "source": (r[2] or {}).get("source", r[3])},
        }
        for r in rows
    ]


def _in_text(fact: str, text: str) -> bool:
    try:
        return fact_found(fact, text)
    except ValueError:  # a fact of punctuation only
        return False


def _case_from_reply(chunk: Mapping[str, Any], reply: str, index: int) -> EvalCase:
    data = parse_json_object(reply)
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the reply has no non-empty 'question'")
    raw_facts = data.get("key_facts") or []
    if not isinstance(raw_facts, list):
        raise ValueError("'key_facts' is not a list")
    facts: list[KeyFact] = [
        f.strip() for f in raw_facts if isinstance(f, str) and _in_text(f, str(chunk["text"]))
    ]
    source = str((chunk.get("metadata") or {}).get("source") or "")
    return EvalCase(
        id=f"generated-{index:03d}",
        question=question.strip(),
        key_facts=facts,
        relevant_ids=[str(chunk["id"])],
        relevant_sources=[source] if source else [],
        kind="generated",
    )


def generate_cases(
    chunks: Sequence[Mapping[str, Any]],
    model: ModelSpec,
    *,
    collection: str,
    prompt: str = GENERATE_QUESTION_PROMPT,
    temperature: float | None = 0.0,
    progress: Callable[[int, int], None] | None = None,
) -> Generated:
    """Ask the model for one question per chunk.

    Key facts the model gives that are not in the chunk text are dropped, so every
    kept fact can really be found. A model error or an unusable reply skips the chunk.

    Raises:
        ModelSpecError, TypeError: for a model spec that cannot be resolved.
    """
    caller = resolve_model(model)
    cases: list[EvalCase] = []
    skipped: list[dict[str, str]] = []
    for index, chunk in enumerate(chunks, start=1):
        text = str(chunk["text"])[:MAX_PASSAGE_CHARS]
        source = str((chunk.get("metadata") or {}).get("source") or chunk.get("id"))
        message = HumanMessage(
            content=prompt.format(collection=collection, source=source, text=text)
        )
        try:
            reply = caller.invoke(
                [message], [], {} if temperature is None else {"temperature": temperature}
            )
            cases.append(_case_from_reply(chunk, reply_text(reply.content), len(cases) + 1))
        except Exception as exc:  # one bad reply or failed call skips its chunk, the run goes on
            skipped.append({"chunk_id": str(chunk["id"]), "reason": f"{type(exc).__name__}: {exc}"})
        if progress:
            progress(index, len(chunks))
    description = f"Generated by {getattr(caller, 'name', 'a model')} from {len(chunks)} sampled chunks of {collection!r}."
    return Generated(
        CaseSet(
            cases, name=f"{collection}-generated", collection=collection, description=description
        ),
        skipped,
    )
