"""LangChain objects made from a ``provider:model`` spec, each way that fails said in one line.

The knowledge base makes its provider embedders this way (``init_embeddings``) and the
loop its chat models (``init_chat_model``). LangChain says a missing provider package
with an `ImportError` and a spec it cannot read with a `ValueError`; each caller names
these in its own words and with its own error type (`ProviderErrors`). This module
imports nothing of the project, so both layers can share it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

Made = TypeVar("Made")


@dataclass(frozen=True)
class ProviderErrors:
    """How a caller says each failure: its exception type and one message template each.

    A template has ``{spec}`` (the spec's repr) and ``{exc}`` (the exception's text);
    `failed` also ``{kind}`` (the exception's type name).
    """

    error: type[Exception]
    missing_package: str
    """A package the provider needs is not installed."""
    unusable: str
    """LangChain cannot read the spec (an unknown provider, say)."""
    failed: str | None = None
    """Any other exception (a provider client without its API key, say); ``None`` lets it through."""


def from_provider(
    init: Callable[..., Made], spec: str, kwargs: Mapping[str, Any], errors: ProviderErrors
) -> Made:
    """Return ``init(spec, **kwargs)``; a failure raises ``errors.error`` with its message.

    Args:
        init: LangChain's factory (``init_chat_model``, ``init_embeddings``).
        spec: the ``provider:model`` string.
        kwargs: the factory's keywords.
        errors: the caller's error type and messages.
    """
    try:
        return init(spec, **kwargs)
    except ImportError as exc:
        raise errors.error(errors.missing_package.format(spec=repr(spec), exc=exc)) from exc
    except ValueError as exc:
        raise errors.error(errors.unusable.format(spec=repr(spec), exc=exc)) from exc
    except Exception as exc:
        if errors.failed is None:
            raise
        message = errors.failed.format(spec=repr(spec), exc=exc, kind=type(exc).__name__)
        raise errors.error(message) from exc
