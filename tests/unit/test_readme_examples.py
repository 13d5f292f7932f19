"""Every Python block of the README runs as written.

The blocks run in order, each in a fresh interpreter (a reader copies one block at a
time), in one folder holding a `docs/` of Markdown files, on an embedded PostgreSQL of their own and a scripted
OpenAI-compatible server where a block names an OpenAI model. A block's line that is
only a comment of the form ``# ... <what the reader does> ...`` is where the test does
that (editing `docs/`), and a ``# 1, 1, 1``-style comment after an expression is checked
as that expression's value. The block that talks to a LangGraph server runs against
one the test starts, its address put in place of the README's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.openai_server import ScriptedOpenAIServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

README = Path(__file__).parents[2] / "README.md"
SERVER_ADDRESS = "http://127.0.0.1:2024"
READER_STEP = re.compile(r"^# \.\.\. (.+) \.\.\.$")
CHECKED_VALUE = re.compile(r"^(?P<expr>[^#]+?)\s*#\s*(?P<value>-?\d+(?:,\s*-?\d+)*)\s*$")

DOCS = {
    "deploy.md": "# Deploying\n\nDeploy with `make release`; roll back with `make rollback`.\n",
    "old.md": "# Old notes\n\nThe old deploy used a shell script.\n",
    "setup.md": "# Setup\n\nInstall the release tools first.\n",  # unchanged: neither added nor replaced
}
EDIT_DOCS = """
from pathlib import Path
Path("docs/deploy.md").write_text(Path("docs/deploy.md").read_text() + "\\nRelease on Tuesdays.\\n")
Path("docs/old.md").unlink()
Path("docs/new.md").write_text("# New notes\\n\\nReleases are tagged v1.2.3.\\n")
"""


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def runnable(block: str) -> str:
    """The block with the reader's steps done and its stated values checked."""
    lines = []
    for line in block.splitlines():
        step = READER_STEP.match(line.strip())
        checked = CHECKED_VALUE.match(line)
        if step:
            assert "edited" in step[1], f"no test step for the README's {step[1]!r}"
            lines.append(EDIT_DOCS)
        elif checked and "," in checked["value"]:
            expected = tuple(int(v) for v in checked["value"].split(","))
            lines.append(f"assert ({checked['expr']}) == {expected!r}, ({checked['expr']})")
        else:
            lines.append(line)
    return "\n".join(lines)


def test_the_readme_has_python_blocks_and_stays_a_front_door():
    text = README.read_text()
    assert len(python_blocks(text)) >= 5
    assert len(text.splitlines()) <= 450


def test_every_python_block_of_the_readme_runs(tmp_path, langgraph_server):
    blocks = python_blocks(README.read_text())
    served = [b for b in blocks if SERVER_ADDRESS in b]
    local = [b for b in blocks if SERVER_ADDRESS not in b]
    folder = tmp_path / "work"
    (folder / "docs").mkdir(parents=True)
    for name, text in DOCS.items():
        (folder / "docs" / name).write_text(text)
    pgdata = tmp_path / "pg" / "pgdata"
    stop = "from arcana_loop.knowledge.server import stop_embedded_server\nstop_embedded_server()"
    with ScriptedOpenAIServer() as openai:
        # the README's run with "openai:gpt-4o-mini": a search, then an answer
        openai.enqueue(
            {"tool_calls": [{"name": "search", "arguments": {"query": "deploy"}}]},
            {"tool_calls": [{"name": "answer", "arguments": {"text": "Run make release."}}]},
        )
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env |= {
            "ARCANA_LOOP_PGDATA": str(pgdata),
            "ARCANA_LOOP_EMBEDDINGS": "wordllama",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": openai.base_url,
        }
        try:
            for number, block in enumerate(local, 1):
                done = subprocess.run(
                    [sys.executable, "-c", runnable(block)],
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert done.returncode == 0, f"block {number}:\n{done.stderr[-3000:]}"
        finally:
            subprocess.run([sys.executable, "-c", stop], env=env, timeout=120, check=False)
        assert len(openai.requests) == 2  # the README's OpenAI run asked the scripted model
    for block in served:
        code = textwrap.dedent(block).replace(SERVER_ADDRESS, langgraph_server.url)
        served_run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert served_run.returncode == 0, served_run.stderr[-3000:]
