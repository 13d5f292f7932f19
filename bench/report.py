"""Writing a benchmark's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(path: Path, result: dict[str, Any]) -> None:
    """Write `result` as indented JSON to `path` (its folder made if missing) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
