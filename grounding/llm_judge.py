"""The LLM judge: one model call decomposes the answer into claims and judges each against the chunks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from arcana_loop.core.text import frame_text
from arcana_loop.core.usage import streams_usage
from arcana_loop.grounding.prompts import JUDGE_SYSTEM_PROMPT, JUDGE_USER_PROMPT
from arcana_loop.grounding.types import VERDICTS, GroundingError, GroundingResult

NAME = "llm_judge"
DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = 2048


def parse_judge_json(text: str) -> dict[str, Any]:  # noqa: C901  # a small scanner: one branch per character class
    """Return the first balanced JSON object in a reply (braces inside strings do not count).

    Raises:
        GroundingError: when there is no object, it is unbalanced, or it does not decode to an object.
    """
    start = text.find("{")
    if start < 0:
        raise GroundingError("invalid judge response: no JSON object")
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                try:
                    value = json.loads(text[start : index + 1])
                except json.JSONDecodeError as exc:
                    raise GroundingError(f"invalid judge response: {exc}") from exc
                if not isinstance(value, dict):
                    raise GroundingError("invalid judge response: not an object")
                return value
    raise GroundingError("invalid judge response: unbalanced braces")


def result_from_claims(
    answer: str, chunks: Sequence[dict[str, Any]], claims: Any
) -> GroundingResult:
    """Build a grounding result from judged claims: score = supported / claims."""
    if not isinstance(claims, list):
        raise GroundingError("invalid judge response: claims is not a list")
    kept: list[dict[str, Any]] = []
    for raw in claims:
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("text"), str)
            or not raw["text"].strip()
        ):
            continue
        verdict_text = str(raw.get("verdict") or "").strip().lower()
        verdict = verdict_text if verdict_text in VERDICTS else "unsupported"
        indices = [
            i
            for i in raw.get("chunk_indices") or []
            if isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= len(chunks)
        ]
        sources = [
            {
                "chunk_id": None if chunks[i - 1].get("id") is None else str(chunks[i - 1]["id"]),
                "score": 1.0,
            }
            for i in indices
        ]
        start = answer.find(raw["text"])
        span = (start, start + len(raw["text"])) if start >= 0 else (None, None)
        kept.append(
            {
                "text": raw["text"],
                "verdict": verdict,
                "start": span[0],
                "end": span[1],
                "sources": sources,
            }
        )
    if not kept:
        if claims:  # claims were sent, none of them usable: that is garbage, not a clean bill
            raise GroundingError("invalid judge response: no claim has a text")
        return GroundingResult(score=1.0)
    score = sum(c["verdict"] == "supported" for c in kept) / len(kept)
    spans = [{**c, "score": 1.0} for c in kept if c["start"] is not None]
    return GroundingResult.from_mapping(
        {
            "score": score,
            "faithful_spans": [s for s in spans if s["verdict"] == "supported"],
            "hallucinated_spans": [s for s in spans if s["verdict"] != "supported"],
            "claims": kept,
        }
    )


def _claims_of(reply: dict[str, Any]) -> Any:
    """The reply's claims; a reply without a ``claims`` key is not a judgement at all."""
    if "claims" not in reply:
        raise GroundingError("invalid judge response: no 'claims' key")
    return reply["claims"]


class LLMJudgeGrounder:
    """Grounds an answer with one call to any LangChain chat model."""

    name = NAME

    def __init__(
        self,
        judge_model: BaseChatModel | str | None = None,
        judge_temperature: float = DEFAULT_TEMPERATURE,
        judge_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self.judge_model = judge_model
        self.judge_temperature = judge_temperature
        self.judge_max_tokens = judge_max_tokens

    def _model(self, override: Any) -> BaseChatModel:
        model = override if override is not None else self.judge_model
        if model is None:
            raise GroundingError("the llm_judge grounder needs judge_model")
        if isinstance(model, str):
            from langchain.chat_models import init_chat_model

            created: BaseChatModel = init_chat_model(model)
            return streams_usage(created)
        if not isinstance(model, BaseChatModel):
            raise GroundingError(
                f"judge_model must be a chat model or a 'provider:model' string, got {type(model).__name__}"
            )
        return streams_usage(model)  # its tokens count in a streamed run too

    def _messages(self, answer: str, chunks: Sequence[dict[str, Any]], question: str) -> list[Any]:
        # framed, so a chunk's text cannot pose as another numbered chunk
        numbered = "\n\n".join(
            f'<chunk n="{i}">\n{frame_text(str(c.get("text") or ""), "chunk")}\n</chunk>'
            for i, c in enumerate(chunks, start=1)
        )
        return [
            SystemMessage(content=JUDGE_SYSTEM_PROMPT),
            HumanMessage(
                content=JUDGE_USER_PROMPT.format(question=question, answer=answer, chunks=numbered)
            ),
        ]

    def _kwargs(self, opts: dict[str, Any]) -> dict[str, Any]:
        return {
            "temperature": opts.get("judge_temperature", self.judge_temperature),
            "max_tokens": opts.get("judge_max_tokens", self.judge_max_tokens),
        }

    def ground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> GroundingResult:
        """Judge the answer's claims against the chunks."""
        if (settled := _without_judge(answer, chunks)) is not None:
            return settled
        reply = self._model(opts.get("judge_model")).invoke(
            self._messages(answer, chunks, question), **self._kwargs(opts)
        )
        return _judged(answer, chunks, reply)

    async def aground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> GroundingResult:
        """Judge the answer's claims against the chunks on the event loop."""
        if (settled := _without_judge(answer, chunks)) is not None:
            return settled
        reply = await self._model(opts.get("judge_model")).ainvoke(
            self._messages(answer, chunks, question), **self._kwargs(opts)
        )
        return _judged(answer, chunks, reply)


def _without_judge(answer: str, chunks: list[dict[str, Any]]) -> GroundingResult | None:
    """The result when no call is needed: an empty answer is grounded, one without chunks is not."""
    if not answer.strip():
        return GroundingResult(score=1.0)
    if not chunks:
        return GroundingResult(score=0.0)
    return None


def _judged(answer: str, chunks: list[dict[str, Any]], reply: Any) -> GroundingResult:
    """The result of the judge's reply: its claims scored against the chunks, with its usage."""
    return _with_usage(
        result_from_claims(answer, chunks, _claims_of(parse_judge_json(str(reply.content)))),
        reply,
    )


def _with_usage(result: GroundingResult, reply: Any) -> GroundingResult:
    """Attach the judge reply's token counts (from its usage metadata) to the result."""
    metadata = getattr(reply, "usage_metadata", None) or {}
    counts = {
        k: int(metadata.get(k) or 0) for k in ("input_tokens", "output_tokens", "total_tokens")
    }
    result.usage = counts if any(counts.values()) else None
    return result
