"""What a finished answer rests on, pinned with its versions, and whether that has changed since.

When a question ends, ``finish`` pins each chunk the answer cites or a supported claim
of its grounding rests on (`pin_evidence`): its id, collection, document source, the
document's content hash, a hash of the chunk's own text and where that text is in what
the run read (a search returns a hit with its whole section). The pins are state, so
they are in the thread's checkpoints and in its record.

Later, the knowledge base's `chunk_versions` lookup says what it holds now; a chunk is
changed when its stored text hash differs, or when it or a chunk of its section is no
longer stored while its document is (an edit gives changed text a new chunk id), and
deleted when its document is gone (`evidence_changes`). `graph.stale` lists the threads
this makes stale; ``start`` tells a follow-up on such a thread (`stale_evidence`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from arcana_loop.core.sources import named
from arcana_loop.core.state import EvidencePin, StaleChunk, StaleEvidence
from arcana_loop.knowledge.versions import ChunkVersions, text_hash
from arcana_loop.nodes import prompts

logger = logging.getLogger(__name__)

VersionsFn = Callable[[Sequence[str], Sequence[str]], ChunkVersions]
"""``chunk_versions(chunk_ids, document_ids)``: what the knowledge base holds now (`KnowledgeBase.chunk_versions`)."""


def supporting_ids(grounding: Mapping[str, Any] | None) -> list[str]:
    """The chunks the supported claims (or faithful spans) of a grounding rest on, in answer order.

    A claim rests on its best-scored sources: a grounder lists weaker ones too (a chunk
    sharing a few of its words), which a change to would not touch the claim.
    """
    if not grounding:
        return []
    parts = [c for c in grounding.get("claims") or [] if isinstance(c, Mapping)]
    supported = [c for c in parts if c.get("verdict") == "supported"] or [
        s for s in grounding.get("faithful_spans") or [] if isinstance(s, Mapping)
    ]
    ids: list[str] = []
    for part in supported:
        sources = [
            s
            for s in part.get("sources") or []
            if isinstance(s, Mapping) and s.get("chunk_id") is not None
        ]
        best = max((float(s.get("score") or 0) for s in sources), default=0.0)
        ids += [str(s["chunk_id"]) for s in sources if float(s.get("score") or 0) == best]
    return list(dict.fromkeys(ids))


def _pin(chunk: Mapping[str, Any], cited: bool) -> EvidencePin:
    text = str(chunk.get("text") or "")
    metadata = chunk.get("metadata") or {}
    start, end = metadata.get("hit_start"), metadata.get("hit_end")
    span = (
        [start, end]
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text)
        else None
    )
    own = text[span[0] : span[1]] if span else text
    source = metadata.get("source")
    return {
        "chunk_id": str(chunk["id"]),
        "collection": chunk.get("collection"),
        "source": str(source) if source else None,
        "document_id": chunk.get("document_id"),
        "document_hash": None,
        "text_hash": text_hash(own),
        "span": span,
        "section_chunks": [
            str(i) for i in metadata.get("section_chunks") or [] if str(i) != str(chunk["id"])
        ],
        "cited": cited,
    }


def _looked_up(versions: VersionsFn | None, pins: Sequence[EvidencePin]) -> ChunkVersions | None:
    """The knowledge base's versions of the pinned chunks; ``None`` without a lookup or when it fails.

    A pin or a check is never worth an answer: a lookup that fails (the database gone
    meanwhile) leaves the document hashes unknown, or the follow-up without its note.
    """
    stored = [p for p in pins if p["document_id"]]
    if versions is None or not stored:
        return None
    chunk_ids = [i for p in stored for i in (p["chunk_id"], *p["section_chunks"])]
    try:
        return versions(chunk_ids, [str(p["document_id"]) for p in stored])
    except Exception as exc:  # see the docstring: logged, and the answer goes on
        logger.warning("could not read the versions of an answer's evidence: %s", exc)
        return None


def pin_evidence(
    cited: Sequence[Mapping[str, Any]],
    chunks: Sequence[Mapping[str, Any]],
    grounding: Mapping[str, Any] | None,
    versions: VersionsFn | None,
) -> list[EvidencePin]:
    """Pin the chunks an answer cites (`cited_chunks`: first, in citing order), then those its supported claims rest on.

    A pinned chunk's document hash is the knowledge base's current one, kept only while
    the chunk's stored text is still the text the run read.
    """
    cited = [c for c in cited if c.get("id")]
    by_id = {str(c["id"]): c for c in chunks if c.get("id")}
    cited_ids = {str(c["id"]) for c in cited}
    supporting = [by_id[i] for i in supporting_ids(grounding) if i in by_id and i not in cited_ids]
    pins = [_pin(c, True) for c in cited] + [_pin(c, False) for c in supporting]
    now = _looked_up(versions, pins)
    if now is None:
        return pins
    return [
        {**p, "document_hash": now.documents.get(str(p["document_id"]))}
        if now.chunks.get(p["chunk_id"]) == p["text_hash"]
        else p
        for p in pins
    ]


def _changed(pin: EvidencePin, now: ChunkVersions) -> bool:
    if now.chunks.get(pin["chunk_id"]) != pin["text_hash"]:
        return True
    return any(i not in now.chunks for i in pin["section_chunks"])


def _stale_chunk(pin: EvidencePin) -> StaleChunk:
    return {"chunk_id": pin["chunk_id"], "collection": pin["collection"], "source": pin["source"]}


def evidence_changes(
    pins: Iterable[EvidencePin], now: ChunkVersions
) -> tuple[list[StaleChunk], list[StaleChunk]]:
    """The pinned chunks whose text has changed since (their document still stored), and those deleted with it.

    Only chunks of the knowledge base are checked (a pin with a document id).
    """
    changed: list[StaleChunk] = []
    deleted: list[StaleChunk] = []
    for pin in pins:
        if not pin["document_id"] or not _changed(pin, now):
            continue
        gone = str(pin["document_id"]) not in now.documents
        (deleted if gone else changed).append(_stale_chunk(pin))
    return changed, deleted


def _places(chunks: Sequence[StaleChunk]) -> str:
    names = dict.fromkeys(named(c["source"]) or f"a text in {c['collection']!r}" for c in chunks)
    return ", ".join(names)


def describe_changes(changed: Sequence[StaleChunk], deleted: Sequence[StaleChunk]) -> str:
    """The changes in words: how many passages of which documents changed, and of which are gone."""
    parts = []
    if changed:
        parts.append(f"{_passages(len(changed))} of {_places(changed)} that changed since")
    if deleted:
        parts.append(f"{_passages(len(deleted))} of {_places(deleted)}, deleted since")
    return " and ".join(parts)


def _passages(count: int) -> str:
    return f"{count} passage{'' if count == 1 else 's'}"


def stale_evidence(
    pins: Sequence[EvidencePin], versions: VersionsFn | None
) -> StaleEvidence | None:
    """What a follow-up says when the previous answer's evidence changed since; ``None`` when it did not."""
    now = _looked_up(versions, pins)
    if now is None:
        return None
    changed, deleted = evidence_changes(pins, now)
    if not changed and not deleted:
        return None
    note = prompts.STALE_EVIDENCE_NOTE.format(changes=describe_changes(changed, deleted))
    return {"note": note, "changed": changed, "deleted": deleted}
