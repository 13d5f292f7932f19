"""Sentence splitting with exact offsets (``text[start:end] == sentence``)."""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n\s*(?=[-*+•]|\d+[.)]\s)|\n{2,}")


def split_sentences(text: str) -> list[tuple[str, int, int]]:
    """Split after ``.``, ``!`` or ``?`` followed by whitespace, before list items, and at blank lines."""
    sentences = []
    start = 0
    for match in [*_BOUNDARY.finditer(text), None]:
        end = match.start() if match else len(text)
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            offset = start + piece.index(stripped)
            sentences.append((stripped, offset, offset + len(stripped)))
        if match:
            start = match.end()
    return sentences
