"""The embedded server's settings, chosen from the machine it runs on.

PostgreSQL's stock settings suit a small shared machine: 128 MB of shared buffers and
64 MB for an index build. A knowledge base of a million chunks holds gigabytes of
vectors and builds an HNSW index over them, so the embedded server, which this project
owns, is set from the host's memory and cores when it starts or is joined:

| setting | chosen | why |
|---|---|---|
| ``shared_buffers`` | 1/8 of memory, 128 MB to 4 GB | the vectors and the index read from cache |
| ``effective_cache_size`` | 1/2 of memory | tells the planner the OS cache holds the rest |
| ``maintenance_work_mem`` | 1/8 of memory, 64 MB to 4 GB | an HNSW build in memory (a spilling one was 11x slower) |
| ``max_parallel_maintenance_workers`` | cores - 1, at most 4 | index builds use the other cores |
| ``work_mem`` | memory / 512, 4 to 64 MB | sorts of fused candidates stay in memory |
| ``max_wal_size`` | 1/8 of memory, 1 to 8 GB | a bulk load is not cut by a checkpoint every few hundred MB |

Each can be set instead with ``ARCANA_LOOP_PG_<NAME>`` (``ARCANA_LOOP_PG_SHARED_BUFFERS=512MB``).
They are written with ``ALTER SYSTEM`` and the server reloads them; ``shared_buffers`` takes
effect when the server next starts (`arcana-loop doctor` shows it pending). A server given by
``DATABASE_URL`` is never changed: `doctor` shows what would be chosen, as advice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, LiteralString

import psutil  # type: ignore[import-untyped]  # psutil ships no type hints
import psycopg
from psycopg import sql

from arcana_loop.knowledge.settings import PG_SETTINGS, PG_TUNED

logger = logging.getLogger(__name__)

TUNED = PG_TUNED


@dataclass(frozen=True)
class Chosen:
    """One setting as chosen for this host: its value and where it came from."""

    name: str
    value: str
    source: str
    """``host`` (from memory and cores) or the environment variable that set it."""


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def host_settings(
    memory: int | None = None, cores: int | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Chosen]:
    """The settings for a host with `memory` bytes and `cores` cores (this one by default).

    Raises:
        SettingError: for an environment override that spans lines.
    """
    total_mb = (memory if memory is not None else psutil.virtual_memory().total) // 2**20
    count = cores if cores is not None else (os.cpu_count() or 1)
    host = {
        "shared_buffers": f"{_clamp(total_mb // 8, 128, 4096)}MB",
        "effective_cache_size": f"{max(total_mb // 2, 256)}MB",
        "maintenance_work_mem": f"{_clamp(total_mb // 8, 64, 4096)}MB",
        "max_parallel_maintenance_workers": str(_clamp(count - 1, 0, 4)),
        "work_mem": f"{_clamp(total_mb // 512, 4, 64)}MB",
        "max_wal_size": f"{_clamp(total_mb // 8, 1024, 8192)}MB",
    }
    chosen = {}
    for name, value in host.items():
        setting = PG_SETTINGS[name]
        given = setting.read(env)
        chosen[name] = (
            Chosen(name, value, "host") if given is None else Chosen(name, given, setting.env)
        )
    return chosen


@dataclass(frozen=True)
class Current:
    """A setting as the server has it now."""

    name: str
    value: str
    """As `SHOW` gives it (``128MB``)."""
    source: str
    """PostgreSQL's ``pg_settings.source`` (``default``, ``configuration file``...)."""
    pending_restart: bool


def current_settings(conn: psycopg.Connection[Any]) -> dict[str, Current]:
    """The tuned settings as the server has them."""
    rows = _tuned_rows(
        conn,
        "SELECT name, current_setting(name), source, pending_restart FROM pg_settings"
        " WHERE name = ANY(%s)",
    )
    return {r[0]: Current(r[0], r[1], r[2], bool(r[3])) for r in rows}


def _written(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The tuned settings written to ``postgresql.auto.conf`` (by `apply_settings` or anyone)."""
    rows = _tuned_rows(
        conn,
        "SELECT name, setting FROM pg_file_settings"
        " WHERE sourcefile LIKE '%%postgresql.auto.conf' AND name = ANY(%s)",
    )
    return {r[0]: r[1] for r in rows}


def _tuned_rows(conn: psycopg.Connection[Any], query: LiteralString) -> list[tuple[Any, ...]]:
    """The rows `query` reads of the tuned settings, whose names are its one parameter."""
    return conn.execute(query, (list(TUNED),)).fetchall()


def apply_settings(conn: psycopg.Connection[Any], chosen: Mapping[str, Chosen]) -> list[str]:
    """Write the chosen settings that differ from what is written, and reload; return their names.

    Only for a server this project owns (the embedded one). ``conn`` must be in autocommit
    mode (``ALTER SYSTEM`` runs outside transactions).

    Raises:
        ValueError: for a value PostgreSQL refuses (an override like ``shared_buffers=lots``),
            naming where it came from.
    """
    written = _written(conn)
    changed = [c for c in chosen.values() if written.get(c.name) != c.value]
    for setting in changed:
        try:
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(setting.name), sql.Literal(setting.value)
                )
            )
        except psycopg.errors.InvalidParameterValue as exc:
            raise ValueError(
                f"{setting.source} gives {setting.name} the value {setting.value!r}, which"
                f" PostgreSQL refuses: {exc.diag.message_primary}"
            ) from None
    if changed:
        conn.execute("SELECT pg_reload_conf()")
        logger.info(
            "embedded PostgreSQL tuned to this host: %s",
            ", ".join(f"{c.name}={c.value}" for c in changed),
        )
    return [c.name for c in changed]


def log_notice(diagnostic: psycopg.errors.Diagnostic) -> None:
    """Log a server notice (an index build short of memory says so) at its severity."""
    severity = (diagnostic.severity_nonlocalized or diagnostic.severity or "").upper()
    level = logging.WARNING if severity == "WARNING" else logging.INFO
    logger.log(level, "PostgreSQL %s: %s", severity.lower() or "notice", diagnostic.message_primary)
