"""Checkpointers by object or by short spec."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver


def resolve_checkpointer(spec: Any) -> BaseCheckpointSaver[Any] | None:
    """Return a checkpointer for ``None``, a saver object, or ``"memory"``.

    Raises:
        ValueError: for an unknown spec.
    """
    if spec is None or isinstance(spec, BaseCheckpointSaver):
        return spec
    if spec == "memory":
        return _memory_saver()
    raise ValueError(f"unknown checkpointer {spec!r}: expected a LangGraph checkpointer or 'memory'")


_memory: BaseCheckpointSaver[Any] | None = None


def _memory_saver() -> BaseCheckpointSaver[Any]:
    """Return the process-wide in-memory saver, so threads survive between runs."""
    global _memory
    if _memory is None:
        from langgraph.checkpoint.memory import InMemorySaver

        _memory = InMemorySaver()
    return _memory
