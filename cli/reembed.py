"""``arcana-loop reembed COLLECTION --embeddings NAME``: a collection's vectors made again with another embedder."""

from __future__ import annotations

from typing import Annotated

import typer

from arcana_loop.cli.common import (
    collection_errors,
    fail,
    knowledge_base,
    out,
    progress_bar,
    shown,
)
from arcana_loop.cli.flags import collection_name

EMBEDDINGS_HINT = "--embeddings takes minilm, wordllama or provider:model"


def reembed(
    collection: Annotated[
        str, typer.Argument(help="The collection to re-embed.", callback=collection_name)
    ],
    embeddings: Annotated[
        str,
        typer.Option(
            "--embeddings",
            metavar="NAME",
            help="The embedder from now on: minilm, wordllama, or provider:model.",
        ),
    ],
) -> None:
    """Re-embed a collection in place with another embedder, from its stored chunks.

    Interrupted, it loses nothing: run it again to resume.
    """
    from arcana_loop.knowledge.errors import (
        CollectionNotFound,
        DatabaseUnavailable,
        EmbedderFailed,
        EmbedderUnavailable,
        KnowledgeBaseError,
    )

    kb = knowledge_base()
    with progress_bar() as progress:
        task = progress.add_task(f"Re-embedding {shown(collection)}", total=None)
        with collection_errors(kb, collection, f"could not re-embed {collection!r}"):
            try:
                result = kb.reembed(
                    collection,
                    embeddings,
                    progress=lambda done, total: progress.update(task, completed=done, total=total),
                )
            except (CollectionNotFound, DatabaseUnavailable):
                raise  # collection_errors words them
            except EmbedderUnavailable as exc:
                fail(str(exc))
            except EmbedderFailed as exc:  # a provider's service or key: what was done is kept
                fail(
                    f"could not re-embed {collection!r}: {exc}",
                    "check the embedder's service and key, then run it again: it resumes",
                )
            except KnowledgeBaseError as exc:
                fail(str(exc), "run it again once the other one has finished")
            except ValueError as exc:
                fail(str(exc), EMBEDDINGS_HINT)
    if result.model_unchanged:
        out.print(
            f"Collection {shown(repr(collection))} is embedded with"
            f" {shown(result.embedding_model)} already ({result.chunks:,}"
            f" chunk{'s' * (result.chunks != 1)})."
        )
        return
    resumed = f", {result.resumed:,} of them by an interrupted run" if result.resumed else ""
    entities = f" and {result.entities:,} entities" if result.entities else ""
    out.print(
        f"Re-embedded {shown(repr(collection))} with {shown(result.embedding_model)}"
        f" (was {shown(result.previous_model)}): {result.chunks:,}"
        f" chunk{'s' * (result.chunks != 1)}{resumed}{entities}."
    )
