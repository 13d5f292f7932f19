"""Token usage of streamed model calls, for every part of the loop that makes a chat model.

It lives in core, not beside the loop's model boundary in ``nodes.models``: the LLM
judge in ``grounding`` builds its own chat model, and grounding never imports nodes.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel


def streams_usage(model: BaseChatModel) -> BaseChatModel:
    """Return the model set to report its token usage when it streams, unless its owner chose.

    A run streamed for its tokens (``on_token``, a server client's ``messages`` stream)
    streams every model call. LangChain's OpenAI client asks for a stream's usage
    (``stream_options.include_usage``) by default only from OpenAI itself: pointed at an
    OpenAI-compatible server (``base_url``, ``OPENAI_BASE_URL``), it leaves ``stream_usage``
    unset and the server sends no usage, so the run would count no tokens and
    ``max_tokens_total`` would never stop it. A ``stream_usage`` set on the model is kept.
    """
    if "stream_usage" in type(model).model_fields and getattr(model, "stream_usage", False) is None:
        return model.model_copy(update={"stream_usage": True})
    return model
