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
    assert "[1]." in readable and "\n\nSources:\n[1] deploy.md > Deploy" in readable
    assert not re.search(r"[0-9a-f]{32}", readable) and str(tmp_path) not in readable
