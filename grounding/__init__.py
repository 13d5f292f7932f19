"""Grounding: score an answer against the chunks it came from, claim by claim."""

from arcana_loop.grounding.types import Claim, GroundingError, GroundingResult, Source, Span

__all__ = ["Claim", "GroundingError", "GroundingResult", "Source", "Span"]
