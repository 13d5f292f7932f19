"""``arcana-loop ingest --entities`` and ``arcana-loop entities build`` in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures.processes import clean_env
from tests.fixtures.processes import run_cli as cli

pytestmark = pytest.mark.postgres


def counts(done: subprocess.CompletedProcess[str]) -> list[str]:
    """Chunks processed, skipped, entities, from the printed table."""
    assert done.returncode == 0, done.stderr
    row = [line for line in done.stdout.splitlines() if line.startswith("│")][-1]
    return [cell.strip() for cell in row.strip("│").split("│")][:3]


def test_ingest_with_entities_then_build(pg_url: str, tmp_path: Path) -> None:
    env = {
        **clean_env(),
        "DATABASE_URL": pg_url,
    }
    doc = tmp_path / "tasks.md"
    doc.write_text(
        "# Tasks\n\nasyncio.wait_for raises TimeoutError; ThreadPoolExecutor runs blocking calls.\n"
    )
    ingested = cli("ingest", str(doc), "--collection", "entities-cli", "--entities", env=env)
    assert ingested.returncode == 0, ingested.stderr
    assert counts(cli("entities", "build", "entities-cli", env=env)) == [
        "0",
        "0",
        "3",
    ]  # ingest built it
    assert counts(cli("entities", "build", "entities-cli", "--rebuild", env=env)) == ["1", "0", "3"]
    missing = cli("entities", "build", "no-such-collection", env=env)
    assert missing.returncode == 1
    assert "no collection named 'no-such-collection'" in missing.stderr and "Hint" in missing.stderr
    cli("delete", "entities-cli", "--yes", env=env)
