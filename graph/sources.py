"""Where an answer comes from, as data: the chunks it cites, and citations in its message.

An answer cites a chunk by writing its id (``[f0bd...]``). From the answer's text and
the chunks the run gathered, `cited_sources` lists each cited chunk once, in the
order the answer first cites it, with its document's title, source, section and
pages. The closing message carries the same list as LangChain standard content: one
text block whose ``annotations`` hold a ``citation`` per mention (its ``start_index``
and ``end_index`` locate the id in the text), so a chat front end that reads standard
content can show them; `LoopResult.sources` holds the list itself. For clients that
show text only (most chat front ends join the text blocks and drop the rest), a
second text block lists the sources in words (`sources_footer`); it is on for served
runs (the ``sources_footer`` run option) and off for `run()`, whose caller has
`LoopResult.sources`.
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


SHOWN_ID_CHARS = 8
"""How much of a chunk id the plain-text list shows: enough to find it in the answer."""
FOOTER_HEADING = "Sources:"


def source_place(source: Source) -> str:
    """Where a source is, in words: its title (and file, when the title is not the file's name), section and pages."""
    place = source["source"] or source["collection"] or "?"
    name = place.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    title = source["title"]
    where = place if title in ("", stem, name, place) else f"{title} ({place})"
    if source["section"]:
        where += f" > {source['section']}"
    pages = source["pages"]
    if pages:
        where += f" (page{'s' if not pages.isdigit() else ''} {pages})"
    return where


def sources_footer(sources: Sequence[Source]) -> str:
    """The sources as plain text, one line each, keyed by the start of the id the answer cites."""
    lines = [f"[{s['chunk_id'][:SHOWN_ID_CHARS]}] {source_place(s)}" for s in sources]
    return "\n\n" + "\n".join([FOOTER_HEADING, *lines])


def answer_content(
    text: str, sources: Sequence[Source], *, footer: bool = False
) -> list[dict[str, Any]]:
    """The closing message's content: the answer as one text block with a citation per id it mentions.

    With ``footer``, a second text block lists the sources for clients that show text only.
    """
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
    content: list[dict[str, Any]] = [{"type": "text", "text": text, "annotations": annotations}]
    if footer:
        content.append({"type": "text", "text": sources_footer(sources)})
    return content


def answer_text(content: str | Sequence[Any]) -> str:
    """The answer in a closing message's content: its first text block (the sources list follows it)."""
    if isinstance(content, str):
        return content
    for block in content:
        if isinstance(block, str):
            return block
        if isinstance(block, Mapping) and block.get("type") == "text":
            return str(block.get("text") or "")
    return ""
