"""An edited Markdown document is parsed only where it changed, and reads exactly as a whole parse."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from arcana_loop.knowledge import structure
from arcana_loop.knowledge.loading import SourceDoc, chunk_document
from arcana_loop.knowledge.structure import MarkdownMap, parse_markdown

FRAGMENTS = [
    "# Title",
    "## Section two ##",
    "###### Deep heading",
    "#",
    "## `code()` in a heading ¶",
    "Setext title\n============",
    "Setext section\n--------------",
    "A paragraph of plain prose that runs on.\nIts second line, lazily continued.",
    "Another paragraph with *emphasis* and a [link][ref].",
    "```python\n# not a heading\nprint('x')\n```",
    "~~~\ncode in tildes\n\n\nwith blank lines\n~~~",
    "````\n```\nan inner fence that does not close\n````",
    "```\nan unclosed fence",
    "    indented code\n\n    more indented code",
    "| key | value |\n|-----|-------|\n| a | 1 |\n| b | 2 |",
    "| not a table |\nno delimiter row",
    "- item one\n- item two\n\n  a second paragraph in item two\n- item three",
    "1. first\n2. second\n   - nested\n3. third",
    "- loose\n\n- list",
    "> a quote\nlazily continued\n> > nested quote",
    "<div>\n<p>html block</p>\n</div>",
    "<!-- a comment\n\nspanning a blank line -->",
    "<!-- an unclosed comment",
    "<pre>\npreformatted\n\nkept whole\n</pre>",
    '[ref]: https://example.org/path "Title"',
    "[multi]:\n  https://example.org/multi\n  'on lines'",
    "---",
    "***",
    "",
    "   ",
    "\t- a tabbed item",
    "Term line\n: not a definition list",
]
EDIT_LINES = ["```", "~~~", "---", "===", "# New heading", "| a | b |", "|---|---|", "> quoted",
              "- new item", "    code line", "", "<!--", "-->", "[ref]: /url", "plain words",
              "<div>", "1. one", "Setext\n---"]  # fmt: skip


def _document(rng: random.Random, blocks: int) -> str:
    parts = [rng.choice(FRAGMENTS) for _ in range(blocks)]
    separators = ["\n\n", "\n", "\n\n\n"]
    text = parts[0] + "".join(rng.choice(separators) + p for p in parts[1:])
    text += rng.choice(["", "\n", "\n\n"])
    return text.replace("\n", rng.choice(["\n"] * 8 + ["\r\n", "\r"]))


def _edit(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines) + 1)
        kind = rng.random()
        if kind < 0.35:
            lines[at:at] = rng.choice(EDIT_LINES + FRAGMENTS).split("\n")
        elif kind < 0.55 and lines:
            del lines[at : at + rng.randint(1, 3)]
        elif kind < 0.8 and at < len(lines):
            lines[at] = rng.choice(["", "  ", "> ", "# ", "- ", "    "]) + lines[at] + " edited"
        elif at < len(lines):
            lines[at] = rng.choice(EDIT_LINES)
    return "\n".join(lines)


def _same_as_whole(text: str, previous: MarkdownMap | None) -> MarkdownMap | None:
    """Parse `text` reusing `previous`; assert it equals a whole parse; return the new map."""
    whole = parse_markdown(text)
    reused = parse_markdown(text, previous)
    assert reused.blocks == whole.blocks
    assert reused.map == whole.map
    return reused.map


@pytest.mark.parametrize("window", [32, 256, structure.WINDOW_CHARS])
def test_random_edits_of_varied_documents_parse_as_a_whole_parse_does(
    window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(structure, "WINDOW_CHARS", window)
    rng = random.Random(window)
    for _ in range(150):
        text = _document(rng, rng.randint(1, 40))
        current = _same_as_whole(text, None)
        for _ in range(3):  # a chain of versions, each parsed with the map of the one before
            text = _edit(rng, text)
            current = _same_as_whole(text, current)


CASES = {
    "a fence opened mid-document swallows the rest": ("Tail paragraph.", "```\nTail paragraph."),
    "a setext underline turns a paragraph into a heading": (
        "Plain line\n\nBody.",
        "Plain line\n---------\n\nBody.",
    ),
    "a delimiter row turns lines into a table": (
        "| a | b |\n| 1 | 2 |",
        "| a | b |\n|---|---|\n| 1 | 2 |",
    ),
    "a link reference definition stops being a paragraph": (
        "[harbor] https://example.org",
        "[harbor]: https://example.org",
    ),
    "an HTML comment opened runs on": ("Closing words.", "<!--\nClosing words."),
    "a heading removed lifts the sections below it": (
        "## Middle\n\nUnder middle.",
        "Under middle.",
    ),
    "an indented line after a list joins the item": ("- item\n\nNext.", "- item\n\n  Next."),
}


@pytest.mark.parametrize("case", list(CASES))
def test_edits_that_change_what_follows_parse_as_a_whole_parse_does(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(structure, "WINDOW_CHARS", 64)
    before, after = CASES[case]
    sections = [f"## Part {n}\n\nPart {n} says {n * 7} things.\n\n| n | {n} |\n|---|---|" for n in range(30)]  # fmt: skip
    for where in (0, 12, 29):
        old = "\n\n".join([*sections[:where], before, *sections[where:]])
        new = "\n\n".join([*sections[:where], after, *sections[where:]])
        first = _same_as_whole(old, None)
        _same_as_whole(new, first)
        _same_as_whole(old, _same_as_whole(new, first))  # and back


class _CountingParser:
    """The block parser, counting the characters it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chars = 0

    def parse(self, src: str, env: Any = None) -> Any:
        self.chars += len(src)
        return self.inner.parse(src, env)


def _guide(edited: set[int], preface: str = "") -> str:
    parts = [f"# Harbour guide\n\n{preface}"]
    for n in range(300):
        fact = f"Berth {n} is {n + 10} metres deep." + (" It was dredged." if n in edited else "")
        parts.append(f"## Berth {n}\n\n{fact}\n\n```\ncrane {n}\n```\n")
    return "\n".join(parts)


def test_an_edit_is_parsed_near_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _CountingParser(structure._markdown_parser())
    monkeypatch.setattr(structure, "_markdown_parser", lambda: counting)
    monkeypatch.setattr(structure, "WINDOW_CHARS", 256)
    old = parse_markdown(_guide(set()))
    assert counting.chars == len(_guide(set()))
    for edited, preface in (({150}, ""), ({10, 100, 200}, ""), (set(), "Pilots board here.")):
        counting.chars = 0
        text = _guide(edited, preface)
        new = parse_markdown(text, old.map)
        assert counting.chars <= len(edited or {0}) * 3 * structure.WINDOW_CHARS < len(text) / 4
        assert new.blocks == parse_markdown(text).blocks


def test_a_map_that_cannot_be_used_is_ignored_and_the_text_parsed_whole() -> None:
    text = _guide({3})
    stored = parse_markdown(_guide(set())).map
    assert stored is not None
    blob = stored.dump()
    assert MarkdownMap.load(blob) == stored
    for bad in (b"", b"not a map", blob[:-7], blob[:40]):
        assert MarkdownMap.load(bad) is None
    other = parse_markdown("\n\n".join(reversed(text.split("\n\n")))).map  # not this text's
    assert parse_markdown(text, other).blocks == parse_markdown(text).blocks


def test_a_map_holding_a_block_of_over_64_kb_reads_back_as_it_was() -> None:
    """Columns are stored in two bytes a value when they fit, else in four."""
    for text in ("# Big\n\n" + "word " * 15_000 + "\n\n## After\n\nShort.", "# A\n\nText."):
        found = parse_markdown(text).map
        assert MarkdownMap.load(found.dump()) == found
        edited = text.replace("Short.", "Shorter.").replace("Text.", "Text, edited.")
        _same_as_whole(edited, found)
    assert int(parse_markdown("# Big\n\n" + "word " * 15_000).map.spans.max()) > 65_535


def test_carriage_returns_end_lines_as_the_parser_reads_them() -> None:
    for newline in ("\r", "\r\n"):
        text = newline.join(["# A", "", "Text.", "## B", "More.", "```", "x", "```"])
        blocks = parse_markdown(text).blocks
        assert [(b.kind, b.text, b.section) for b in blocks] == [
            ("heading", "# A", ("A",)),
            ("text", "Text.", ("A",)),
            ("heading", "## B", ("A", "B")),
            ("text", "More.", ("A", "B")),
            ("code", newline.join(["```", "x", "```"]), ("A", "B")),
        ]
        edited = text.replace("More.", "More, edited.")
        _same_as_whole(edited, parse_markdown(text).map)


def _placed(chunked: Any) -> list[tuple[str, int, int | None]]:
    """Every chunk, built or carried, as (id, position, start_index), in order."""
    built = [(r.id, r.position, r.metadata.get("start_index")) for r in chunked.rows]
    return sorted(built + [tuple(c) for c in chunked.carried], key=lambda c: c[1])


def _unplaced_map(blob: bytes | None) -> MarkdownMap | None:
    """A stored map without where its chunks' rows are (what an edit and a whole parse differ in)."""
    assert blob is not None
    found = MarkdownMap.load(blob)
    assert found is not None and found.packing is not None and found.packing.placed
    return dataclasses.replace(found, packing=dataclasses.replace(found.packing, placed=b""))


def _shifted(shifts: Any, position: int, start: int) -> tuple[int, int | None]:
    """Where shift ranges (`knowledge.placed.Shifts`) take a row stored at (position, start)."""
    if shifts is None:
        return position, None if start < 0 else start
    at = max(i for i, first in enumerate(shifts.start_at) if first <= position)
    return position + shifts.position[at], None if start < 0 else start + shifts.offset[at]


def test_the_chunks_of_an_edit_are_those_of_a_whole_parse(tmp_path: Path) -> None:
    def chunked(text: str, previous: bytes | None) -> Any:
        doc = SourceDoc(
            source=str(tmp_path / "guide.md"), text=text, syntax="markdown", metadata={}
        )
        return chunk_document(
            doc, collection="c", chunk_size=300, chunk_overlap=0, previous=previous
        )

    first = chunked(_guide(set()), None)
    assert first.structure is not None and not first.carried
    for edited, preface in (({7, 70}, ""), (set(), "A preface.")):
        text = _guide(edited, preface)
        whole, edit = chunked(text, None), chunked(text, first.structure)
        assert _placed(edit) == _placed(whole)
        assert all(row in whole.rows for row in edit.rows)
        # only the edited sections (and the first, which the preface joins) are built
        assert len(edit.rows) <= len(edited) + 1 and len(edit.carried) >= len(whole.rows) - 3
        assert _unplaced_map(edit.structure) == _unplaced_map(whole.structure)
        # the first version's rows stay where it wrote them: what is elsewhere now has moved
        rows = {r.id: (r.position, r.metadata.get("start_index")) for r in first.rows}
        assert whole.rows_at is None and edit.rows_at is not None
        assert edit.rows_at.listed == len(rows) and edit.rows_at.found <= rows.keys()
        placing = edit.rows_at.placing
        stored = placing.rows.tolist()
        # a kept row stays where it was written, a new one goes where its chunk is
        assert [(p, None if s < 0 else s) for p, s in stored] == [
            rows.get(i, (p + placing.offset, s)) for i, p, s in _placed(edit)
        ]
        # and the ranges take every row to its chunk's place
        assert [_shifted(placing.shifts, p, s) for p, s in stored] == [
            (p, s) for _, p, s in _placed(edit)
        ]
        moved = sum(rows[i] != (p, s) for i, p, s in _placed(edit) if i in rows)
        assert moved >= (10 if preface or 7 in edited else 0)
        assert placing.shifts is not None and len(placing.shifts.start_at) <= 2 * len(edited) + 2
    rst = SourceDoc(source="a.rst", text="Title\n=====\n\nBody.", syntax="rst", metadata={})
    assert chunk_document(rst, collection="c", chunk_size=300, chunk_overlap=0).structure is None


@pytest.mark.parametrize("chunk_size", [24, 120, 800])
def test_random_edits_pack_as_a_whole_parse_packs(chunk_size: int) -> None:
    """Runs taken from the stored packing give the chunks packing the whole text gives."""
    rng = random.Random(chunk_size)
    carried = 0
    for _ in range(60):
        text = _document(rng, rng.randint(1, 40))
        current = structure.pack_markdown(text, None, chunk_size=chunk_size, chunk_overlap=8)
        for _ in range(3):
            text = _edit(rng, text)
            whole = structure.pack(
                parse_markdown(text).blocks, text, chunk_size=chunk_size, chunk_overlap=8
            )
            loaded = MarkdownMap.load(current.map.dump())
            assert loaded == current.map
            current = structure.pack_markdown(text, loaded, chunk_size=chunk_size, chunk_overlap=8)
            fresh = structure.pack_markdown(text, None, chunk_size=chunk_size, chunk_overlap=8)
            assert fresh.pieces == whole and not any(fresh.source >= 0)
            # the same map and packing (each piece's place and length, run by run), and the
            # pieces packed anew are those of the whole text at the same places
            assert current.map == fresh.map
            assert current.starts.tolist() == fresh.starts.tolist()
            anew = [p for p, s in zip(whole, current.source.tolist(), strict=True) if s < 0]
            assert current.pieces == anew
            carried += int((current.source >= 0).sum())
    assert carried > 100  # the stored chunks were used, not only checked
    # packed with another chunk size, nothing is taken from the map
    other = structure.pack_markdown(text, current.map, chunk_size=chunk_size + 1, chunk_overlap=8)
    assert not any(other.source >= 0)


def test_identical_chunks_keep_their_own_ids_when_carried(tmp_path: Path) -> None:
    def chunked(text: str, previous: bytes | None) -> Any:
        doc = SourceDoc(source=str(tmp_path / "faq.md"), text=text, syntax="markdown", metadata={})
        return chunk_document(
            doc, collection="c", chunk_size=200, chunk_overlap=0, previous=previous
        )

    def faq(edited: int | None) -> str:
        # the same question under the same heading path, three times: three identical chunks
        parts = ["# FAQ"]
        for n in range(30):
            answer = "Restart it." + (" Then wait." if n == edited else "")
            parts += [f"## Q{n % 3}\n\n{answer}", f"## Note {n}\n\nNote {n} applies."]
        return "\n\n".join(parts)

    first = chunked(faq(None), None)
    previous = first.structure
    for edited in (4, 0, 29, None):
        text = faq(edited)
        whole, edit = chunked(text, None), chunked(text, previous)
        assert _placed(edit) == _placed(whole)
        assert len({c[0] for c in _placed(edit)}) == len(_placed(edit))  # every id its own
        assert len(edit.carried) >= len(_placed(whole)) - 4
        previous = edit.structure
