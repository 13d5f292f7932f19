"""Evaluation reports on disk, and the metric deltas between two of them.

A report is the JSON object `evaluate_retrieval`, `evaluate_loop` or
`compare_options` returns. Its metrics are its numeric leaves outside the
per-case rows, named by their dotted path (``summary.answer_correctness``,
``modes.hybrid.summary.recall@5``, ``runs.duplicate_guard=off.summary.tokens_per_question``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPORT_KINDS = ("retrieval", "loop", "options")
_SKIPPED = frozenset({"per_case", "distributions", "options", "ks", "created_at"})
"""Not compared: per-case rows, distribution details and run settings."""


def save_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write a report as indented JSON, creating the parent directory."""
    _check_report(report, str(path))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    return target


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a report written by `save_report`.

    Raises:
        FileNotFoundError: when there is no such file.
        ValueError: for a file that is not JSON or not an evaluation report.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    _check_report(data, str(path))
    return dict(data)


def _check_report(report: Any, where: str) -> None:
    if not isinstance(report, Mapping) or report.get("kind") not in REPORT_KINDS:
        raise ValueError(
            f"{where}: not an evaluation report (expected an object with kind one of {REPORT_KINDS})"
        )


def flatten_metrics(report: Mapping[str, Any], prefix: str = "") -> dict[str, int | float]:
    """Return every numeric metric of a report by its dotted path (a count stays an int)."""
    metrics: dict[str, int | float] = {}
    for key, value in report.items():
        if key in _SKIPPED:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            metrics.update(flatten_metrics(value, f"{name}."))
        elif (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            metrics[name] = value
    return metrics


def diff_reports(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Compare two reports of the same kind metric by metric.

    Returns:
        ``{"kind", "before", "after", "metrics": [{"name", "before", "after", "delta"}]}``;
        a metric present in one report only has ``None`` on the other side and no delta.

    Raises:
        ValueError: when the reports are not reports, or of different kinds.
    """
    _check_report(before, "before")
    _check_report(after, "after")
    if before["kind"] != after["kind"]:
        raise ValueError(f"cannot diff a {before['kind']} report with a {after['kind']} report")
    old, new = flatten_metrics(before), flatten_metrics(after)
    rows = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        rows.append(
            {
                "name": name,
                "before": a,
                "after": b,
                "delta": None if a is None or b is None else b - a,
            }
        )
    return {
        "kind": before["kind"],
        "before": _label(before),
        "after": _label(after),
        "metrics": rows,
    }


def format_metric(value: Any) -> str:
    """A metric as the report tables show it: a dash for none, 3 decimals below 10, whole thousands above."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)


def format_delta(delta: int | float) -> str:
    """A change of a metric, signed: a count as a count (``+2``), a rate to 3 decimals (``+0.125``)."""
    return f"{delta:+,d}" if isinstance(delta, int) else f"{delta:+.3f}"


def _label(report: Mapping[str, Any]) -> str:
    parts = [str(report.get(k)) for k in ("name", "controller", "created_at") if report.get(k)]
    return " / ".join(parts) or str(report["kind"])
