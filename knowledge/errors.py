"""Typed errors raised by the knowledge base.

Every error derives from `KnowledgeBaseError`, so a caller can catch the whole
family at a tool boundary. Errors about bad arguments also derive from
`ValueError`, matching what Python code usually expects for bad input.
`IngestInterrupted`, a Ctrl-C during an ingest, is a `KeyboardInterrupt`.
"""

from __future__ import annotations

from arcana_loop.knowledge.types import IngestResult


class KnowledgeBaseError(Exception):
    """Base class of every knowledge-base error."""


class DatabaseUnavailable(KnowledgeBaseError):
    """The database cannot be reached, or lacks what the knowledge base needs (pgvector)."""


class PgvectorMissing(DatabaseUnavailable):
    """The server is reachable but has no pgvector extension, or it cannot be created."""


class InvalidDatabaseURL(KnowledgeBaseError, ValueError):
    """A database URL that cannot be used (no scheme, another database's scheme, malformed).

    The message never repeats the URL's password.
    """


class CollectionNotFound(KnowledgeBaseError, LookupError):
    """A collection named in a delete or an ingest check does not exist."""


class EmbeddingMismatch(KnowledgeBaseError, ValueError):
    """A collection was embedded with a different model or dimension than the one in use."""


class IngestError(KnowledgeBaseError, ValueError):
    """An explicit ingest input is unusable (empty, binary, undecodable, missing, too large)."""


class StorageFull(KnowledgeBaseError):
    """The database ran out of disk space; the message says what was stored and what is left."""


class DataDirectoryFull(DatabaseUnavailable, StorageFull):
    """The embedded PostgreSQL cannot start: the disk holding its data directory is full.

    The message names the data directory and the filesystem it is on; the stored
    data is kept, and the server starts once space is freed.
    """


class EmbedderUnavailable(KnowledgeBaseError, ValueError):
    """An embedder that cannot be loaded here: its extra is not installed, or it is unknown.

    The message names what is missing and the command that installs it.
    """


class EmbedderFailed(KnowledgeBaseError):
    """The embedder raised while embedding: a provider's service unreachable, a key it refuses.

    The message names the embedder's own exception; the cause is chained.
    """


class ModelFileMismatch(EmbedderUnavailable):
    """A model or tokenizer file differs from the sha256 it is pinned to (or is missing)."""


class UnsupportedFormat(IngestError):
    """A file of no type ingest reads: binary, and of no extension `knowledge.formats` lists.

    The message lists the supported types; `detail` is what the file is, without them.
    """

    def __init__(self, message: str, *, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class IngestInterrupted(KeyboardInterrupt):
    """An ingest stopped by a Ctrl-C (`KeyboardInterrupt`) once it had begun to write.

    A `KeyboardInterrupt`, not a `KnowledgeBaseError`: code that stops on Ctrl-C
    still stops, and ``except Exception`` does not swallow it. `result` counts what
    the ingest stored before it stopped: each batch is a transaction, so the
    batches committed are kept (the ones being written when it came are finished
    first), the others are not written, and an ingest run again skips what is stored.
    """

    def __init__(self, result: IngestResult) -> None:
        super().__init__()
        self.result = result
