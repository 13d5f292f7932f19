"""The offline controller over a real knowledge base: a folder of notes, asked as the README asks it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arcana_loop.graph import run
from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres


def test_how_do_i_deploy_is_answered_from_the_deploy_notes_and_cited_readably(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "deploy.md").write_text(
        "# Deploy\n\nRun `make release` from the main branch, then tag the commit with the "
        "version number.\n\n## Port allocation\n\nEach service gets a port from 9000 upwards.\n"
    )
    (docs / "guides" / "setup.md").write_text(
        "# Setup\n\nInstall the tools with `make setup`; the setup needs Python 3.11.\n"
    )
    kb.ingest(docs, collection="docs")
    result = run(
        "How do I deploy?", controller_llm="offline", search_fn=kb.search, collection="docs"
    )
    assert result.terminated_by == "answered" and result.answer_kind == "extracted"
    assert result.answer.startswith("Deploy: Run `make release` from the main branch")
    first = result.sources[0]
    assert (first["source"], first["section"]) == ("deploy.md", "Deploy")
    readable = result.readable_answer or ""
    # titled "Deploy" by its heading: said once, as the file's name
    assert "[1]." in readable and "\n\nSources:\n[1] deploy.md\n" in readable + "\n"
    assert not re.search(r"[0-9a-f]{32}", readable) and str(tmp_path) not in readable


def test_a_question_naming_what_no_document_mentions_is_given_up_naming_it(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "csv.md").write_text(
        "# Reading CSV files\n\nOpen the file with newline='' and read it with csv.reader; "
        "each row is a list of strings, and dates stay strings until you parse them.\n"
    )
    (docs / "notes.md").write_text("# Notes\n\nThe frobnicator is configured in settings.\n")
    kb.ingest(docs / "csv.md", collection="docs")
    kb.ingest(docs / "notes.md", collection="other")
    question = "When loading a CSV with pandas read_csv, how do I get a column parsed as dates?"

    found = kb.search(question, collection="docs")
    assert found and isinstance(found, list)
    assert found.unmatched == ("loading", "pandas", "read_csv", "column")  # the question's order
    assert not {"csv", "dates", "parsed"} & set(found.unmatched)  # stems: "parse" is in the text
    # scoped: a word only another collection holds is unmatched in this one
    assert "frobnicator" in kb.search("frobnicator settings", collection="docs").unmatched
    assert "frobnicator" not in kb.search("frobnicator settings", collection="all").unmatched

    result = run(question, controller_llm="offline", search_fn=kb.search, collection="docs")
    assert result.terminated_by == "gave_up"
    assert result.tool_history[-1]["args"]["reason"] == (
        "the knowledge base never mentions pandas, read_csv"
    )
    searches = [e for e in result.tool_history if e["tool"] == "search"]
    assert all("pandas" in e["unmatched"] for e in searches)
    assert searches[0]["summary"].endswith(
        "\n\nNo document searched contains: loading, pandas, read_csv, column."
    )


def test_a_plain_word_no_document_uses_is_no_reason_to_give_up(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    (tmp_path / "csv.md").write_text(
        "# Reading CSV files\n\nRead a CSV file with csv.reader: each row is a list of strings.\n"
    )
    kb.ingest(tmp_path / "csv.md", collection="docs")
    result = run(
        "How do I read the rows of a CSV file of pizza toppings?",
        controller_llm="offline",
        search_fn=kb.search,
        collection="docs",
    )
    assert "toppings" in result.tool_history[0]["unmatched"]  # reported, yet common English
    assert result.terminated_by == "answered"


def test_a_long_question_is_cut_at_a_word_and_answered(kb: KnowledgeBase, tmp_path: Path) -> None:
    from arcana_loop.knowledge.queries import MAX_QUERY_CHARS

    notes = tmp_path / "limits.md"
    notes.write_text(
        "# Limits\n\nThe rate limit is 100 requests a minute per API key; deployment of a new "
        "key takes a minute.\n"
    )
    kb.ingest(notes, collection="limits")
    asked = "What is the rate limit?"
    while len(asked) + len(" limit") < MAX_QUERY_CHARS - 5:
        asked += " limit"  # words the notes hold, up to just before the cut
    question = asked.ljust(MAX_QUERY_CHARS - 5) + "deployment " * 3
    assert question[:MAX_QUERY_CHARS].endswith(" deplo")  # the cut falls inside a word
    found = kb.search(question, collection="limits")
    assert found and not found.unmatched  # no half word is a name the notes never mention
    result = run(question, controller_llm="offline", search_fn=kb.search, collection="limits")
    assert result.terminated_by == "answered"
    assert "100 requests a minute" in (result.answer or "")
