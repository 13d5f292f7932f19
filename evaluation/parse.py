"""Reading JSON objects out of model replies that may wrap them in prose or code fences."""

from __future__ import annotations

import json
from typing import Any


class ReplyParseError(ValueError):
    """A model reply that holds no usable JSON object."""


def parse_json_object(text: Any) -> dict[str, Any]:
    """Return the first JSON object in a reply, skipping prose, code fences and trailing text.

    Raises:
        ReplyParseError: when the reply holds no JSON object.
    """
    if not isinstance(text, str):
        raise ReplyParseError(f"the reply is {type(text).__name__}, not text")
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    raise ReplyParseError(f"no JSON object in the reply: {text[:120]!r}")


def reply_text(content: Any) -> str:
    """Return a chat reply's text, joining the text parts of a list content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else str(p.get("text", ""))
            for p in content
            if isinstance(p, str | dict)
        )
    return str(content)
