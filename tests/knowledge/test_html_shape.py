"""An HTML page of any shape is read whole, in time that grows with its size.

The pages here are under the ingest size limit and shaped the way a quadratic
reader fails on: one chain of 40,000 nested elements, and 10,000 paragraphs side
by side among void elements. Reading each took minutes when every element cost a
walk over its ancestors or siblings; the timeout is far above what a linear reader
needs (a few seconds on two busy cores) and far below what a quadratic one takes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arcana_loop.knowledge.loaders import read_html
from arcana_loop.knowledge.loading import DEFAULT_MAX_BYTES

LEVELS = 40_000


def _deep_page(levels: int) -> bytes:
    # structure at the bottom of the chain: it must still read as structure
    bottom = (
        "<h2>Depth sounding</h2><p>Berth 7 is 12 m deep.</p>"
        "<table><tr><th>berth</th><th>depth</th></tr><tr><td>7</td><td>12 m</td></tr></table>"
        "<pre>sound --berth 7</pre><ul><li>low tide</li><li>high tide</li></ul>"
    )
    return f"<html><body><main>{'<div>' * levels}{bottom}{'</div>' * levels}</main></body></html>".encode()


@pytest.mark.timeout(60)
def test_a_page_nested_forty_thousand_deep_is_read_whole_with_its_structure(
    tmp_path: Path,
) -> None:
    page = _deep_page(LEVELS)
    assert len(page) < DEFAULT_MAX_BYTES
    text = read_html(page, tmp_path / "deep.html").text
    assert text == (
        "## Depth sounding\n\nBerth 7 is 12 m deep.\n\n"
        "| berth | depth |\n|---|---|\n| 7 | 12 m |\n\n"
        "```\nsound --berth 7\n```\n\n- low tide\n- high tide\n"
    )


@pytest.mark.timeout(60)
def test_a_page_of_ten_thousand_side_by_side_paragraphs_is_read_whole(tmp_path: Path) -> None:
    # void elements (<br>, <wbr>, <img>, <hr>) among them: each one bs4 closes itself was
    # searched for at every end tag after it
    unit = '<p>fact <wbr>{n}</p><br><img class="share-icon" src="s.png"><nav>skip</nav><hr class="footer">'
    page = (
        "<html><body><main>"
        + "".join(unit.format(n=n) for n in range(10_000))
        + "<p>last<br>line<hr>rule</p></main></body></html>"
    ).encode()
    assert len(page) < DEFAULT_MAX_BYTES
    paragraphs = read_html(page, tmp_path / "wide.html").text.split("\n\n")
    assert paragraphs == [*(f"fact {n}" for n in range(10_000)), "last\nline", "rule\n"]


@pytest.mark.timeout(60)
def test_deeply_nested_headings_tables_and_code_are_each_read_once(tmp_path: Path) -> None:
    # each kind nested in itself: the outermost one takes the text of those inside it
    levels = 5_000
    page = (
        "<main>"
        + "<h3>" * levels + "Tides" + "</h3>" * levels
        + "<table><tr><td>" * levels + "cell" + "</td></tr></table>" * levels
        + "<pre>" * levels + "code" + "</pre>" * levels
        + "<li>" * levels + "item" + "</li>" * levels
        + "</main>"
    ).encode()  # fmt: skip
    text = read_html(page, tmp_path / "nested.html").text
    # a table inside a table is text in its cell, not more rows and cells of the outer one
    head = "### Tides\n\n| cell |\n|---|\n\n```\ncode\n```\n\n"
    assert text == head + "-\n" * (levels - 1) + "- item\n"


@pytest.mark.timeout(60)
def test_a_signature_heading_with_generics_nested_fifty_thousand_deep_reads_as_its_name(
    tmp_path: Path,
) -> None:
    # removing the innermost <...> again and again took a pass over the heading per level
    levels = 50_000
    signature = f"pub fn dock{'&lt;' * levels}T{'&gt;' * levels}(berth: u8)"
    page = f'<main><h3 class="code-header">{signature}</h3><p>Docks a ship.</p></main>'.encode()
    assert len(page) < DEFAULT_MAX_BYTES
    assert read_html(page, tmp_path / "api.html").text == "### dock\n\nDocks a ship.\n"


@pytest.mark.timeout(60)
def test_a_page_nested_forty_thousand_deep_in_furniture_names_is_judged_in_one_pass(
    tmp_path: Path,
) -> None:
    # Every level is named as a sidebar and holds the whole page, so none may be dropped:
    # each level's share of the text is looked up from one pass over the page, where
    # counting each level's text again would visit the chain once per level.
    page = (
        "<html><body>" + '<div class="sidebar">' * LEVELS + "<p>Berth 7 is 12 m deep.</p>"
        + "</div>" * LEVELS + '<div class="site-footer">Terms</div></body></html>'
    ).encode()  # fmt: skip
    assert read_html(page, tmp_path / "named.html").text == "Berth 7 is 12 m deep.\n"
