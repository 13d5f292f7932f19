"""The benchmark scripts' own logic: every variant runs its whole script, and counts are read right."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from bench import corpus, loop_bench, loop_instructions


def test_every_loop_variant_runs_the_whole_script_without_a_checkpointer():
    runners = loop_bench.make_runners(loop_bench.InstantChatModel(), {"none": None})
    loop_bench.check_runs(runners)  # raises if a variant ends early or gathers the wrong chunks


@pytest.mark.parametrize("variant", loop_instructions.VARIANTS)
def test_instruction_variants_name_runnable_loops(variant):
    loop_instructions.run_variant(variant, 1)


def test_the_instruction_count_is_read_from_valgrind_output():
    stderr = "==12== Events    : Ir\n==12== Collected : 123456789\n==12==\n==12== I   refs:      123,456,789\n"
    found = loop_instructions._COLLECTED.search(stderr)
    assert found is not None and int(found.group(1)) == 123456789


# -- the distinct benchmark corpus (bench.corpus) on a tiny fake tree -------------------

_WORDS = "alpha beta gamma delta epsilon zeta theta iota kappa lambda sigma omega".split()


def _paragraph(seed: int, words: int = 60) -> str:
    """A distinct paragraph of plain words (a few hundred characters)."""
    return " ".join(
        _WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(_WORDS)] + str(seed) for i in range(words)
    )


def _ingest_chunks(path):
    from arcana_loop.knowledge.loading import read_file, split_document

    doc = read_file(path, max_bytes=10**7, metadata={})
    rows = split_document(doc, collection="main", chunk_size=corpus.CHUNK_CHARS, chunk_overlap=0)
    return [row.text for row in rows]


def test_repeated_chunks_are_kept_once_whatever_their_case_and_spacing():
    shared = _paragraph(1)
    docs = [
        corpus.Document("doc/a/README", "\n\n".join([shared, _paragraph(2)])),
        corpus.Document(
            "doc/b/README", "\n\n".join([shared.upper().replace(" ", "\t"), _paragraph(3)])
        ),
    ]
    built = corpus.distinct_corpus(docs, size=100)
    chunks = [c for _, cs in built.documents for c in cs]
    assert built.duplicates == 1 and built.chunks == 3
    assert len({corpus.normalised_hash(c) for c in chunks}) == 3


def test_chunks_are_near_the_chunk_size_and_the_ingest_cuts_exactly_them(tmp_path):
    paragraphs = [_paragraph(i, words=10 + 13 * (i % 9)) for i in range(80)]
    # lines with no blank line between them (a changelog), five of them fill a chunk exactly
    run_on = "\n".join(
        f"entry {i:04d} " + _paragraph(i)[: corpus.CHUNK_CHARS // 5 - 12] for i in range(60)
    )
    text = "\n\n".join([*paragraphs, run_on])
    built = corpus.distinct_corpus([corpus.Document("python/fake", text)], size=10_000)
    chunks = built.documents[0][1]
    sizes = [len(c) for c in chunks]
    assert min(sizes) >= corpus.MIN_CHUNK_CHARS and max(sizes) <= corpus.CHUNK_CHARS
    assert statistics.median(sizes) >= 0.8 * corpus.CHUNK_CHARS
    assert all("\n\n" not in c for c in chunks)
    corpus.write_corpus(built, tmp_path)
    [written] = list(tmp_path.rglob("*.txt"))
    assert _ingest_chunks(written) == chunks  # the corpus size is what the ingest stores


def test_the_corpus_stops_at_its_size_in_a_fixed_order():
    docs = [
        corpus.Document(f"doc/p{i}/NEWS", "\n\n".join(_paragraph(10 * i + j) for j in range(5)))
        for i in range(6)
    ]
    first = corpus.distinct_corpus(docs, size=13)
    again = corpus.distinct_corpus(list(reversed(docs)), size=13)
    assert first.chunks == 13 and first.documents == again.documents


def test_docstrings_are_read_without_importing_and_broken_source_is_skipped():
    source = b'"""Module doc."""\nimport no_such_module\nclass A:\n    """Class doc."""\n    def f(self):\n        """Method doc."""\n'
    assert corpus.module_docstrings(source, "pkg.mod") == (
        "pkg.mod\nModule doc.\n\npkg.mod.A\nClass doc.\n\npkg.mod.A.f\nMethod doc."
    )
    assert corpus.module_docstrings(b"def broken(:\n", "pkg.bad") == ""


def test_doc_tree_keeps_text_and_gzip_and_skips_licences_and_binaries(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "README").write_text(_paragraph(1))
    with gzip.open(pkg / "changelog.Debian.gz", "wt") as file:
        file.write(_paragraph(2))
    (pkg / "copyright").write_text(_paragraph(3))
    (pkg / "notes.txt").write_bytes(b"\x00\x01binary")
    (pkg / "manual.html").write_text(_paragraph(4))
    docs = {d.name: d.text for d in corpus.doc_documents(tmp_path)}
    assert docs == {"doc/pkg/README": _paragraph(1), "doc/pkg/changelog.Debian.gz": _paragraph(2)}


def test_build_writes_main_small_and_a_manifest_and_reuses_it(tmp_path, monkeypatch):
    docs = [
        corpus.Document(f"python/m{i}", "\n\n".join(_paragraph(10 * i + j) for j in range(3)))
        for i in range(30)
    ]
    monkeypatch.setattr(corpus, "_all_documents", lambda *_: iter(docs))
    root = corpus.build(50, cache_dir=tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["chunks"] == 50 == manifest["main_chunks"] + manifest["small_chunks"]
    assert manifest["small_chunks"] > 0
    assert len(corpus.read_chunks(root / "main")) == manifest["main_chunks"]
    monkeypatch.setattr(corpus, "_all_documents", lambda *_: pytest.fail("rebuilt a cached corpus"))
    assert corpus.build(50, cache_dir=tmp_path) == root


def test_package_summaries_come_last_one_chunk_each_and_never_twice(tmp_path):
    listing = tmp_path / "pypi.tsv"
    rows = [
        ("name", "version", "summary (a note on the column)"),
        ("alpha-tool", "1.0", "Parse alpha files into typed records quickly"),
        ("beta-tool", "2.0", "[tested here: ok] Render beta diagrams as SVG images"),
        ("gamma", "0.1", "PARSE ALPHA   files into typed records quickly"),  # a duplicate
        ("tiny", "0.1", "short"),  # too short to be a chunk
        ("heading", "0.1", "# Looks like a Markdown heading, so it is left out"),
        ("no-summary", "0.1"),
    ]
    listing.write_text("\n".join("\t".join(r) for r in rows) + "\n")
    docs = [corpus.Document("python/m", "\n\n".join(_paragraph(j) for j in range(3)))]
    summaries = list(corpus.summary_documents(listing))
    built = corpus.distinct_corpus(summaries + docs, size=100)
    names = [name for name, _ in built.documents]
    assert names == ["python/m", "packages/pypi/00000"]  # the other sources first
    assert built.documents[1][1] == [
        "## alpha-tool\nParse alpha files into typed records quickly",
        "## beta-tool\nRender beta diagrams as SVG images",
    ]
    assert built.duplicates == 1
    corpus.write_corpus(built, tmp_path / "out")
    (written,) = (tmp_path / "out").rglob("*.md")
    assert len(_ingest_chunks(written)) == 2  # each section is one chunk when ingested
    every_chunk = [c for _, chunks in built.documents for c in chunks]
    assert sorted(corpus.read_chunks(tmp_path / "out")) == sorted(every_chunk)  # titles left out


def test_a_summary_list_without_its_columns_is_refused_by_name(tmp_path):
    listing = tmp_path / "odd.tsv"
    listing.write_text("package\tabout\nx\ty\n")
    with pytest.raises(ValueError, match="odd.tsv"):
        list(corpus.summary_documents(listing))
    with pytest.raises(ValueError, match="no such summary list"):
        corpus.summary_lists([tmp_path / "missing.tsv"])


def test_the_cli_bench_times_a_child_and_refuses_one_that_fails():
    import os
    import sys

    from bench import cli_bench

    wall, cpu = cli_bench.timed([sys.executable, "-c", "sum(range(3_000_000))"], dict(os.environ))
    assert wall > 0 and cpu > 0  # the child's own CPU, from the kernel's accounting
    with pytest.raises(RuntimeError, match="failed: boom"):
        cli_bench.timed([sys.executable, "-c", "import sys; sys.exit('boom')"], dict(os.environ))
