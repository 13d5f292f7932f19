"""Factory dependencies: the callables and objects a graph is built with.

Objects that cannot travel as JSON (chat model instances, functions, custom
tools, a grounder) are closed over by the nodes; their JSON-able counterparts
(model names, a grounder name) come from the run's `LoopContext`. When both are
given, the object wins.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool

from arcana_loop.core.context import LoopContext
from arcana_loop.nodes.models import ModelCaller, cached_model
from arcana_loop.nodes.pins import VersionsFn
from arcana_loop.nodes.policy import Policy
from arcana_loop.tools import registry
from arcana_loop.tools.base import SearchFn
from arcana_loop.tools.schemas import Toolset
from arcana_loop.tools.scoping import Scope

PromptFn = Callable[[dict[str, Any]], str]
SynthesizerFn = Callable[[list[Any], dict[str, Any]], Any]


class ConfigurationError(ValueError):
    """An option combination that cannot run; raised before the first step."""


@dataclass(frozen=True)
class LoopDeps:
    """What the nodes of one compiled graph close over."""

    controller_llm: ModelCaller | None = None
    answer_llm: ModelCaller | None = None
    search_fn: SearchFn | None = None
    toolset: Toolset = field(default_factory=Toolset)
    synthesizer: SynthesizerFn | None = None
    grounder: Any = None
    system_prompt: PromptFn | None = None
    answer_prompt: PromptFn | None = None
    synthesis_prompt: PromptFn | None = None
    policies: tuple[Policy, ...] = ()
    """The loop's rules, each one object whose hooks the nodes call (listed in ``graph/build.py``)."""

    @property
    def custom_tools(self) -> Mapping[str, BaseTool]:
        """The custom tools by name (a custom ``search`` among them replaces the built-in one)."""
        return self.toolset.custom

    def controller(self, ctx: LoopContext) -> ModelCaller:
        """Return the controller model: the object given, else the context's model name."""
        if self.controller_llm is not None:
            return self.controller_llm
        if ctx.controller_model is not None:
            return cached_model(ctx.controller_model)
        from arcana_loop.nodes.models import default_controller_spec

        return cached_model(default_controller_spec())

    def answerer(self, ctx: LoopContext) -> ModelCaller | None:
        """Return the answer model, or ``None`` when none is configured."""
        if self.answer_llm is not None:
            return self.answer_llm
        if ctx.answer_model is not None:
            return cached_model(ctx.answer_model)
        return None

    def has_answerer(self, ctx: LoopContext) -> bool:
        """Whether an answer model is configured (without creating it)."""
        return self.answer_llm is not None or ctx.answer_model is not None

    def has_grounder(self, ctx: LoopContext) -> bool:
        """Whether a grounder is configured."""
        return self.grounder is not None or ctx.grounder is not None

    def unsearchable(self, scope: Scope) -> str | None:
        """Why the default knowledge base has nothing to search in `scope`, or `None`.

        Only the knowledge base's own search is checked, and only when the controller is
        offered it (a `search_fn` or a custom ``search`` tool knows its own data, and a
        toolset without ``search`` never reads the knowledge base); a database that
        cannot be reached is left for the search to report.
        """
        if not registry.offers_search(self.toolset.builtins):
            return None
        if scope.kind == "none":
            return EMPTY_SCOPE  # `[]` matches nothing, whatever answers the searches
        if self.search_fn is not None:
            return None
        from arcana_loop import knowledge

        try:
            chunks = {c.name: c.chunks for c in knowledge.default_knowledge_base().collections()}
        except Exception:  # reported by the first search, with its own message
            return None
        return unsearchable_reason(scope, chunks)

    def versions(self) -> VersionsFn | None:
        """The lookup of what the knowledge base searched holds now (`nodes.pins`), or ``None``.

        The default knowledge base's without a `search_fn`; a knowledge base's own when
        the `search_fn` is one of its methods (``kb.search``): the object a bound method
        belongs to is how a function says whose data it searches. Another search
        function's chunks have no stored versions to look up.
        """
        if self.search_fn is None:
            from arcana_loop import knowledge

            return knowledge.chunk_versions
        lookup = getattr(getattr(self.search_fn, "__self__", None), "chunk_versions", None)
        return lookup if callable(lookup) else None

    def search(self) -> SearchFn:
        """Return the search function (sync or ``async def``); the knowledge base's by default."""
        if self.search_fn is not None:
            return self.search_fn
        from arcana_loop import knowledge

        return knowledge.search


EMPTY_KNOWLEDGE_BASE = (
    "the knowledge base is empty: no collection holds a document yet. Ingest some first, "
    "e.g. `arcana-loop ingest PATH --collection NAME`."
)
NO_SUCH_COLLECTION = (
    "there is no collection named {names} in the knowledge base (it holds {known}). "
    "Ingest into it with `arcana-loop ingest PATH --collection {first}`, or ask another collection."
)
EMPTY_SCOPE = (
    "the question's scope is empty (collection=[]), and an empty scope matches no collection. "
    "Name the collections to search, or use collection='all' for every one."
)
EMPTY_COLLECTION = (
    "collection {names} holds no document yet. Ingest some with "
    "`arcana-loop ingest PATH --collection {first}`."
)


def unsearchable_reason(scope: Scope, chunks: Mapping[str, int]) -> str | None:
    """Why a scope finds nothing, given each stored collection's chunk count; `None` if it can."""
    if scope.kind == "none":
        return EMPTY_SCOPE
    if not any(chunks.values()):
        return EMPTY_KNOWLEDGE_BASE
    if scope.kind == "all" or any(chunks.get(name) for name in scope.names):
        return None
    missing = [name for name in scope.names if name not in chunks]
    names = " or ".join(repr(n) for n in (missing or scope.names))
    first = (missing or list(scope.names))[0]
    if missing:
        known = ", ".join(repr(n) for n in sorted(chunks))
        return NO_SUCH_COLLECTION.format(names=names, known=known, first=shlex.quote(first))
    return EMPTY_COLLECTION.format(names=names, first=shlex.quote(first))
