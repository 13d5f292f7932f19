"""PDF, HTML, Markdown and reStructuredText files are ingested as text with their structure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from arcana_loop.knowledge import IngestError, KnowledgeBase, MissingExtra

pytestmark = pytest.mark.postgres


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per string, written by hand."""
    count = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        stream = (
            "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
        ).encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            f" /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = None
    if title is not None:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    trailer = (
        f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    )
    out += f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


PAGE_ONE = ["Installing the frobnicator", "Unpack the archive and run the installer."]
PAGE_TWO = ["Calibrating the frobnicator", "Turn the quuxwheel clockwise until it clicks."]

HTML = b"""<!doctype html>
<html><head><title>Deploy guide</title>
<style>p { color: red }</style><script>var trackingCode = 1;</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Deploying</h1><p>Run the <code>deploy</code>
   command from the release branch.</p>
<h2>Rolling back</h2>
<p>Call <b>zorblify --undo</b> to restore the previous release.</p>
<ul><li>keep the logs</li><li>tell the on-call engineer</li></ul>
</body></html>
"""


def _hits(kb: KnowledgeBase, query: str, collection: str) -> list[dict]:
    return list(kb.search(query, collection=collection, mode="fulltext", limit=10))


def test_pdf_is_read_page_by_page_with_the_page_in_chunk_metadata(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    pdf = tmp_path / "manual.pdf"
    pdf.write_bytes(make_pdf([PAGE_ONE, PAGE_TWO], title="Frobnicator manual"))
    result = kb.ingest(pdf, collection="pdf", chunk_size=120, chunk_overlap=0)
    assert result.documents_added == 1 and result.skipped_files == []
    (hit,) = _hits(kb, "quuxwheel", "pdf")
    assert "Turn the quuxwheel clockwise" in hit["text"]
    assert "endobj" not in hit["text"] and "Tj" not in hit["text"]
    assert hit["metadata"]["page"] == 2
    assert hit["metadata"]["title"] == "Frobnicator manual"
    (first,) = _hits(kb, "archive installer", "pdf")
    assert first["metadata"]["page"] == 1
    # a PDF's page is its section: a hit on page 2 is read with page 2 alone, as cited
    assert "Unpack the archive" not in hit["text"] and "quuxwheel" not in first["text"]


@pytest.mark.parametrize("title", [None, "", "   ", "untitled", "Untitled document", "untitled 2"])
def test_a_pdf_without_a_real_title_is_titled_by_its_file_name(
    kb: KnowledgeBase, tmp_path: Path, title: str | None
) -> None:
    from arcana_loop.core.sources import cited_sources

    pdf = tmp_path / "capacity-report.pdf"
    pdf.write_bytes(make_pdf([PAGE_ONE], title=title))
    kb.ingest(pdf, collection="pdf-untitled", sync=False)
    (hit,) = _hits(kb, "archive installer", "pdf-untitled")
    assert "title" not in hit["metadata"]
    (source,) = cited_sources(f"[{hit['id']}]", [hit])
    assert source["title"] == "capacity-report"  # as cited, never "untitled"
    kb.delete_collection("pdf-untitled")


def test_html_is_stored_as_text_with_its_headings_as_the_section_path(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    page = tmp_path / "deploy.html"
    page.write_bytes(HTML)
    kb.ingest(page, collection="html", chunk_size=120, chunk_overlap=0)
    (hit,) = _hits(kb, "zorblify", "html")
    assert "Call zorblify --undo to restore the previous release." in hit["text"]
    assert "<" not in hit["text"] and ">" not in hit["text"].replace("--", "")
    assert hit["metadata"]["section"] == "Deploying > Rolling back"
    assert hit["metadata"]["title"] == "Deploy guide"
    (run,) = _hits(kb, "release branch", "html")
    assert (
        "Run the deploy command from the release branch." in run["text"]
    )  # one sentence, not cut by source line breaks
    assert _hits(kb, "trackingCode", "html") == []  # scripts are not content


def test_rst_and_markdown_headings_become_the_section_path(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    (tmp_path / "guide.rst").write_text(
        "User guide\n==========\n\nIntro text.\n\nConfiguration\n-------------\n\nSet plonkvalue to seven.\n"
    )
    (tmp_path / "notes.md").write_text(
        "# Notes\n\n## Caching\n\nThe wibblecache keeps entries an hour.\n"
    )
    kb.ingest(tmp_path, collection="docs", chunk_size=60, chunk_overlap=0)
    (rst,) = _hits(kb, "plonkvalue", "docs")
    assert rst["metadata"]["section"] == "User guide > Configuration"
    (md,) = _hits(kb, "wibblecache", "docs")
    assert md["metadata"]["section"] == "Notes > Caching"


def test_markdown_front_matter_titles_the_document_and_is_no_chunk(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    page = '---\ntitle: "Harbour: the guide"\ntags:\n  - port\n---\n# Cranes\n\nThe quaymaster lifts.\n'
    (tmp_path / "page.md").write_text(page)
    # a rule, a paragraph, a rule is Markdown, not front matter
    (tmp_path / "rules.md").write_text("---\n\nA zyxt paragraph between rules.\n\n---\n")
    kb.ingest(tmp_path, collection="site")
    (hit,) = _hits(kb, "quaymaster", "site")
    assert hit["metadata"]["title"] == "Harbour: the guide"
    assert hit["metadata"]["section"] == "Cranes" and "tags" not in hit["text"]
    (stored,) = [d for d in kb.documents("site") if d.source.endswith("page.md")]
    assert (stored.title, stored.chunks) == ("Harbour: the guide", 1)
    assert hit["text"] == "# Cranes\n\nThe quaymaster lifts."
    assert "A zyxt paragraph between rules." in _hits(kb, "zyxt", "site")[0]["text"]


def test_a_markdown_document_of_headings_alone_is_one_outline_chunk(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    # a heading is kept with what it heads; with nothing under any, the document was no chunk
    (tmp_path / "outline.md").write_text("# Wolverines\n\n## Fisher cat\n\n## Marten habits\n")
    result = kb.ingest(tmp_path, collection="outline")
    assert result.chunks_added == 1
    (hit,) = _hits(kb, "marten", "outline")
    assert "## Fisher cat" in hit["text"] and hit["metadata"]["title"] == "Wolverines"


def test_a_pdf_named_directly_without_its_extra_is_a_clear_error(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # importing it now raises ImportError
    pdf = tmp_path / "manual.pdf"
    pdf.write_bytes(make_pdf([PAGE_ONE]))
    with pytest.raises(
        MissingExtra, match=r"'pdf' extra \(pip install 'arcana-loop\[pdf\]'\)"
    ) as caught:
        kb.ingest(pdf, collection="pdf")
    assert isinstance(caught.value, IngestError)
    assert kb.collections() == []  # refused before anything was written


def test_a_directory_walk_skips_files_whose_extra_is_missing_and_says_why(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "bs4", None)
    (tmp_path / "page.html").write_bytes(HTML)
    (tmp_path / "notes.md").write_text("# Notes\n\nPlain notes.\n")
    result = kb.ingest(tmp_path, collection="mixed")
    assert result.documents_added == 1
    assert result.skipped_files == [
        (
            str(tmp_path / "page.html"),
            "reading HTML files needs the 'html' extra (pip install 'arcana-loop[html]')",
        )
    ]


def test_damaged_and_textless_pdfs_are_refused_with_their_reason(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    with pytest.raises(IngestError, match="not a readable PDF"):
        kb.ingest(broken, collection="pdf")
    blank = tmp_path / "blank.pdf"
    blank.write_bytes(make_pdf([[]]))
    with pytest.raises(IngestError, match="no text layer"):
        kb.ingest(blank, collection="pdf")
