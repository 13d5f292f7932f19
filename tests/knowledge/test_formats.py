"""Word, Excel and HTML files are stored as what a reader sees, and other files are refused by type.

Each file is made here, ingested, and read back through the knowledge base: its
stored title, section paths and chunk text.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
import sys
import warnings
import zipfile
from pathlib import Path

import docx
import openpyxl
import pytest
from docx.enum.style import WD_STYLE_TYPE

from arcana_loop.knowledge import (
    Chunk,
    IngestError,
    KnowledgeBase,
    MissingExtra,
    UnsupportedFormat,
)
from arcana_loop.knowledge.formats import FORMATS
from arcana_loop.knowledge.office import read_xlsx
from arcana_loop.knowledge.sections import _first_lines, markdown_title
from tests.knowledge.test_loaders import PAGE_ONE, PAGE_TWO, make_pdf

pytestmark = pytest.mark.postgres


def stored(kb: KnowledgeBase, collection: str) -> list[Chunk]:
    """Every chunk stored in `collection`, in document order (a semantic search ranks them all)."""
    hits = kb.search(
        "anything", collection=collection, mode="semantic", limit=1000, whole_sections=False
    )
    return sorted(hits, key=lambda c: (c["metadata"]["source"], c["position"]))


def stored_text(kb: KnowledgeBase, collection: str) -> str:
    return "\n\n".join(chunk["text"] for chunk in stored(kb, collection))


def sections(kb: KnowledgeBase, collection: str) -> list[str]:
    return [chunk["metadata"].get("section", "") for chunk in stored(kb, collection)]


def word_file(path: Path, *, title: str | None = "Harbor handbook", body: bool = True) -> Path:
    """A Word document with a title, an outline, lists, a table, a code block and a page header."""
    document = docx.Document()
    document.core_properties.title = title or ""
    document.sections[0].header.paragraphs[0].text = "CONFIDENTIAL draft, do not share"
    if not body:
        document.add_paragraph("A note without any heading about the quay.")
        document.save(str(path))
        return path
    document.add_paragraph("Operations at the quay", style="Title")
    document.add_paragraph("This handbook covers mooring and berths.")
    document.add_heading("Mooring", level=1)
    document.add_paragraph("# of lines: two at each end, never fewer.")
    document.add_paragraph("Before mooring:")
    document.add_paragraph("check the bollards", style="List Bullet")
    document.add_paragraph("check the fenders for cracks", style="List Bullet 2")
    document.add_paragraph("throw the bow line", style="List Number")
    document.add_paragraph("throw the stern line", style="List Number")
    document.add_heading("Berths", level=2)
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate([("berth", "depth"), ("7", "12 m"), ("9", "8 m | 9 m\nat low tide")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("Berth 9 silts up every spring.")
    document.add_heading("Signals", level=1)
    document.styles.add_style("Source Code", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("hoist --flag blue", style="Source Code")
    document.add_paragraph("sound --horn 3", style="Source Code")
    document.save(str(path))
    return path


def test_a_word_document_is_stored_with_its_outline_lists_tables_and_code(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    source = word_file(tmp_path / "handbook.docx")
    result = kb.ingest(source, collection="word", chunk_size=200, chunk_overlap=0)
    assert result.documents_added == 1 and result.skipped_files == []
    (document,) = kb.documents("word")
    assert document.title == "Harbor handbook"  # the core properties' title
    table = "| berth | depth |\n|---|---|\n| 7 | 12 m |\n| 9 | 8 m \\| 9 m at low tide |"
    (held,) = [chunk for chunk in stored(kb, "word") if table in chunk["text"]]
    assert held["metadata"]["section"] == "Operations at the quay > Mooring > Berths"
    text = stored_text(kb, "word")
    assert "- check the bollards\n  - check the fenders for cracks" in text
    assert "1. throw the bow line\n1. throw the stern line" in text
    assert "```\nhoist --flag blue\nsound --horn 3\n```" in text
    assert "Berth 9 silts up every spring." in text
    # a line starting with '#' is text of its section, not a heading
    assert not any("of lines" in section for section in sections(kb, "word"))
    assert "CONFIDENTIAL" not in text  # the page header is not body text
    assert set(sections(kb, "word")) == {
        "Operations at the quay",
        "Operations at the quay > Mooring",
        "Operations at the quay > Mooring > Berths",
        "Operations at the quay > Signals",
    }


def test_a_title_is_read_from_the_first_fifty_lines_without_splitting_the_rest() -> None:
    assert markdown_title("\n" * 49 + "# Late title\n" + "word " * 20_000) == "Late title"
    assert markdown_title("\n" * 50 + "# Too late\n") is None
    assert markdown_title("    # an indented code line\n\nText.\n") is None
    assert markdown_title("   # Three spaces still head it\n") == "Three spaces still head it"
    for text in ("\r\n" * 60, " " * 5000 + "\n# After a long line\n", "# T\n" + "x\x0c" * 40_000):
        assert _first_lines(text, 50) == text.splitlines()[:50]


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("# Deploying Zorbulon\n\nRun it.\n\n## Rollback\n\nGo back.\n", "Deploying Zorbulon"),
        ("\nDeploying Zorbulon\n==================\n\nRun it.\n", "Deploying Zorbulon"),
        ("Run it first.\n\n# Deploying Zorbulon\n\nThen this.\n", "deploy"),
        ("## Rollback\n\nGo back.\n", "deploy"),
        ("# Deploying `zorbulon`  *now*\n\nRun it.\n", "Deploying zorbulon now"),
    ],
    ids=["atx", "setext", "heading-later", "level-2", "inline-markup"],
)
def test_a_markdown_file_is_titled_by_the_heading_it_opens_with_else_its_name(
    kb: KnowledgeBase, tmp_path: Path, text: str, title: str
) -> None:
    (tmp_path / "deploy.md").write_text(text, encoding="utf-8")
    kb.ingest(tmp_path / "deploy.md", collection="markdown")
    (document,) = kb.documents("markdown")
    assert document.title == title
    if title != "deploy":  # titled by its heading: its section paths open with the same words
        assert all(section.startswith(title) for section in sections(kb, "markdown"))
    kb.ingest(tmp_path / "deploy.md", collection="markdown", metadata={"title": "Given"})
    (document,) = kb.documents("markdown")
    assert document.title == "Given"  # a title the ingest gives wins


@pytest.mark.parametrize(
    ("body", "title"), [(True, "Operations at the quay"), (False, "notes")], ids=["heading", "name"]
)
def test_a_word_document_without_a_title_is_titled_by_its_first_heading_else_its_name(
    kb: KnowledgeBase, tmp_path: Path, body: bool, title: str
) -> None:
    kb.ingest(word_file(tmp_path / "notes.docx", title=None, body=body), collection="untitled")
    (document,) = kb.documents("untitled")
    assert document.title == title


def test_a_workbook_is_stored_a_section_per_sheet_with_its_rows_as_table_lines(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    book = openpyxl.Workbook()
    berths = book.active
    assert berths is not None
    berths.title = "Berths"
    berths.append(["berth", "depth (m)", "dredged"])
    berths.append([7, 12.0, dt.date(2026, 3, 1)])
    berths.append([])
    berths.append([9, 8.5, None, None])
    cranes = book.create_sheet("Cranes")
    cranes.append(["crane", "tonnes"])
    cranes.append(["C1", 40])
    book.create_sheet("Empty")
    book.properties.title = "Harbor tables"
    path = tmp_path / "tables.xlsx"
    book.save(path)
    kb.ingest(path, collection="excel")
    (document,) = kb.documents("excel")
    assert document.title == "Harbor tables"
    by_section = {chunk["metadata"]["section"]: chunk["text"] for chunk in stored(kb, "excel")}
    assert by_section == {
        "Berths": "# Berths\n\n| berth | depth (m) | dredged |\n|---|---|---|\n| 7 | 12 | 2026-03-01 |\n| 9 | 8.5 |  |",
        "Cranes": "# Cranes\n\n| crane | tonnes |\n|---|---|\n| C1 | 40 |",
    }


@pytest.mark.timeout(30)
def test_a_workbook_of_a_few_cells_far_apart_is_read_at_the_cost_of_its_cells(
    tmp_path: Path,
) -> None:
    # the sheet spans 200,000 rows by 16,384 columns: padding each row to that width took minutes
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet["A1"], sheet["XFD1"], sheet["A200000"] = "first", "last column", "last row"
    path = tmp_path / "sparse.xlsx"
    book.save(path)
    text = read_xlsx(path.read_bytes(), path).text
    lines = text.splitlines()
    assert lines[2].startswith("| first |") and lines[2].endswith("| last column |")
    assert lines[-1] == "| last row |" + "  |" * 16383


@pytest.mark.parametrize(("module", "name"), [("docx", "handbook.docx"), ("openpyxl", "t.xlsx")])
def test_an_office_file_without_the_extra_is_a_one_line_error_naming_it(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, name: str
) -> None:
    path = tmp_path / name
    if name.endswith(".docx"):
        word_file(path)
    else:
        openpyxl.Workbook().save(path)
    monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    with pytest.raises(MissingExtra) as caught:
        kb.ingest(path, collection="office")
    assert str(caught.value).endswith(
        "files needs the 'office' extra (pip install 'arcana-loop[office]')"
    )
    assert "\n" not in str(caught.value)
    assert kb.collections() == []


def test_damaged_office_files_are_refused_with_their_reason(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_zip = tmp_path / "letter.docx"
    not_zip.write_text("a text file named as a Word document")
    with pytest.raises(IngestError, match="not a readable Word document"):
        kb.ingest(not_zip, collection="office")
    other_zip = tmp_path / "sheet.xlsx"
    with zipfile.ZipFile(other_zip, "w") as package:
        package.writestr("readme.txt", "no workbook in here")
    with pytest.raises(IngestError, match="not a readable workbook"):
        kb.ingest(other_zip, collection="office")
    from arcana_loop.knowledge import office

    monkeypatch.setattr(office, "MAX_UNPACKED_BYTES", 10_000)
    with pytest.raises(IngestError, match=r"unpacks to [\d,]+ bytes, more than 10,000"):
        kb.ingest(word_file(tmp_path / "big.docx"), collection="office")
    assert kb.collections() == []


SUFFIXES = [suffix for fmt in FORMATS for suffix in fmt.suffixes]


@pytest.mark.parametrize(
    ("name", "data", "what"),
    [
        ("slides.pptx", b"PK\x03\x04" + b"deck" * 50, "a zip archive"),
        ("old.doc", b"\xd0\xcf\x11\xe0" + b"x" * 200, "save it as .docx or .xlsx"),
        ("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(200), "a PNG image"),
        ("blob", bytes(range(256)), "contains NUL bytes"),
    ],
)
def test_an_unsupported_file_named_directly_is_one_line_listing_the_supported_types(
    kb: KnowledgeBase, tmp_path: Path, name: str, data: bytes, what: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UnsupportedFormat) as caught:
        kb.ingest(path, collection="refused")
    message = str(caught.value)
    assert message.startswith(f"{path}: binary file (") and what in message
    assert "\n" not in message
    listed = message.split("; supported: ")[1]
    assert re.findall(r"\.\w+", listed) == SUFFIXES
    assert listed.endswith("or UTF-8 text under any other name")
    assert kb.collections() == []


def test_a_folder_counts_its_unsupported_files_and_names_the_types_once(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n\nThe quay opens at six.\n")
    word_file(tmp_path / "handbook.docx")
    for name in ("a.png", "b.zip", "c.bin"):
        (tmp_path / name).write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(50))
    result = kb.ingest(tmp_path, collection="folder")
    assert result.documents_added == 2
    assert [Path(path).name for path, _ in result.skipped_files] == ["a.png", "b.zip", "c.bin"]
    reasons = [reason for _, reason in result.skipped_files]
    assert all(reason.startswith("binary file (a PNG image)") for reason in reasons)
    assert [".docx" in reason for reason in reasons] == [True, False, False]


DIV_PAGE = b"""<!doctype html><html><head><title>Harbor tides</title></head><body>
<div class="top-bar"><a href="/">Home</a> <a href="/pricing">Pricing</a> <a>Log in</a></div>
<div id="site-header" class="header"><span class="logo">Harbor Inc</span></div>
<div class="breadcrumbs"><a>Docs</a> / <a>Tides</a></div>
<!-- generated by sitegen 4.2 -->
<div class="wrapper">
  <div class="left-col sideBar"><ul><li>Moorings</li><li>Cranes</li></ul></div>
  <div class="content">
    <h1>Tide tables</h1>
    <p>High water at berth 7 comes 40 minutes after the harbour mouth.</p>
    <h2>Spring tides</h2>
    <p>Spring tides raise the quay by 1.2 m; moor with slack lines.</p>
  </div>
</div>
<div id="comments"><h3>3 comments</h3><p>Great article, thanks! Bob</p></div>
<div class="cookie-notice">We use cookies to improve your experience.</div>
<div class="siteFooter">Copyright 2026 Harbor Inc, Privacy, Terms</div>
</body></html>"""


def test_a_page_of_divs_is_stored_without_its_top_bar_header_comments_and_footer(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    page = tmp_path / "tides.html"
    page.write_bytes(DIV_PAGE)
    kb.ingest(page, collection="divs", chunk_size=100, chunk_overlap=0)
    text = stored_text(kb, "divs")
    for furniture in (
        "Pricing",
        "Harbor Inc",
        "Docs /",
        "Moorings",
        "sitegen",
        "comments",
        "Bob",
        "cookies",
        "Copyright",
    ):
        assert furniture not in text
    assert "High water at berth 7 comes 40 minutes after the harbour mouth." in text
    assert "Spring tides raise the quay by 1.2 m; moor with slack lines." in text
    assert sections(kb, "divs") == ["Tide tables", "Tide tables > Spring tides"]
    (document,) = kb.documents("divs")
    assert document.title == "Harbor tides"


def test_a_name_never_drops_the_page_itself_a_heading_or_an_id_in_marked_content(
    tmp_path: Path,
) -> None:
    from arcana_loop.knowledge.loaders import read_html

    # ASP.NET wraps a page in one form; a layout class may name the sidebar it makes room for
    wrapped = (
        b"<body><form id='aspnetForm'><div class='layout-with-sidebar'><h1>Report</h1>"
        b"<p>The tonnage moved this year rose by a tenth.</p>"
        b"<h2 id='comments'>Comments</h2><p>Two readers wrote in.</p>"
        b"<div class='sidebar'>Links</div></div></form></body>"
    )
    assert read_html(wrapped, tmp_path / "r.html").text == (
        "# Report\n\nThe tonnage moved this year rose by a tenth.\n\n"
        "## Comments\n\nTwo readers wrote in.\n"
    )
    # in marked content, ids come from titles and names (Sphinx, rustdoc): a class still counts
    docs = (
        b"<div role='main'><h1>Requests</h1><section id='cookies'><h2>2.1. Cookies</h2>"
        b"<p>Read them with request.cookies.</p></section>"
        b"<section id='method.skip'><h3>skip</h3><p>Skips n elements.</p></section>"
        b"<div class='cookie-consent'>Accept all cookies?</div></div>"
    )
    assert read_html(docs, tmp_path / "d.html").text == (
        "# Requests\n\n## 2.1. Cookies\n\nRead them with request.cookies.\n\n"
        "### skip\n\nSkips n elements.\n"
    )


def test_what_pypdf_logs_while_reading_goes_to_the_arcana_loop_log_naming_the_file(
    kb: KnowledgeBase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a wrong startxref offset: pypdf repairs it, logging at WARNING as it does
    pdf = re.sub(rb"startxref\n\d+", b"startxref\n12", make_pdf([PAGE_ONE, PAGE_TWO]))
    path = tmp_path / "repaired.pdf"
    path.write_bytes(pdf)
    # pypdf's level as a library leaves it (the CLI's in-process tests raise it to ERROR)
    with caplog.at_level(logging.INFO), caplog.at_level(logging.NOTSET, logger="pypdf"):
        result = kb.ingest(path, collection="pdf-log")
    assert result.documents_added == 1
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]
    notes = [r for r in caplog.records if r.name == "arcana_loop.knowledge.loaders"]
    assert notes and all(r.levelno == logging.INFO for r in notes)
    assert any(
        r.getMessage().startswith(f"{path}: pypdf") and "startxref" in r.getMessage() for r in notes
    )
    assert logging.getLogger("pypdf").propagate  # as it was, once the file is read


def test_what_openpyxl_warns_while_reading_goes_to_the_arcana_loop_log(
    kb: KnowledgeBase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["berth", "depth"])
    sheet.append([7, 12])
    saved = io.BytesIO()
    book.save(saved)
    # a workbook with an empty stylesheet, as some exporters write them: openpyxl warns
    path = tmp_path / "export.xlsx"
    empty = b'<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"/>'
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(path, "w") as target:
        for part in source.infolist():
            data = source.read(part)
            target.writestr(part, empty if part.filename == "xl/styles.xml" else data)
    with caplog.at_level(logging.INFO), warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that reaches Python's machinery fails
        kb.ingest(path, collection="xlsx-log")
    notes = [r.getMessage() for r in caplog.records if r.name == "arcana_loop.knowledge.loaders"]
    assert notes and all(
        note.startswith(f"{path}: UserWarning: Workbook contains no") for note in notes
    )
    assert "| 7 | 12 |" in stored_text(kb, "xlsx-log")
