"""pypdf's warnings about a damaged PDF it repairs are in the --verbose log, not on a plain ingest's stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from arcana_loop.knowledge import KnowledgeBase

pytestmark = pytest.mark.postgres

CAPACITY = Path(__file__).resolve().parents[2] / "evaluation" / "data" / "mixed" / "capacity.pdf"


def damaged_pdf(path: Path) -> Path:
    """The capacity report with its startxref offset off by seven bytes (pypdf repairs it, warning)."""
    data = CAPACITY.read_bytes()
    tail = data.rindex(b"startxref")
    offset = re.search(rb"startxref\s+(\d+)", data[tail:])
    assert offset is not None
    wrong = str(int(offset.group(1)) + 7).encode()
    path.write_bytes(data[:tail] + data[tail:].replace(offset.group(1), wrong, 1))
    return path


@pytest.mark.parametrize("verbose", [False, True])
def test_pypdf_warnings_show_only_in_the_verbose_log(
    verbose: bool, pg_url: str, tmp_path: Path
) -> None:
    pdf = damaged_pdf(tmp_path / "report.pdf")
    name = f"pdf-{uuid.uuid4().hex[:6]}"
    command = [sys.executable, "-m", "arcana_loop.cli.main", *(["--verbose"] * verbose)]
    try:  # a process of its own: the CLI configures logging as an application does
        done = subprocess.run(
            [*command, "ingest", str(pdf), "-c", name],
            env={**os.environ, "DATABASE_URL": pg_url},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr
        stored = KnowledgeBase(pg_url).documents(name)
    finally:
        KnowledgeBase(pg_url).delete_collection(name)
    assert [d.chunks > 0 for d in stored] == [True]  # repaired and read
    assert ("incorrect startxref pointer" in done.stderr) is verbose
    # under the knowledge base's logger, naming the file
    assert (f"INFO arcana_loop.knowledge.loaders: {pdf}: pypdf" in done.stderr) is verbose
