"""Grounders by object, by function, or by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KNOWN = ("local", "llm_judge")


class FunctionGrounder:
    """Wraps a plain function ``(answer, chunks, *, question, **opts) -> result``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "function")

    def ground(
        self, answer: str, chunks: list[dict[str, Any]], *, question: str, **opts: Any
    ) -> Any:
        """Call the function."""
        return self.fn(answer, chunks, question=question, **opts)


def resolve_grounder(spec: Any, **options: Any) -> Any:
    """Return a grounder for ``None``, an object with ``ground``/``aground``, a function, or a name.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything else.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec == "local":
            from arcana_loop.grounding.local import HeuristicSentenceGrounder

            return HeuristicSentenceGrounder(**options)
        if spec == "llm_judge":
            from arcana_loop.grounding.llm_judge import LLMJudgeGrounder

            return LLMJudgeGrounder(**options)
        raise ValueError(f"unknown grounder {spec!r}; known grounders: {', '.join(KNOWN)}")
    if hasattr(spec, "ground") or hasattr(spec, "aground"):
        return spec
    if callable(spec):
        return FunctionGrounder(spec)
    raise TypeError(
        f"a grounder must be a name ({', '.join(KNOWN)}), an object with ground(), or a function"
    )


def grounder_name(grounder: Any) -> str:
    """Return the name used in events for a grounder."""
    name = getattr(grounder, "name", None)
    return name if isinstance(name, str) else type(grounder).__name__
