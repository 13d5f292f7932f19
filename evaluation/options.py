"""The options comparison: the labelled set run with each loop option on and off, side by side.

Compared: ``duplicate_guard``, ``show_chunks_once``, ``budget_ledger``, parallel
searches (``max_parallel_searches`` 4 against 1) and ``min_support`` (0.7 against
unset, with the local grounder). Every other option keeps its default, so each
pair differs in one option only; runs with identical settings are run once.

Run it with ``arcana-loop eval loop --compare-options`` or ``python -m evaluation.options``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arcana_loop.core import bridge
from arcana_loop.evaluation.cases import CaseSet, EvalCase
from arcana_loop.evaluation.loop import aevaluate_loop
from arcana_loop.evaluation.report import format_metric
from arcana_loop.nodes.models import OFFLINE, ModelSpec

MIN_SUPPORT = 0.7
"""The ``min_support`` of the "on" run: below this grounding score an answer goes back once.

The offline controller's extractive answers quote chunk sentences and score 0.5 or more
with the local grounder, so a lower threshold would never send one back."""

OPTION_PAIRS: tuple[
    tuple[str, tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]], ...
] = (
    ("duplicate_guard", (("on", {"duplicate_guard": True}), ("off", {"duplicate_guard": False}))),
    (
        "show_chunks_once",
        (("on", {"show_chunks_once": True}), ("off", {"show_chunks_once": False})),
    ),
    ("budget_ledger", (("on", {"budget_ledger": True}), ("off", {"budget_ledger": False}))),
    (
        "parallel searches",
        (
            ("4 at once", {"max_parallel_searches": 4}),
            ("1 at a time", {"max_parallel_searches": 1}),
        ),
    ),
    (
        "min_support",
        ((f"{MIN_SUPPORT:g}", {"min_support": MIN_SUPPORT}), ("unset", {"min_support": None})),
    ),
)
"""Per option: its (label, options) settings, the default setting first except for ``min_support``."""

_DEFAULTS: dict[str, Any] = {
    "duplicate_guard": True,
    "show_chunks_once": True,
    "budget_ledger": True,
    "max_parallel_searches": 4,
    "min_support": None,
}

COLUMNS: tuple[tuple[str, str], ...] = (
    ("duplicate_search_rate", "duplicate-search rate"),
    ("searches_per_question", "searches / question"),
    ("searches_sent_per_question", "searches sent / question"),
    ("controller_input_tokens_per_question", "controller input tokens / question"),
    ("grounding_score", "grounding score"),
    ("answer_correctness", "answer correctness"),
    ("outcome_accuracy", "outcome accuracy"),
    ("repairs", "repairs"),
    ("latency_p50_ms", "latency p50 (ms)"),
)


def _settings_key(options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted({**_DEFAULTS, **options}.items()))


async def acompare_options(
    cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]],
    *,
    search_fn: Any = None,
    collection: str | list[str] | None = None,
    controller: ModelSpec = OFFLINE,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the cases once per distinct setting and return the side-by-side rows.

    Returns:
        ``{"kind": "options", "controller", "tokens_estimated", "runs": {label: {"options", "summary"}},
        "rows": [{"option", "setting", "run", <column>: value, ...}]}``.
    """
    runs: dict[tuple[tuple[str, Any], ...], tuple[str, dict[str, Any]]] = {}
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for option, settings in OPTION_PAIRS:
        for label, options in settings:
            key = _settings_key(options)
            if key not in runs:
                run_label = f"{option}={label}"
                if progress:
                    progress(run_label)
                report = await aevaluate_loop(
                    cases,
                    search_fn=search_fn,
                    collection=collection,
                    controller=controller,
                    grounder="local",
                    options=options,
                )
                runs[key] = (run_label, report)
            run_label, run_report = runs[key]
            rows.append(
                {"option": option, "setting": label, "run": run_label, **_columns(run_report)}
            )
    return {
        "kind": "options",
        "name": report.get("name"),
        "collection": report.get("collection"),
        "controller": report.get("controller"),
        "tokens_estimated": report.get("tokens_estimated"),
        "cases": report.get("summary", {}).get("cases"),
        "runs": {
            label: {"options": r["options"], "summary": r["summary"]} for label, r in runs.values()
        },
        "rows": rows,
    }


def _columns(report: Mapping[str, Any]) -> dict[str, Any]:
    summary = report["summary"]
    p50 = summary["latency_s"]["p50"]
    return {
        **{name: summary.get(name) for name, _ in COLUMNS if name in summary},
        "latency_p50_ms": None if p50 is None else p50 * 1000,
    }


def compare_options(
    cases: CaseSet | Sequence[EvalCase | Mapping[str, Any]], **kwargs: Any
) -> dict[str, Any]:
    """Run `acompare_options` on a new event loop (see it for the arguments)."""
    return bridge.wait(acompare_options(cases, **kwargs))


def options_table_markdown(report: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table, one row per option setting."""
    header = ["option", "setting", *(title for _, title in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report["rows"]:
        lines.append(
            "| "
            + " | ".join(
                [
                    row["option"],
                    row["setting"],
                    *(format_metric(row.get(name)) for name, _ in COLUMNS),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    """Compare the options on the shipped python-docs set with the offline controller and print the table."""
    from arcana_loop.evaluation.cases import PYTHON_DOCS_EVAL, load_cases
    from arcana_loop.knowledge import KnowledgeBase
    from arcana_loop.knowledge.stdlib_docs import ensure_python_docs

    kb = KnowledgeBase()
    ensure_python_docs(kb)
    report = compare_options(load_cases(PYTHON_DOCS_EVAL), search_fn=kb.search)
    print(options_table_markdown(report))  # noqa: T201  # the module's command-line output


if __name__ == "__main__":
    main()
