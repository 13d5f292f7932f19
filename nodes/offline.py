"""The offline controller: a deterministic, tool-calling chat model that needs no network or key.

It follows the loop's protocol with plain text rules, as a baseline and for demos.
Its first turn searches each part of the question (filler words dropped; two things
compared are a part each) and the question's key terms. Its second turn answers or
gives up, and it writes nothing of its own: the answer is passages quoted from what
the searches returned, per question part the passages that match it best (see
`passage_score`: the similarity of their best sentence, the share of the part's words
they hold, and the rank the search gave them), each its best sentences, led by what
it documents and citing its chunk id. When no passage scores `MIN_SCORE` it gives up, and
so it does when the question names something the knowledge base never mentions
(`unknown_names`: "pandas", "django") and no passage answers it strongly.
Without tools (synthesis, answer rewrite) it replies with the same quotes. Every reply
says so in its ``response_metadata`` (`core.sources.ANSWER_KIND_KEY`), which is how a
result tells an extracted answer from a written one (`core.sources.answer_kind`).

In a conversation it answers the last question, reading only that question's search
results. A follow-up that only makes sense with the question before it (it starts
with "and", "what about"..., or refers back with "it", "its", "they", "this"...) is
searched and answered with the earlier question's subject added: after "How do I run
a coroutine with a timeout?", "what about its exceptions?" searches "run a coroutine
with a timeout its exceptions". Its own words are searched alone too, and a passage it
quotes must hold them: after "How do I roll back a release?", "and how do I scale it?"
answers with scaling, not the rollback again.

`MIN_SCORE`, the weights and how much is quoted were measured on the tune half of the
realistic evaluation set (`evaluation/README.md`, "The offline answer").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from arcana_loop.core.sources import ANSWER_KIND_KEY, EXTRACTED, named
from arcana_loop.grounding.local import content_terms
from arcana_loop.grounding.sentences import split_sentences
from arcana_loop.knowledge.embeddings_minilm import vocabulary_words
from arcana_loop.knowledge.errors import EmbedderUnavailable
from arcana_loop.knowledge.sections import document_title
from arcana_loop.nodes.replying import ReplyingChatModel
from arcana_loop.tools import answer, give_up, search
from arcana_loop.tools.chunks import entry_text, is_search_artifact

MIN_SCORE = 0.395
"""A passage scoring below this (`passage_score`) does not answer a part; none above it, and the controller gives up."""
MEANING_WEIGHT = 0.6
WORDS_WEIGHT = 0.3
RANK_WEIGHT = 0.1
PASSAGES_PER_PART = 3
"""Most passages quoted per question part: the best, and the next ones that score nearly as well."""
NEXT_PASSAGE_MARGIN = 0.2
"""How far below the best passage another may score and still be quoted."""
SENTENCES_PER_PASSAGE = 3
"""Sentences quoted from one passage, in its own order (and a member's signature line before them)."""
MIN_SENTENCE_CHARS = 16
NOTHING_MATCHES = (
    "nothing the searches found matches the question closely enough to quote "
    "(best passage {score:.2f}, below {threshold:.2f})"
)
NOTHING_FOUND = "the searches found nothing to quote"
SEARCHES_FAILED = "every search failed, so there is nothing to quote ({error})"
NO_SEARCH_TOOL = "no search tool was offered, so there is nothing to quote"
NEVER_MENTIONED = "the knowledge base never mentions {names}"
NAMED_UNKNOWN_MAX_SCORE = 0.6
"""A question naming something the knowledge base never mentions (`unknown_names`) is given up
unless a passage scores at least this: what was found answers another question."""
NO_ANSWER_TEXT = "The gathered information does not answer the question."

_FILLER = re.compile(
    r"\b(how (do|can|should) i|what (is|are|does)|can you|could you|please|tell me|explain|i want to|is there a way to)\b",
    re.IGNORECASE,
)
_PARTS = re.compile(
    r"\?\s+|;\s*|\s+and also\s+|,?\s+and (?:how|what|which|when|why)\s+", re.IGNORECASE
)
_FOLLOW_UP = re.compile(
    r"^\W*(?:and|also|but|so|then|what about|how about)\b|\b(?:it|its|it's|they|them|their|this|these|those)\b",
    re.IGNORECASE,
)
_LEAD = re.compile(r"^\W*(?:and|also|but|so|then|what about|how about)\b\s*", re.IGNORECASE)


_COMPARED = re.compile(
    r"\bdifferences? between (?:an? |the )?([\w.]+) and (?:an? |the )?([\w.]+)"
    r"|\b([\w.]+) (?:vs\.?|versus) ([\w.]+)",
    re.IGNORECASE,
)


def question_parts(question: str) -> list[str]:
    """Split a question into its parts and drop filler words from each.

    Two things compared ("the difference between a list and a tuple", "list vs tuple") are
    also a part each, so each is searched and quoted on its own.
    """
    parts = [
        p for p in (_FILLER.sub(" ", part).strip(" ?.!,") for part in _PARTS.split(question)) if p
    ]
    compared = [side for m in _COMPARED.finditer(question) for side in m.groups() if side]
    return list(dict.fromkeys(" ".join(p.split()) for p in [*parts, *compared])) or [
        question.strip()
    ]


@dataclass(frozen=True)
class Found:
    """A passage as the controller read it in a search result."""

    id: str
    subject: str
    """What it documents: the last step of its section path, else its document's title."""
    text: str
    rank: int
    """Its best 0-based position in a result."""


def subject_of(source: str | None, section: str | None) -> str:
    """What a passage documents, as a person names it: its section's last step, else its document's title.

    Never a path: ``guides/deploy.md`` gives ``deploy``, ``pydoc:asyncio`` ``asyncio``.
    """
    if section and section.strip():
        return section.rsplit(" > ", 1)[-1].strip()
    name = named(source)  # a text stored under a hash of itself has no name to lead with
    return document_title(name, {}) if name else ""


def _failed_searches(messages: Sequence[BaseMessage]) -> list[str]:
    """What each search that failed said (a tool message LangChain marks ``status="error"``)."""
    return [
        str(m.content)
        for m in messages
        if isinstance(m, ToolMessage) and m.name == search.NAME and m.status == "error"
    ]


def _results(messages: Sequence[BaseMessage]) -> list[Found]:
    """The passages of every search result so far: text from where it was shown, best rank seen.

    Read from each result's artifact (what the loop rendered it from), never from its
    text: a document line shaped like a result entry is only text of its passage.
    """
    texts: dict[str, tuple[str, str]] = {}
    ranks: dict[str, int] = {}
    for message in messages:
        if not isinstance(message, ToolMessage) or not is_search_artifact(message.artifact):
            continue
        content = message.content if isinstance(message.content, str) else ""
        for entry in message.artifact["entries"]:
            chunk_id, rank = entry["id"], entry["rank"]
            ranks[chunk_id] = min(rank, ranks.get(chunk_id, rank))
            text = entry_text(content, entry)
            if text is not None and text.strip():  # a later result points back instead
                texts[chunk_id] = (subject_of(entry["source"], entry["section"]), text)
    return [Found(i, subject, text, ranks[i]) for i, (subject, text) in texts.items()]


def search_queries(question: str, focus: str = "") -> list[str]:
    """What the first turn searches: each part of the question, then its key terms (what the wording may hide).

    ``focus``: a follow-up's own words, searched too (`current_question`): "and how do I
    scale it?" after a question about rolling back asks about scaling.
    """
    terms = " ".join(sorted(content_terms(question)))
    own = " ".join(sorted(content_terms(focus)))
    return [q for q in dict.fromkeys([*question_parts(question), terms, own]) if q]


def unknown_names(messages: Sequence[BaseMessage]) -> list[str]:
    """The names the question uses that the knowledge base never mentions, as its searches reported them.

    A search's result lists the query's words no chunk of its scope holds (its artifact's
    ``unmatched``); of those, a name is one that is not a common English word (a
    ``snake_case`` name, one of its words): ``pandas``, ``django``, ``taskgroup``. A plain
    word the documents happen not to use (``toppings``) is no sign the question is
    elsewhere. Without the word list (the onnx extra not installed), none is a name.
    """
    try:
        common = vocabulary_words()
    except EmbedderUnavailable:
        return []
    reported = dict.fromkeys(
        word
        for m in messages
        if isinstance(m, ToolMessage) and is_search_artifact(m.artifact)
        for word in m.artifact.get("unmatched", ())
    )
    return [
        word
        for word in reported
        if word.replace("_", "").isalpha()
        and any(_unaccented(part) not in common for part in word.split("_") if part)
    ]


def _unaccented(word: str) -> str:
    """`word` as the uncased vocabulary spells it: its accents taken off (``café`` is ``cafe``)."""
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))


def _overlap(part: str, text: str) -> float:
    terms = content_terms(part)
    return len(terms & content_terms(text)) / len(terms) if terms else 0.0


_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s|$)|^\s*(?:=+|-+)\s*$")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.)(?:\s|$)")
_CITATION_SHAPED = re.compile(r"\s*\[[^\]\s]+\]")


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$")
"""The line under a Markdown table's header (``|---|:--:|``)."""


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table_sentences(header: str, rows: Sequence[str]) -> list[str]:
    """A Markdown table as sentences, a row each (``service: api, port: 8080.``)."""
    names = _cells(header)
    sentences = []
    for row in rows:
        # a row may hold fewer cells than the header, or more: the pairs that exist are said
        pairs = [
            f"{name}: {value}" if name else value
            for name, value in zip(names, _cells(row), strict=False)
        ]
        said = ", ".join(pair for pair in pairs if pair.strip(": "))
        if said:
            sentences.append(said if said.endswith((".", "!", "?")) else said + ".")
    return sentences


def _prose(text: str) -> str:
    """A passage's text without what reads badly on one line.

    Headings, code blocks and interpreter sessions go; a table's rows become sentences
    (its pipes and rules joined on one line read as noise).
    """
    kept, fenced = [], False
    lines = text.splitlines()
    at = 0
    while at < len(lines):
        line = lines[at]
        at += 1
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced:
            continue
        elif "|" in line and at < len(lines) and _TABLE_RULE.match(lines[at]):
            end = at + 1
            while end < len(lines) and "|" in lines[end] and lines[end].strip():
                end += 1
            kept.extend(_table_sentences(line, lines[at + 1 : end]))
            at = end
        elif not (_HEADING.match(line) or _PROMPT.match(line)):
            kept.append(line)
    return "\n".join(kept)


def quotable_sentences(text: str) -> list[str]:
    """A passage's sentences as an answer may quote them, in order: one line each, no markup of their own.

    Headings go (the subject names the section), and so do code blocks, interpreter
    sessions, the marks a search leaves for text it left out (``[...]``) and bracketed
    tokens shaped like a citation (``[deadbeef]`` would read as a citation of a
    passage no search returned).
    """
    sentences = []
    for sentence, _, _ in split_sentences(_prose(text)):
        quoted = _CITATION_SHAPED.sub("", " ".join(sentence.split())).strip()
        if len(quoted) >= MIN_SENTENCE_CHARS:
            sentences.append(quoted)
    return sentences


def passage_score(meaning: float, words: float, rank: int) -> float:
    """How well a passage answers a question part: meaning, shared words and search rank, 0..1.

    ``meaning`` is the passage's best sentence's similarity to the part; ``words`` the
    share of the part's content words the passage (subject included) holds.
    """
    return MEANING_WEIGHT * max(0.0, meaning) + WORDS_WEIGHT * words + RANK_WEIGHT / (1 + rank)


def _similarities(parts: Sequence[str], sentences: Sequence[str]) -> Any:
    import numpy as np

    from arcana_loop.knowledge.embeddings import default_embeddings

    embedder = default_embeddings()
    q = np.asarray(embedder.embed_array(list(parts)))
    m = np.asarray(embedder.embed_array(list(sentences)))
    return q @ m.T


def _is_signature(sentence: str, subject: str) -> bool:
    """Whether a passage's first sentence is the signature of the callable it documents."""
    return _named_by(sentence, subject) and "(" in sentence and not sentence.endswith(".")


def _named_by(sentence: str, subject: str) -> bool:
    """Whether a sentence starts with the name of what its passage documents (a signature: ``json.dumps(obj, ...)``)."""
    name = subject.rsplit(".", 1)[-1]
    return bool(name) and re.match(rf"[\w.]*\b{re.escape(name)}\b", sentence) is not None


@dataclass(frozen=True)
class Quote:
    """Sentences of one passage that answer a part, with how well the passage does."""

    found: Found
    sentences: tuple[str, ...]
    score: float
    signature: str | None = None
    """The passage's signature line (``json.dumps(obj, *, ...)``), when it documents a callable."""

    def line(self) -> str:
        """The quote as an answer line: its subject (or signature), its sentences, its passage id cited."""
        text = " ".join(self.sentences)
        subject = self.found.subject
        if self.signature is not None:
            lead = f"{self.signature}: "
        else:
            lead = f"{subject}: " if subject and not _named_by(text, subject) else ""
        if text[-1:] in ".!?":
            return f"{lead}{text[:-1]} [{self.found.id}]{text[-1]}"
        return f"{lead}{text} [{self.found.id}]"


def _quote(
    part: str, found: Found, sentences: Sequence[str], meaning: Sequence[float], focus: str = ""
) -> Quote:
    """A passage's best sentences for one part, and how well it answers it.

    ``meaning`` is each sentence's similarity to the part. The words shared are the
    part's, or a follow-up's own (``focus``) when it has any: the earlier subject the
    part carries sets the meaning, and what the follow-up adds must be there.
    """
    words_of = focus if content_terms(focus) else part
    scored = [
        (meaning[i] + WORDS_WEIGHT * _overlap(words_of, s), i) for i, s in enumerate(sentences)
    ]
    # a member's signature says how to call it and names its parameters: it leads the quote
    signature = sentences[0] if _is_signature(sentences[0], found.subject) else None
    ranked = sorted((s for s in scored if signature is None or s[1] > 0), reverse=True)
    chosen = tuple(
        sentences[i] for _, i in sorted(ranked[:SENTENCES_PER_PASSAGE], key=lambda s: s[1])
    )
    if not chosen:  # the signature is all the passage says
        chosen, signature = (sentences[0],), None
    words = _overlap(words_of, f"{found.subject} {found.text}")
    return Quote(found, chosen, passage_score(max(meaning), words, found.rank), signature)


@dataclass(frozen=True)
class Extract:
    """What the passages found give a question: the quotes as an answer, and the best passage's score."""

    text: str | None
    """The answer, one quote a line, each citing its chunk id; ``None`` when no passage scores `MIN_SCORE`."""
    best: float | None
    """The best passage's score over the question's parts; ``None`` when there was nothing to quote."""


def extract(question: str, chunks: Sequence[Found], focus: str = "") -> Extract:
    """Quote, for each part of the question, the passages that answer it best (`PASSAGES_PER_PART`).

    ``focus``: a follow-up's own words (see `_quote`).
    """
    passages = [(f, s) for f in chunks if (s := quotable_sentences(f.text))]
    if not passages:
        return Extract(None, None)
    parts = question_parts(question)
    similar = _similarities(parts, [f"{f.subject} {s}" for f, ss in passages for s in ss])
    ranked: list[list[Quote]] = []
    for index, part in enumerate(parts):
        quotes, start = [], 0
        for found, sentences in passages:
            row = [float(x) for x in similar[index][start : start + len(sentences)]]
            quotes.append(_quote(part, found, sentences, row, focus))
            start += len(sentences)
        ranked.append(sorted(quotes, key=lambda q: q.score, reverse=True))
    best = max(quotes[0].score for quotes in ranked)
    if best < MIN_SCORE:
        return Extract(None, best)
    lines: list[str] = []
    quoted: set[object] = set()
    for quotes in ranked:  # each part its best passages, even a part none answers well
        for quote in quotes[:PASSAGES_PER_PART]:
            if quote.score < quotes[0].score - NEXT_PASSAGE_MARGIN:
                break
            if quote is not quotes[0] and not _says(focus, quote.found):
                continue  # a follow-up's passages beside the best must hold what it adds
            # two hits of one section read as the same text: quoted once
            if quote.found.id not in quoted and quote.sentences not in quoted:
                quoted.update((quote.found.id, quote.sentences))
                lines.append(quote.line())
    return Extract("\n".join(lines), best)


def _says(focus: str, found: Found) -> bool:
    """Whether a passage holds a word of a follow-up's own (or there is no follow-up)."""
    return not content_terms(focus) or _overlap(focus, f"{found.subject} {found.text}") > 0


def is_follow_up(question: str) -> bool:
    """Whether a question refers back to an earlier one ("and its timeout?", "what about them?")."""
    return _FOLLOW_UP.search(question) is not None


def with_subject(question: str, earlier: str) -> str:
    """A follow-up with the earlier question's subject added (the question itself otherwise)."""
    if not earlier or not is_follow_up(question):
        return question
    subject = " ".join(question_parts(earlier))
    return f"{subject} {_LEAD.sub('', question)}".strip()


def current_question(messages: Sequence[BaseMessage]) -> tuple[str, str, int]:
    """The question to answer, follow-ups completed with the earlier subject; a follow-up's own words; where it was asked.

    The question is the last human message that is the user's (not one of the loop's
    own instructions); the position is that message's, so only later results count.
    The own words are empty for a question that is no follow-up.
    """
    from arcana_loop.nodes.conversation import is_user_turn

    question, own, position = "", "", 0
    for index, message in enumerate(messages):
        if is_user_turn(message):
            text = message.text
            completed = with_subject(text, question)
            own = _LEAD.sub("", text).strip() if completed != text else ""
            question, position = completed, index
    return question, own, position


def _call(name: str, index: int, **args: Any) -> ToolCall:
    return {"name": name, "args": args, "id": f"offline_{index}_{name}", "type": "tool_call"}


def _reply(text: str, calls: Sequence[ToolCall] = ()) -> AIMessage:
    """A reply that says it writes nothing of its own: what it answers is extracted."""
    return AIMessage(
        content=text, tool_calls=list(calls), response_metadata={ANSWER_KIND_KEY: EXTRACTED}
    )


class OfflineController(ReplyingChatModel):
    """Deterministic controller: one turn of searches, then an extracted answer or a give-up."""

    offered: frozenset[str] = frozenset()
    """The names of the tools bound: it calls no other (none bound: it answers in text)."""

    @property
    def _llm_type(self) -> str:
        return "offline"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Return this model with tool calling on, for the tools it was given."""
        names = frozenset(convert_to_openai_tool(t)["function"]["name"] for t in tools)
        return self.model_copy(update={"offered": names})

    def _reply(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        """This turn's decision: the searches, then an extracted answer or a give-up."""
        question, own, asked = current_question(messages)
        messages = messages[asked:]  # this question's turns only
        searched = any(
            c["name"] == search.NAME
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
        )
        if self.offered and search.NAME not in self.offered:
            if give_up.NAME in self.offered:
                return _reply("", [_call(give_up.NAME, 1, reason=NO_SEARCH_TOOL)])
            return _reply(NO_ANSWER_TEXT)
        if self.offered and not searched:
            queries = search_queries(question, own)
            calls = [_call(search.NAME, i, query=q) for i, q in enumerate(queries)]
            return _reply("", calls)
        results = _results(messages)
        found = extract(question, results, own)
        if not self.offered:
            return _reply(found.text or NO_ANSWER_TEXT)
        failed = _failed_searches(messages)
        if not results and failed:
            reason = SEARCHES_FAILED.format(error=failed[0])
            return _reply("", [_call(give_up.NAME, 1, reason=reason)])
        names = unknown_names(messages)
        if names and (found.best is None or found.best < NAMED_UNKNOWN_MAX_SCORE):
            reason = NEVER_MENTIONED.format(names=", ".join(names))
            return _reply("", [_call(give_up.NAME, 1, reason=reason)])
        if found.text is None:
            reason = (
                NOTHING_FOUND
                if found.best is None
                else NOTHING_MATCHES.format(score=found.best, threshold=MIN_SCORE)
            )
            return _reply("", [_call(give_up.NAME, 1, reason=reason)])
        return _reply("", [_call(answer.NAME, 1, text=found.text)])
