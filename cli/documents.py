"""``arcana-loop documents``: list the stored documents, or show one's chunks as search sees them."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from arcana_loop.cli.common import (
    cell,
    collection_errors,
    fail,
    knowledge_base,
    out,
    shown,
    shown_path,
)
from arcana_loop.cli.flags import collection_name

documents_app = typer.Typer(
    help="List stored documents (source, chunks, size, when last written); 'show' prints one's chunks.",
    subcommand_metavar="[show SOURCE]",
)

CollectionOption = Annotated[
    str | None,
    typer.Option(
        "--collection", "-c", help="Only this collection's documents.", callback=collection_name
    ),
]


@documents_app.callback(invoke_without_command=True)
def documents(
    ctx: typer.Context,
    collection: CollectionOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every field of every document as JSON.")
    ] = False,
) -> None:
    """List stored documents: source, chunks, size and when each was last written.

    'arcana-loop documents show SOURCE' prints a document's chunks as search sees them.
    """
    if ctx.invoked_subcommand is not None:
        return
    kb = knowledge_base()
    with collection_errors(kb, collection, "cannot list the documents"):
        infos = kb.documents(collection)
    if as_json:
        print(
            json.dumps([i.to_dict() for i in infos], ensure_ascii=False, indent=2)
        )  # machine output
        return
    table = Table(box=box.SIMPLE_HEAD)
    if collection is None:
        table.add_column("collection", overflow="fold", max_width=16)
    table.add_column("source", overflow="fold", ratio=1)
    table.add_column("chunks", justify="right", no_wrap=True)
    table.add_column("KB", justify="right", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    for info in infos:
        table.add_row(
            *([cell(info.collection)] if collection is None else []),
            cell(shown_path(info.source)),
            str(info.chunks),
            f"{info.bytes / 1024:,.1f}",
            info.updated_at.strftime("%Y-%m-%d %H:%M"),
        )
    out.print(table)
    if not infos:
        out.print("[dim](no documents)[/]")
    else:
        out.print("[dim]Show a document's chunks with arcana-loop documents show SOURCE -c NAME[/]")


@documents_app.command("show")
def show(
    source: Annotated[
        str,
        typer.Argument(
            help="The document: its source as ingested (absolute, or relative to here or to the"
            " ingested directory), or a glob that names one document."
        ),
    ],
    collection: Annotated[
        str | None,
        typer.Option(
            "--collection",
            "-c",
            help="The document's collection (default: every collection).",
            callback=collection_name,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the document and its chunks as JSON.")
    ] = False,
) -> None:
    """Print a document's chunks in order as search sees them: title, section, pages, text and id."""
    from arcana_loop.cli.stored import document_chunks, find_document
    from arcana_loop.knowledge.sections import context_line

    kb = knowledge_base()
    with collection_errors(kb, collection, f"cannot read {source!r}"):
        names = [collection] if collection else [c.name for c in kb.collections()]
        try:
            document = find_document(kb, source, names)
        except LookupError as exc:
            fail(str(exc), "list the documents with arcana-loop documents -c NAME")
        chunks = document_chunks(kb, document.id)
    if as_json:
        found = {"document": document.to_dict(), "chunks": chunks}
        print(json.dumps(found, ensure_ascii=False, indent=2, default=str))  # machine output
        return
    out.print(
        f"[bold]{shown(document.title)}[/] ({shown(shown_path(document.source))}) in"
        f" {shown(repr(document.collection))}: {len(chunks)} chunk{'s' * (len(chunks) != 1)}",
        highlight=False,
    )
    for chunk in chunks:
        where = context_line(chunk["title"], chunk["section"] or "")
        pages = f" (page {chunk['pages']})" if chunk["pages"] else ""
        out.rule(
            f"{chunk['position'] + 1}/{len(chunks)} {shown(where)}{shown(pages)}", align="left"
        )
        out.print(shown(chunk["text"]), highlight=False)
        out.print(f"[dim]id {shown(chunk['id'])}[/]", highlight=False)
