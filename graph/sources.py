"""Where an answer comes from, as data: the chunks it cites, and citations in its message.

An answer cites a chunk by writing its id (``[f0bd...]``). From the answer's text and
the chunks the run gathered, `cited_sources` lists each cited chunk once, in the
order the answer first cites it, with its document's title, source, section and
pages. The closing message carries the same list as LangChain standard content: one
text block whose ``annotations`` hold a ``citation`` per mention (its ``start_index``
and ``end_index`` locate the id in the text), so a chat front end that reads standard
content can show them; `LoopResult.sources` holds the list itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import TypedDict

from arcana_loop.knowledge.sections import document_title, page_label

CITED_TEXT_CHARS = 300
"""How much of a cited chunk's text a source carries (enough to show, not the whole chunk)."""


class Source(TypedDict):
    """One chunk an answer cites."""

    chunk_id: str
    title: str
    source: str | None
    section: str | None
    pages: str | None
    """``"3"`` or ``"2–3"`` for a paged document, else ``None``."""
    collection: str | None
    cited_text: str


def cited_chunks(
    answer: str | None, chunks: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The chunks whose id the answer mentions, each once, in the order it first mentions them."""
    if not answer:
        return []
    first_mention = {
        str(c["id"]): (answer.find(str(c["id"])), c)
        for c in chunks
        if c.get("id") and str(c["id"]) in answer
    }
    return [c for _, c in sorted(first_mention.values(), key=lambda item: item[0])]


def cited_sources(answer: str | None, chunks: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Each chunk the answer cites, as a source a person can follow."""
    sources: list[Source] = []
    for chunk in cited_chunks(answer, chunks):
        metadata = chunk.get("metadata") or {}
        source = metadata.get("source")
        section = metadata.get("section")
        sources.append(
            {
                "chunk_id": str(chunk["id"]),
                "title": document_title(str(source or chunk.get("collection") or ""), metadata),
                "source": str(source) if source else None,
                "section": str(section) if section else None,
                "pages": page_label(metadata),
                "collection": chunk.get("collection"),
                "cited_text": str(chunk.get("text") or "")[:CITED_TEXT_CHARS],
            }
        )
    return sources


def answer_content(text: str, sources: Sequence[Source]) -> list[dict[str, Any]]:
    """The closing message's content: the answer as one text block with a citation per id it mentions."""
    annotations: list[dict[str, Any]] = []
    for source in sources:
        start = text.find(source["chunk_id"])
        while start != -1:
            citation: dict[str, Any] = {
                "type": "citation",
                "title": source["title"],
                "start_index": start,
                "end_index": start + len(source["chunk_id"]),
                "cited_text": source["cited_text"],
                "extras": {k: source[k] for k in ("chunk_id", "source", "section", "pages")},
            }
            if source["source"] and source["source"].startswith(("http://", "https://")):
                citation["url"] = source["source"]
            annotations.append(citation)
            start = text.find(source["chunk_id"], start + 1)
    annotations.sort(key=lambda a: a["start_index"])
    return [{"type": "text", "text": text, "annotations": annotations}]
