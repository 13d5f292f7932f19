"""Labelled cases: questions with their relevant chunks or sources, key facts and expected outcome.

A case file is JSON: ``{"name": ..., "collection": ..., "cases": [case, ...]}`` (a bare
list of cases is accepted too). Retrieval evaluation needs ``evidence``,
``relevant_ids`` or ``relevant_sources``; loop evaluation needs ``key_facts`` or
``reference`` and ``expected``. A chunk matches a source when its
``metadata["source"]`` equals it or is a part of it (``pydoc:asyncio#run`` is part
of ``pydoc:asyncio``), and an evidence passage when it contains the passage, or one
of its alternatives (compared normalised; a passage cut by a chunk boundary counts
where the chunk holds most of it).

Two sets ship for the demo corpus: the *lookup* set (`PYTHON_DOCS_EVAL`), whose
questions mostly name the function that answers them, and the *realistic* set
(`PYTHON_DOCS_REALISTIC`), written as people with a task ask, each case in the
``tune`` or the ``test`` split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Literal

Outcome = Literal["answered", "gave_up"]
OUTCOMES: tuple[Outcome, ...] = ("answered", "gave_up")

DATA_DIR = Path(__file__).parent / "data"
PYTHON_DOCS_EVAL = DATA_DIR / "python_docs_eval.json"
"""The lookup set for the demo corpus (``knowledge.stdlib_docs``): questions naming their answer."""
PYTHON_DOCS_REALISTIC = DATA_DIR / "python_docs_realistic.json"
MIXED_CORPUS = DATA_DIR / "mixed"
"""A folder as a user's own is: Markdown with fences and a table, reStructuredText, an HTML
page with navigation and a footer, a three-page PDF with running headers."""
MIXED_QUESTIONS = DATA_DIR / "mixed_questions.json"
"""Questions about `MIXED_CORPUS`, frozen before any search over it: file, evidence, page."""
"""The realistic set for the demo corpus: questions as people with a task ask them."""
EVAL_SETS = {"lookup": PYTHON_DOCS_EVAL, "realistic": PYTHON_DOCS_REALISTIC}
"""The shipped sets by name (``arcana-loop eval --set``)."""
SPLITS = ("tune", "test")

KeyFact = str | list[str]
"""A key fact: a string, or a list of alternatives of which an answer must hold one."""
Evidence = str | list[str]
"""An evidence passage, or a list of alternative passages that state the same fact."""


@dataclass
class EvalCase:
    """One labelled question."""

    id: str
    question: str
    key_facts: list[KeyFact] = field(default_factory=list)
    """What a correct answer contains (compared case- and punctuation-insensitively): each
    entry a string, or a list of alternatives of which one must appear."""
    reference: str | None = None
    """A reference answer, for the LLM judge; optional."""
    relevant_ids: list[str] = field(default_factory=list)
    relevant_sources: list[str] = field(default_factory=list)
    expected: Outcome = "answered"
    """``gave_up`` for a question the collection cannot answer."""
    kind: str = "single"
    """Free label for breakdowns: ``single``, ``multi``, ``howto``, ``why``, ``unanswerable``..."""
    evidence: list[Evidence] = field(default_factory=list)
    """Passages of the corpus that answer the question (one per part of a multi-part one);
    an entry may list alternatives, passages stating the same fact, of which a chunk
    must hold one."""
    modules: list[str] = field(default_factory=list)
    """What the question is about (for coverage counts)."""
    names_api: bool = False
    """Whether the question names the function or class that answers it."""
    split: str | None = None
    """``tune`` (used to tune retrieval and the offline controller) or ``test`` (reported only)."""

    def __post_init__(self) -> None:
        ident: Any = self.id  # typed as str, but case files hold any JSON
        question: Any = self.question
        if not isinstance(ident, str) or not ident.strip():
            raise ValueError(f"case id must be a non-empty string, got {ident!r}")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"case {self.id!r}: question must be a non-empty string")
        if self.expected not in OUTCOMES:
            raise ValueError(
                f"case {self.id!r}: expected must be one of {OUTCOMES}, got {self.expected!r}"
            )
        for name in ("relevant_ids", "relevant_sources", "modules"):
            value: Any = getattr(self, name)
            if not isinstance(value, list) or not all(
                isinstance(v, str) and v.strip() for v in value
            ):
                raise ValueError(f"case {self.id!r}: {name} must be a list of non-empty strings")
        evidence: Any = self.evidence
        if not isinstance(evidence, list) or not all(_is_key_fact(e) for e in evidence):
            raise ValueError(
                f"case {self.id!r}: evidence must be a list of passages or of non-empty lists of passages"
            )
        facts: Any = self.key_facts
        if not isinstance(facts, list) or not all(_is_key_fact(f) for f in facts):
            raise ValueError(
                f"case {self.id!r}: key_facts must be a list of strings or of non-empty lists of strings"
            )
        if self.split is not None and self.split not in SPLITS:
            raise ValueError(
                f"case {self.id!r}: split must be one of {SPLITS} or null, got {self.split!r}"
            )
        if self.reference is not None and not isinstance(self.reference, str):
            raise ValueError(f"case {self.id!r}: reference must be a string or null")
        if self.expected == "gave_up" and (self.key_facts or self.reference):
            raise ValueError(
                f"case {self.id!r}: a case expected to give up cannot have key facts or a reference"
            )

    @property
    def relevant(self) -> tuple[str, list[str]]:
        """What relevance is labelled by (``"evidence"``, ``"id"`` or ``"source"``) and the relevant keys."""
        if self.evidence:
            return "evidence", [evidence_key(i) for i in range(len(self.evidence))]
        return ("id", self.relevant_ids) if self.relevant_ids else ("source", self.relevant_sources)

    def to_dict(self) -> dict[str, Any]:
        """The case as a JSON-ready mapping."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], index: int = 0) -> EvalCase:
        """Build a case from a mapping, rejecting unknown fields."""
        if not isinstance(data, Mapping):
            raise ValueError(f"case {index} must be a JSON object, got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"case {data.get('id', index)!r}: unknown field(s) {sorted(unknown)}")
        return cls(**{"id": f"case-{index}", **data})


@dataclass
class CaseSet:
    """A named list of cases over one collection."""

    cases: list[EvalCase]
    name: str = "cases"
    collection: str | None = None
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The case set as a case file's JSON object."""
        return {
            "name": self.name,
            "collection": self.collection,
            "description": self.description,
            "cases": [c.to_dict() for c in self.cases],
        }


def load_cases(path: str | Path) -> CaseSet:
    """Read a case file.

    Raises:
        FileNotFoundError: when there is no such file.
        ValueError: for a malformed file, duplicate ids or an invalid case.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    raw = data if isinstance(data, list) else data.get("cases") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of cases or an object with 'cases'")
    cases = [EvalCase.from_mapping(c, i) for i, c in enumerate(raw)]
    ids = [c.id for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate case ids {duplicates}")
    meta = data if isinstance(data, dict) else {}
    return CaseSet(
        cases,
        name=meta.get("name", Path(path).stem),
        collection=meta.get("collection"),
        description=meta.get("description", ""),
    )


def save_cases(cases: CaseSet | Iterable[EvalCase], path: str | Path, **meta: Any) -> Path:
    """Write cases as a case file (``meta``: ``name``, ``collection``, ``description``)."""
    case_set = cases if isinstance(cases, CaseSet) else CaseSet(list(cases), **meta)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(case_set.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return target


def as_cases(cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]]) -> list[EvalCase]:
    """Accept a case set, cases, or plain mappings."""
    items = cases.cases if isinstance(cases, CaseSet) else cases
    return [
        c if isinstance(c, EvalCase) else EvalCase.from_mapping(c, i) for i, c in enumerate(items)
    ]


def _is_key_fact(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, str) and v.strip() for v in value)
    )


def evidence_key(index: int) -> str:
    """The relevance key of a case's evidence passage number `index`."""
    return f"evidence:{index}"


_NOT_WORD = re.compile(r"\W+")
MIN_PASSAGE_SHARE = 0.6
"""A chunk holding at least this share of a passage (cut by a chunk boundary) holds it."""


def _folded(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


def alternatives(evidence: Evidence) -> list[str]:
    """The passages an evidence entry accepts: itself, or each of its alternatives."""
    return [evidence] if isinstance(evidence, str) else list(evidence)


def holds_passage(text: str, passage: str) -> bool:
    """Whether a chunk's text holds an evidence passage (normalised; a boundary may cut it)."""
    haystack, needle = _folded(text), _folded(passage)
    if needle in haystack:
        return True
    match = SequenceMatcher(None, haystack, needle, autojunk=False).find_longest_match(
        0, len(haystack), 0, len(needle)
    )
    return match.size >= MIN_PASSAGE_SHARE * len(needle) and (
        match.b == 0 or match.b + match.size == len(needle)
    )


def chunk_key(chunk: Mapping[str, Any], by: str, case: EvalCase | None = None) -> str:
    """A retrieved chunk's relevance key: its id, its document source, or the evidence it holds."""
    if by == "evidence":
        passages = case.evidence if case is not None else []
        text = str(chunk.get("text", ""))
        return next(
            (
                evidence_key(i)
                for i, entry in enumerate(passages)
                if any(holds_passage(text, p) for p in alternatives(entry))
            ),
            "",
        )
    if by == "id":
        return str(chunk["id"])
    metadata = chunk.get("metadata") or {}
    source = str(metadata.get("source") or chunk.get("source") or chunk.get("document_id") or "")
    labelled = case.relevant_sources if case is not None else []
    return next((s for s in labelled if source.startswith(f"{s}#")), source)
