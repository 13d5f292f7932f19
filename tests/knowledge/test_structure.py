"""Documents are read by their structure: headings are headings, code and tables stay whole."""

from __future__ import annotations

import random
import re
import string
from pathlib import Path
from types import SimpleNamespace

import pytest

from arcana_loop.knowledge.loaders import read_html, read_pdf
from arcana_loop.knowledge.loading import ChunkRow, SourceDoc, split_document, text_document
from arcana_loop.knowledge.sections import page_label
from arcana_loop.knowledge.structure import _heading_words, markdown_blocks, rst_blocks
from tests.knowledge.test_loaders import make_pdf

FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def _chunks(text: str, syntax: str = "markdown", size: int = 300) -> list[ChunkRow]:
    doc = SourceDoc(source="doc", text=text, syntax=syntax, metadata={})  # type: ignore[arg-type]
    return split_document(doc, collection="c", chunk_size=size, chunk_overlap=0)


def _sections(rows: list[ChunkRow]) -> list[str]:
    return [r.metadata.get("section", "") for r in rows]


MARKDOWN = """# Deploying harbor

Harbor runs as one service.

## Configure the region

```bash
# configure the region
export HARBOR_REGION=eu-west
# a second comment
harbor deploy --region "$HARBOR_REGION"
```

| key | default |
|---|---|
| region | eu-west |

Setext heading
--------------

Under a setext heading.
"""


def test_comment_lines_in_a_fence_are_code_not_headings() -> None:
    rows = _chunks(MARKDOWN)
    assert set(_sections(rows)) == {
        "Deploying harbor",
        "Deploying harbor > Configure the region",
        "Deploying harbor > Setext heading",
    }
    code = next(r for r in rows if "HARBOR_REGION=eu-west" in r.text)
    assert "# configure the region" in code.text and "| region | eu-west |" in code.text
    assert code.text.startswith(
        "## Configure the region"
    )  # a chunk starting a section shows its heading


def test_a_long_code_block_is_split_at_lines_and_every_piece_stays_fenced() -> None:
    body = "\n".join(f"    step_{n} = run_step({n})  # comment {n}" for n in range(60))
    rows = _chunks(f"# Script\n\n```python\n{body}\n```\n\nAfter the code.\n")
    code = [r for r in rows if "run_step" in r.text]
    assert len(code) > 3
    for row in code:
        assert len(row.text) <= 300
        lines = row.text.split("\n")
        assert lines[0] == "```python" and lines[-1] == "```", row.text
        assert all(line.startswith("    step_") for line in lines[1:-1])  # cut between lines
    rejoined = [line for r in code for line in r.text.split("\n")[1:-1]]
    assert rejoined == body.split("\n")  # nothing lost, nothing repeated
    assert not any(r.text.strip() in ("```", "```python") for r in rows)


def test_a_long_table_is_split_at_rows_with_its_header_in_every_piece() -> None:
    rows_md = "\n".join(f"| port {n} | service number {n} |" for n in range(40))
    rows = _chunks(f"# Ports\n\n| port | service |\n|---|---|\n{rows_md}\n")
    tables = [r for r in rows if "service number" in r.text]
    assert len(tables) > 2
    for row in tables:
        lines = row.text.split("\n")
        assert lines[:2] == ["| port | service |", "|---|---|"]
        assert all(line.startswith("| port ") and line.endswith(" |") for line in lines[2:])
    assert sum(len(r.text.split("\n")) - 2 for r in tables) == 40


def test_a_long_list_is_cut_between_items() -> None:
    items = "\n".join(
        f"- item {n}: the harbor keeps berth {n} free\n  on weekdays" for n in range(30)
    )
    rows = _chunks(f"# Berths\n\n{items}\n")
    for row in rows:
        body = row.text.removeprefix("# Berths\n\n")
        assert body.startswith("- item ") and body.endswith("on weekdays"), row.text


def test_headings_in_a_section_path_are_text_not_markup() -> None:
    blocks = markdown_blocks("## The `harbor.dock()` call ¶\n\nIt docks.\n")
    assert blocks[-1].section == ("The harbor.dock() call",)


def test_a_heading_without_markup_characters_reads_as_a_full_inline_parse_would() -> None:
    # plain headings skip the inline parse; random headings, half of them with markup
    # characters, must read the same either way
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": True})
    rng = random.Random(7)
    alphabet = string.ascii_letters + " .,:;-()#+=/?'\"{}|~^$%@é¶" + "\\`*_[]<>!&\n"
    for _ in range(3000):
        heading = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))).strip()
        parsed = parser.parseInline(heading)[0].children or []
        words = "".join(
            child.content if child.type in ("text", "code_inline", "html_inline") else " "
            for child in parsed
            if child.type in ("text", "code_inline", "html_inline", "softbreak", "hardbreak")
        )
        token = SimpleNamespace(type="inline", content=heading)
        assert _heading_words(token) == (words if parsed else heading), heading


def test_text_with_heading_shaped_lines_but_no_structure_keeps_no_heading() -> None:
    text = "Etc.\n====\n\nasyncio.run\nRuns a coroutine.\n\nOlder API\n---------\n"
    assert all(r.metadata.get("section") is None for r in _chunks(text, syntax="plain"))


RST = """=======
Harbor
=======

Intro with :func:`harbor.dock` and a `broken link`_.

Install
-------

Run this::

    # not a heading
    pip install harbor

.. code-block:: python

   import harbor

.. note:: Docks close at 22:00.

.. versionadded:: 2.1
   The ``--tide`` flag.

=====  =====
Key    Value
=====  =====
tide   high
=====  =====

Tuning
~~~~~~

- one item
- two item
"""


def test_rst_sections_code_tables_and_sphinx_markup() -> None:
    blocks = rst_blocks(RST)
    by_text = {b.text: b for b in blocks}
    intro = next(b for b in blocks if b.text.startswith("Intro with harbor.dock and a"))
    assert intro.section == ("Harbor",)  # the role's text kept, its markup gone
    assert "```\n# not a heading\npip install harbor\n```" in by_text
    assert by_text["```python\nimport harbor\n```"].kind == "code"
    assert "Note: Docks close at 22:00." in by_text
    assert "Added in version 2.1: The --tide flag." in by_text
    assert by_text["| Key | Value |\n|---|---|\n| tide | high |"].kind == "table"
    assert by_text["- one item\n- two item"].section == ("Harbor", "Install", "Tuning")
    rows = _chunks(RST, syntax="rst")
    assert set(_sections(rows)) == {"Harbor", "Harbor > Install", "Harbor > Install > Tuning"}


def test_rst_with_markup_errors_still_yields_its_text() -> None:
    blocks = rst_blocks("Title\n===\n\n.. unknown-directive::\n\n*unclosed emphasis and `x\n")
    assert any("unclosed emphasis" in b.text for b in blocks)


PAGE = """<html><head><title>Harbor tides guide</title></head><body>
<header><a href="/">Home</a><a href="/teams">Teams</a><a href="/status">Status</a></header>
<div class="sidebar"><ul><li>Tides</li><li>Berths</li></ul></div>
<main>
  <h1>Tides <a class="headerlink" href="#t">¶</a></h1>
  <p>High tide is at 06:00.</p>
  <h2>Table</h2>
  <table><tr><th>berth</th><th>depth</th></tr><tr><td>7</td><td>12 m</td></tr></table>
  <pre><code># a comment
dock --berth 7</code></pre>
  <section id="method.dock"><h3 class="code-header">pub fn dock(&amp;mut self, berth: u8)</h3>
  <p>Docks a ship.</p></section>
</main>
<div id="cookie-banner">We use cookies.</div>
<footer>Copyright 2026 Harbor Inc.</footer>
</body></html>"""


def test_html_keeps_the_main_content_and_its_structure(tmp_path: Path) -> None:
    extracted = read_html(PAGE.encode(), tmp_path / "page.html")
    for boilerplate in ("Home", "Teams", "Berths", "cookies", "Copyright", "¶"):
        assert boilerplate not in extracted.text
    assert extracted.title == "Harbor tides guide"
    doc = SourceDoc(source="p", text=extracted.text, syntax="markdown", metadata={})
    rows = split_document(doc, collection="c", chunk_size=800, chunk_overlap=0)
    text = "\n\n".join(r.text for r in rows)
    assert "| berth | depth |\n|---|---|\n| 7 | 12 m |" in text
    assert "```\n# a comment\ndock --berth 7\n```" in text
    assert "Tides > Table > dock" in _sections(rows)


def test_a_page_without_main_drops_its_navigation_by_role(tmp_path: Path) -> None:
    page = (
        b"<body><div role='navigation'>HomeTeamsStatus</div><p>Berth 7 is deep.</p>"
        b"<div class='site-footer'>Terms</div></body>"
    )
    text = read_html(page, tmp_path / "p.html").text
    assert text.strip() == "Berth 7 is deep."


def test_pdf_chunks_know_their_pages_and_running_headers_are_gone(tmp_path: Path) -> None:
    pages = [
        ["Harbor capacity report", f"Page {n}", f"Fact {n}: berth {n} holds {n * 100} tonnes."]
        for n in range(1, 5)
    ]
    extracted = read_pdf(make_pdf(pages), tmp_path / "report.pdf")
    assert "Harbor capacity report" not in extracted.text and "Page 3" not in extracted.text
    doc = SourceDoc(
        source="r",
        text=extracted.text,
        syntax="plain",
        metadata={},
        page_starts=extracted.page_starts,
    )
    long_rows = split_document(doc, collection="c", chunk_size=40, chunk_overlap=0)
    for row in long_rows:
        fact = re.search(r"Fact (\d)", row.text)
        assert (
            fact is not None
            and row.metadata["page"] == int(fact.group(1)) == row.metadata["page_end"]
        )
    short = split_document(doc, collection="c", chunk_size=800, chunk_overlap=0)
    assert [(r.metadata["page"], r.metadata["page_end"]) for r in short][0][0] == 1
    assert all(r.metadata["page_end"] >= r.metadata["page"] for r in short)
    assert {page_label(r.metadata) for r in short} <= {
        "1",
        "2",
        "3",
        "4",
        "1\u20132",
        "1\u20133",
        "2\u20133",
        "3\u20134",
        "2\u20134",
        "1\u20134",
    }


@pytest.mark.parametrize(
    ("metadata", "label"),
    [
        ({"page": 3}, "3"),
        ({"page": 2, "page_end": 3}, "2\u20133"),
        ({}, None),
        ({"page": True}, None),
    ],
)
def test_page_labels(metadata: dict[str, object], label: str | None) -> None:
    assert page_label(metadata) == label


def test_a_text_with_markdown_headings_is_read_as_markdown() -> None:
    doc = text_document("# Title\n\n```\n# code\n```\n", name="t", metadata={})
    rows = split_document(doc, collection="c", chunk_size=800, chunk_overlap=0)
    assert [r.metadata.get("section") for r in rows] == ["Title"]
    assert all(len(FENCE.findall(r.text)) % 2 == 0 for r in rows)
