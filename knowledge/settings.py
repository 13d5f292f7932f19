"""The knowledge base's settings, each one `Setting` declaration (`arcana_loop.settings`).

The data directory, idle time and embedder of the embedded server, the MiniLM cache, the
pending-vector and rebuild thresholds of a write, and PostgreSQL overrides: each names
its environment variable, type, default, meaning and bounds once, and is read with
`Setting.read` (a blank variable is unset; a value it cannot take is one line naming the
variable). The loop's options are declared with the same `Setting`, above this package:
the knowledge base knows nothing of the loop.
"""

from __future__ import annotations

from pathlib import Path

from arcana_loop.settings import ENV_PREFIX, Setting, SettingError

__all__ = [
    "CACHE_DIR",
    "EMBEDDINGS",
    "KNOWLEDGE_SETTINGS",
    "PENDING_MAX_ROWS",
    "PGDATA",
    "PG_SETTINGS",
    "PG_TUNED",
    "REBUILD_MIN_SHARE",
    "SEGMENT_MIN_ROWS",
    "SERVER_IDLE_SECONDS",
    "Setting",
    "SettingError",
]

PGDATA = Setting(
    env="ARCANA_LOOP_PGDATA",
    kind=Path,
    default=None,
    help="data directory of the embedded server (default: a per-user directory)",
)
SERVER_IDLE_SECONDS = Setting(
    env="ARCANA_LOOP_SERVER_IDLE_SECONDS",
    kind=float,
    default=900.0,
    positive=True,
    help="how long the embedded server stays up unused (default 900)",
)
EMBEDDINGS = Setting(
    env="ARCANA_LOOP_EMBEDDINGS",
    kind=str,
    default=None,
    one_line=True,
    help="the embedder of new collections: `minilm`, `wordllama` or `provider:model` (default:"
    " `minilm` with the `onnx` extra, else `wordllama`); a collection keeps its own",
)
CACHE_DIR = Setting(
    env="ARCANA_LOOP_CACHE_DIR",
    kind=Path,
    default=None,
    help="where the per-machine MiniLM model is kept (default: the user's cache directory)",
)
PENDING_MAX_ROWS = Setting(
    env="ARCANA_LOOP_PENDING_MAX_ROWS",
    kind=int,
    default=10_000,
    minimum=0,
    help="pending vectors a collection may keep after a write before they are merged into its"
    " graph (default 10000; `knowledge.schema`)",
)
REBUILD_MIN_SHARE = Setting(
    env="ARCANA_LOOP_REBUILD_MIN_SHARE",
    kind=float,
    default=0.25,
    minimum=0,
    help="pending vectors per graph vector from which a write rebuilds the graph instead of"
    " merging into it (default 0.25; `knowledge.writer`)",
)
SEGMENT_MIN_ROWS = Setting(
    env="ARCANA_LOOP_SEGMENT_MIN_ROWS",
    kind=int,
    default=5_000,
    minimum=1,
    help="new chunks from which a write into a collection whose graph is live gets a segment"
    " and a graph of its own (default 5000; `knowledge.writer`)",
)
PG_TUNED = (
    "shared_buffers",
    "effective_cache_size",
    "maintenance_work_mem",
    "max_parallel_maintenance_workers",
    "work_mem",
    "max_wal_size",
)
"""The embedded server's settings chosen from the host (`knowledge.tuning`)."""
PG_SETTINGS = {
    name: Setting(
        env=f"{ENV_PREFIX}PG_{name.upper()}",
        kind=str,
        default=None,
        one_line=True,
        shape="one PostgreSQL value (e.g. 512MB)",
        help=f"the embedded server's `{name}` instead of the one chosen from the host",
    )
    for name in PG_TUNED
}

KNOWLEDGE_SETTINGS = (
    SERVER_IDLE_SECONDS,
    PGDATA,
    EMBEDDINGS,
    CACHE_DIR,
    PENDING_MAX_ROWS,
    REBUILD_MIN_SHARE,
    SEGMENT_MIN_ROWS,
    *PG_SETTINGS.values(),
)
"""Every setting of the knowledge base, in the order the README's table lists them."""
