"""The grounding result: a score, spans of the answer with verdicts, and their sources."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Verdict = Literal["supported", "unsupported", "contradicted"]
VERDICTS: tuple[Verdict, ...] = ("supported", "unsupported", "contradicted")


class GroundingError(ValueError):
    """A grounder result or judge reply that cannot be read."""


@dataclass
class Source:
    """A chunk that supports (or contradicts) a span, and the search that first found it."""

    chunk_id: str | None
    score: float
    search_iteration: int | None = None
    search_query: str | None = None


@dataclass
class Span:
    """A piece of the answer: ``answer[start:end] == text``."""

    text: str
    start: int
    end: int
    score: float
    verdict: Verdict
    sources: list[Source] = field(default_factory=list)


@dataclass
class Claim:
    """A claim of the answer with its verdict; ``start``/``end`` are ``None`` when not found verbatim."""

    text: str
    verdict: Verdict
    start: int | None = None
    end: int | None = None
    sources: list[Source] = field(default_factory=list)


@dataclass
class GroundingResult:
    """How faithful an answer is to its chunks (``score`` 0.0-1.0, higher is more faithful)."""

    score: float
    faithful_spans: list[Span] = field(default_factory=list)
    hallucinated_spans: list[Span] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    usage: dict[str, int] | None = None
    """Tokens the grounder's model calls used (``input_tokens``, ``output_tokens``, ``total_tokens``),
    when it made any; the loop adds them to the run's ``usage`` under ``judge``."""

    def to_dict(self) -> dict[str, Any]:
        """Return plain JSON data."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, data: Any) -> GroundingResult:
        """Validate a grounder's return value (a `GroundingResult` or a mapping of the same shape).

        Raises:
            GroundingError: for anything else, a missing or out-of-range score, or malformed spans.
        """
        if isinstance(data, GroundingResult):
            data = data.to_dict()
        if not isinstance(data, Mapping):
            raise GroundingError(
                f"a grounder returned {type(data).__name__}, not a grounding result"
            )
        score = _score(data.get("score"), "score")
        try:
            return cls(
                score=score,
                faithful_spans=[_span(s) for s in data.get("faithful_spans") or []],
                hallucinated_spans=[_span(s) for s in data.get("hallucinated_spans") or []],
                claims=[_claim(c) for c in data.get("claims") or []],
                usage=_usage(data.get("usage")),
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise GroundingError(f"malformed grounding result: {exc}") from exc


def _usage(value: Any) -> dict[str, int] | None:
    """Keep a grounder's token counts when they are counts; anything else is dropped."""
    if not isinstance(value, Mapping):
        return None
    counts = {
        k: v
        for k, v in value.items()
        if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }
    return counts or None


def _score(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise GroundingError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _verdict(value: Any) -> Verdict:
    return value if value in VERDICTS else "unsupported"


def _sources(items: Any) -> list[Source]:
    return [
        Source(
            chunk_id=None if s.get("chunk_id") is None else str(s["chunk_id"]),
            score=_score(s.get("score", 1.0), "source score"),
            search_iteration=s.get("search_iteration"),
            search_query=s.get("search_query"),
        )
        for s in items or []
    ]


def _span(data: Mapping[str, Any]) -> Span:
    return Span(
        text=str(data["text"]),
        start=int(data["start"]),
        end=int(data["end"]),
        score=_score(data.get("score", 1.0), "span score"),
        verdict=_verdict(data.get("verdict", "supported")),
        sources=_sources(data.get("sources")),
    )


def _claim(data: Mapping[str, Any]) -> Claim:
    return Claim(
        text=str(data["text"]),
        verdict=_verdict(data.get("verdict")),
        start=data.get("start"),
        end=data.get("end"),
        sources=_sources(data.get("sources")),
    )


@runtime_checkable
class Grounder(Protocol):
    """Anything that grounds an answer: ``ground(answer, chunks, *, question, **opts)``."""

    def ground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> GroundingResult | Mapping[str, Any]:
        """Score ``answer`` against ``chunks``."""
        ...


@runtime_checkable
class AsyncGrounder(Protocol):
    """A grounder that does I/O: ``aground(answer, chunks, *, question, **opts)``."""

    async def aground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> GroundingResult | Mapping[str, Any]:
        """Score ``answer`` against ``chunks`` on the event loop."""
        ...
