"""Where an answer comes from, as data, and as people read it.

An answer cites a chunk by writing its id (``[f0bd...]``): that is what a model (or the
offline controller) writes and what grounding and `cited_sources` read. From the answer
and the chunks the run gathered, `cited_sources` lists each cited chunk once, in the
order the answer first cites it, with its document's title, its path (relative to the
folder it was ingested from, `relative_sources`), section and pages; `LoopResult.sources`
holds that list, and the ids stay there.

People read numbers instead (`render_citations`): the source first cited is ``[1]``,
the next ``[2]``, and each id in the answer is written as its number, with the numbered
list under it (`sources_list`). The closing message carries the answer that way as
LangChain standard content: one text block whose ``annotations`` hold a ``citation``
per number (``start_index``/``end_index`` locate the number; its ``extras`` keep the
chunk id), so a chat front end that reads standard content can link them. For clients
that show text only (most join the text blocks and drop the rest), a second text block
lists the sources in words (`sources_footer`); it is on for served runs (the
``sources_footer`` run option) and off for `run()`, whose caller has `LoopResult`.

How an answer was made (`answer_kind`): ``"extracted"`` when the reply that holds it says
so in its ``response_metadata`` (the offline controller's quotes: passages, no model
wrote them), ``"written"`` otherwise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from typing_extensions import TypedDict

from arcana_loop.core.state import AnswerKind
from arcana_loop.knowledge.sections import document_title, page_label

CITED_TEXT_CHARS = 300
"""How much of a cited chunk's text a source carries (enough to show, not the whole chunk)."""

ANSWER_KIND_KEY = "answer_kind"
"""The ``response_metadata`` key by which a reply says how its answer was made (`AnswerKind`)."""
EXTRACTED: AnswerKind = "extracted"
WRITTEN: AnswerKind = "written"


class Source(TypedDict):
    """One chunk an answer cites; ``sources[i]`` is cited as ``[i + 1]`` where people read the answer."""

    chunk_id: str
    title: str
    source: str | None
    """A file's path relative to the folder it was ingested from (`relative_sources`), else the name it was stored under."""
    section: str | None
    pages: str | None
    """``"3"`` or ``"2–3"`` for a paged document, else ``None``."""
    collection: str | None
    cited_text: str


def _absolute_path(source: object) -> PurePosixPath | PureWindowsPath | None:
    if not isinstance(source, str):
        return None
    if source.startswith("/"):
        return PurePosixPath(source)
    if re.match(r"[A-Za-z]:[\\/]", source):
        return PureWindowsPath(source)
    return None


def _common_folder(
    paths: Sequence[PurePosixPath | PureWindowsPath],
) -> PurePosixPath | PureWindowsPath | None:
    """The deepest folder holding every path (``None`` for paths of two kinds of machine)."""
    if len({type(p) for p in paths}) != 1:
        return None
    common = os.path.commonprefix([list(p.parent.parts) for p in paths])  # element-wise on lists
    return type(paths[0])(*common) if common else None


def relative_sources(chunks: Sequence[Any]) -> list[Any]:
    """Chunks whose ``source`` is a machine's absolute path, with that path made relative.

    The knowledge base stores a file under its absolute path, which says nothing a
    reader needs and shows a server's layout to every client. Each such path is made
    relative to the deepest folder holding every file of its collection among
    ``chunks``: the folder that was ingested, or one inside it (a lone file is its
    name). Other sources (names, URLs, relative paths) are kept as they are. The
    chunks are copied, never changed.
    """
    absolute = [_absolute_path((chunk.get("metadata") or {}).get("source")) for chunk in chunks]
    paths: dict[object, list[PurePosixPath | PureWindowsPath]] = {}
    for chunk, path in zip(chunks, absolute, strict=True):
        if path is not None:
            paths.setdefault(chunk.get("collection"), []).append(path)
    roots = {collection: _common_folder(found) for collection, found in paths.items()}
    out = []
    for chunk, path in zip(chunks, absolute, strict=True):
        if path is None:
            out.append(chunk)
            continue
        metadata = chunk.get("metadata") or {}
        root = roots.get(chunk.get("collection"))
        inside = root is not None and path.is_relative_to(root)
        shown = path.relative_to(root).as_posix() if root is not None and inside else path.name
        out.append({**chunk, "metadata": {**metadata, "source": shown}})
    return out


def _id_pattern(ids: Sequence[str]) -> str:
    """A chunk id written in an answer: whole, not the start or end of a longer word (``wait`` in ``wait_for``)."""
    alternatives = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    return rf"(?<!\w)(?:{alternatives})(?!\w)"


def without_citations(text: str, ids: Sequence[str]) -> str:
    """`text` without the chunk ids it cites (``[f0bd...]``, ``[f0bd..., 9a3c...]``, a bare id).

    What a claim says, for comparing its words with the evidence: an id is no word of
    the passage it names, and counted as one it would make a quoted sentence look
    partly unsupported.
    """
    if not ids:
        return text
    one = _id_pattern(ids)
    return re.sub(rf"\s*\[\s*{one}(?:\s*[,;]\s*{one})*\s*\]|\s*{one}", "", text)


def cited_chunks(
    answer: str | None, chunks: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The chunks whose id the answer mentions, each once, in the order it first mentions them."""
    by_id = {str(c["id"]): c for c in chunks if c.get("id")}
    if not answer or not by_id:
        return []
    order = dict.fromkeys(m.group() for m in re.finditer(_id_pattern(list(by_id)), answer))
    return [by_id[chunk_id] for chunk_id in order]


def cited_sources(answer: str | None, chunks: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Each chunk the answer cites, as a source a person can follow."""
    return sources_of(cited_chunks(answer, chunks))


def sources_of(cited: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Cited chunks (`cited_chunks`), each as a source a person can follow."""
    sources: list[Source] = []
    for chunk in relative_sources(cited):
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


def render_citations(
    text: str, sources: Sequence[Source]
) -> tuple[str, list[tuple[int, int, int]]]:
    """The answer as people read it: each cited id written as its source's number.

    An id in brackets keeps them (``[f0bd...]`` is ``[1]``, ``[f0bd..., 9a3c...]`` is
    ``[1, 2]``); an id elsewhere is bracketed (``see f0bd...`` is ``see [1]``).

    Returns:
        The text, and ``(start, end, i)`` for each number written: where it is in the
        text and the index of its source in ``sources``.
    """
    numbers = {s["chunk_id"]: i for i, s in enumerate(sources)}
    if not numbers:
        return text, []
    one = _id_pattern(list(numbers))
    pattern = re.compile(rf"\[\s*({one}(?:\s*[,;]\s*{one})*)\s*\]|({one})")
    out: list[str] = []
    spans: list[tuple[int, int, int]] = []
    size = cursor = 0

    def write(piece: str) -> None:
        nonlocal size
        out.append(piece)
        size += len(piece)

    for match in pattern.finditer(text):
        write(text[cursor : match.start()])
        ids = re.findall(one, match.group(1) or match.group(2))
        write("[")
        for k, chunk_id in enumerate(ids):
            if k:
                write(", ")
            number = str(numbers[chunk_id] + 1)
            spans.append((size, size + len(number), numbers[chunk_id]))
            write(number)
        write("]")
        cursor = match.end()
    write(text[cursor:])
    return "".join(out), spans


FOOTER_HEADING = "Sources:"
UNNAMED = "(a passage its search named no source for)"


_NAME_SCHEME = re.compile(r"(?!https?:)[a-z][\w+.-]*:(?!/)", re.IGNORECASE)
"""A source that is a name under a scheme (``pydoc:json#dumps``), not a file or a URL."""
UNNAMED_TEXT = "text:"
"""How the knowledge base names a text ingested without a name: ``text:`` and a hash of it."""


def named(source: str | None) -> str | None:
    """A source as people can name it: ``None`` for a text stored under a hash of itself."""
    return None if not source or source.startswith(UNNAMED_TEXT) else source


def source_place(source: Source) -> str:
    """Where a source is, in words: its title (and path, when the title is not the file's name), section and pages.

    A text ingested without a name is stored under a hash of itself, which names nothing
    for a person: it is "a text in" its collection, under its title when it has one.
    """
    path, title = named(source["source"]), source["title"]
    if path is None:
        place = f"a text in {source['collection']!r}" if source["collection"] else UNNAMED
        hashed = (source["source"] or "").removeprefix(UNNAMED_TEXT)
        where = place if title in ("", hashed) else f"{title} ({place})"
    elif _NAME_SCHEME.match(path):  # a name the knowledge base was given (pydoc:json), no file
        where = title or path
    else:
        name = path.rsplit("/", 1)[-1]
        stem = name.rsplit(".", 1)[0] if "." in name else name
        same = {"", stem.casefold(), name.casefold(), path.casefold()}
        where = path if title.casefold() in same else f"{title} ({path})"
    section = source["section"]
    if title and section:  # a Markdown file's title is its first heading, its sections' first part
        section = "" if section == title else section.removeprefix(f"{title} > ")
    if section:
        where += f" > {section}"
    pages = source["pages"]
    if pages:
        where += f" (page{'s' if not pages.isdigit() else ''} {pages})"
    return where


def sources_list(sources: Sequence[Source]) -> str:
    """The sources as plain text, one line each, numbered as the answer cites them."""
    return "\n".join(f"[{n}] {source_place(s)}" for n, s in enumerate(sources, 1))


def sources_footer(sources: Sequence[Source]) -> str:
    """The text block that follows an answer for clients that show text only: the numbered sources."""
    return f"\n\n{FOOTER_HEADING}\n{sources_list(sources)}"


def readable_answer(answer: str, sources: Sequence[Source]) -> str:
    """An answer as a person reads it: numbered citations, then the sources they number."""
    text, _ = render_citations(answer, sources)
    return text + sources_footer(sources) if sources else text


def answer_content(
    text: str, sources: Sequence[Source], *, footer: bool = False
) -> list[dict[str, Any]]:
    """The closing message's content: the answer with numbered citations, each annotated with its chunk.

    With ``footer``, a second text block lists the sources for clients that show text only.
    """
    shown, spans = render_citations(text, sources)
    annotations: list[dict[str, Any]] = []
    for start, end, index in spans:
        source = sources[index]
        citation: dict[str, Any] = {
            "type": "citation",
            "title": source["title"],
            "start_index": start,
            "end_index": end,
            "cited_text": source["cited_text"],
            "extras": {k: source[k] for k in ("chunk_id", "source", "section", "pages")},
        }
        if source["source"] and source["source"].startswith(("http://", "https://")):
            citation["url"] = source["source"]
        annotations.append(citation)
    content: list[dict[str, Any]] = [{"type": "text", "text": shown, "annotations": annotations}]
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


EXTRACTED_NOTE = (
    "Extracted: the passages above are quoted from the sources as the searches found them; "
    "no model wrote this answer."
)
"""What a closing message says under an extracted answer, for people who read only its text."""


def noting_extracted(message: AIMessage) -> AIMessage:
    """A closing message with `EXTRACTED_NOTE` after its answer block (its first text block stays the answer)."""
    content = message.content
    blocks: list[Any] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    )
    note = {"type": "text", "text": f"\n\n{EXTRACTED_NOTE}"}
    if note in blocks:
        return message
    return message.model_copy(update={"content": [blocks[0], note, *blocks[1:]]})


def _holds(message: AIMessage, answer: str) -> bool:
    """Whether a reply holds the answer: as its text, or as an ``answer`` call's."""
    calls = [c for c in message.tool_calls if c["name"] == "answer"]
    texts = [str(c["args"].get("text") or "") for c in calls] or [answer_text(message.content)]
    return any(t.strip() == answer.strip() for t in texts)


def answer_kind(messages: Sequence[BaseMessage], answer: str | None) -> AnswerKind | None:
    """How the answer was made, from the last reply that holds it; ``None`` without an answer."""
    if not answer:
        return None
    for message in reversed(messages):
        if isinstance(message, AIMessage) and _holds(message, answer):
            kind = message.response_metadata.get(ANSWER_KIND_KEY)
            return EXTRACTED if kind == EXTRACTED else WRITTEN
    return WRITTEN
