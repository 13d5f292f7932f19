"""``arcana-loop eval``: retrieval and loop evaluation on a labelled case set, generation, diffs.

Every command prints a Rich table, or the whole report as JSON with ``--json``;
``--out PATH`` also writes the report, so two runs can be compared with ``eval diff``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer
from rich.table import Table

from arcana_loop.cli.flags import FROM_FLAGS, Flag, flag_group, loop_flags
from arcana_loop.evaluation.report import format_delta, format_metric

eval_app = typer.Typer(
    help="Evaluate retrieval and the loop on a labelled case set.",
    no_args_is_help=True,
    add_completion=False,
)

CasesOption = Annotated[
    Path | None,
    typer.Option("--cases", help="Case file (default: the shipped set named by --set)."),
]
SetOption = Annotated[
    str,
    typer.Option(
        "--set",
        help="Shipped python-docs set: realistic (questions as people ask them) or lookup (questions naming their answer).",
    ),
]
SplitOption = Annotated[
    str | None,
    typer.Option(
        "--split", help="Only the cases of this split: tune or test (the realistic set has both)."
    ),
]
CollectionOption = Annotated[
    str | None,
    typer.Option("--collection", "-c", help="Collection searched (default: the case file's)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the whole report as JSON.")]
OutOption = Annotated[
    Path | None, typer.Option("--out", help="Also write the report to this file.")
]


def _cli() -> ModuleType:
    from arcana_loop.cli import common

    return common


@dataclass(frozen=True)
class CaseChoice:
    """The flags that choose an evaluation's cases and the collection it searches."""

    cases_path: CasesOption = None
    set_name: SetOption = "realistic"
    split: SplitOption = None
    collection: CollectionOption = None


def _load_cases(choice: CaseChoice) -> Any:
    from arcana_loop.evaluation.cases import EVAL_SETS, SPLITS, CaseSet, load_cases

    set_name, split = choice.set_name, choice.split
    if set_name not in EVAL_SETS:
        _cli().fail(f"--set must be one of {', '.join(EVAL_SETS)}, got {set_name!r}.")
    if split is not None and split not in SPLITS:
        _cli().fail(f"--split must be one of {', '.join(SPLITS)}, got {split!r}.")
    target = choice.cases_path or EVAL_SETS[set_name]
    try:
        cases = load_cases(target)
    except FileNotFoundError:
        _cli().fail(
            f"no case file at {target}.",
            "pass --cases PATH, or generate one with arcana-loop eval generate",
        )
    except ValueError as exc:
        _cli().fail(
            f"the case file is not valid: {exc}",
            "a case file is JSON as arcana-loop eval generate writes it",
        )
    if split is None:
        return cases
    chosen = [c for c in cases.cases if c.split == split]
    if not chosen:
        _cli().fail(f"no case of {target} is in the {split!r} split.")
    return CaseSet(
        chosen,
        name=f"{cases.name}/{split}",
        collection=cases.collection,
        description=cases.description,
    )


def _prepare_kb(collection: str | None) -> Any:
    from arcana_loop.knowledge.stdlib_docs import COLLECTION, ensure_python_docs

    main = _cli()
    kb = main.knowledge_base()
    if collection == COLLECTION:
        with main.err.status("Ingesting the Python standard library docs (first run only)..."):
            ensure_python_docs(kb)
    known = {c.name for c in kb.collections()}
    if collection is not None and collection not in known:
        main.fail(
            f"no collection named {collection!r}.",
            f"known collections: {', '.join(sorted(known)) or 'none'}",
        )
    return kb


def _emit(report: dict[str, Any], as_json: bool, out_path: Path | None, table: Table) -> None:
    from arcana_loop.evaluation.report import save_report

    main = _cli()
    if out_path is not None:
        try:
            save_report(report, out_path)
        except OSError as exc:
            main.fail(f"could not write {out_path}: {exc}", "check the path and its permissions")
    if as_json:
        print(json.dumps(report, ensure_ascii=False, indent=2, default=str))  # machine output
        return
    main.out.print(table)
    if out_path is not None:
        main.err.print(f"[dim]Report written to {main.shown(out_path)}[/]")


@eval_app.command("retrieval")
@flag_group(CaseChoice)
def retrieval(
    choice: CaseChoice = FROM_FLAGS,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            "--mode", help="Search mode; repeat to compare (default: semantic, fulltext, hybrid)."
        ),
    ] = None,
    k: Annotated[
        list[int] | None,
        typer.Option("--k", help="Cut-off; repeat for several (default: 1 3 5 10)."),
    ] = None,
    as_json: JsonOption = False,
    out_path: OutOption = None,
) -> None:
    """Score retrieval per search mode: recall, precision and hit at k, and MRR."""
    from arcana_loop.evaluation.metrics import DEFAULT_KS
    from arcana_loop.evaluation.retrieval import evaluate_retrieval

    cases = _load_cases(choice)
    scope = choice.collection or cases.collection
    kb = _prepare_kb(scope)
    try:
        report = evaluate_retrieval(
            cases,
            kb,
            collection=scope,
            modes=mode or ("semantic", "fulltext", "hybrid"),
            k=k or DEFAULT_KS,
        )
    except ValueError as exc:
        _cli().fail(str(exc), "modes are semantic, fulltext and hybrid; k must be 1 or more")
    modes = report["modes"]
    table = Table("metric", *modes, title=f"Retrieval over {report['cases']} labelled cases")
    metrics = [f"{name}@{n}" for name in ("recall", "precision", "hit") for n in report["ks"]] + [
        "mrr"
    ]
    for metric in metrics:
        table.add_row(
            metric, *(format_metric(result["summary"].get(metric)) for result in modes.values())
        )
    table.add_row(
        "latency p50 (ms)",
        *(format_metric(result["latency_ms"]["p50"]) for result in modes.values()),
    )
    _emit(report, as_json, out_path, table)


def _named_options(option: list[str] | None) -> dict[str, Any]:
    """The ``--option NAME=VALUE`` flags as run options (a value is JSON, else the string)."""
    options: dict[str, Any] = {}
    for item in option or []:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            _cli().fail(
                f"--option {item!r} is not NAME=VALUE.",
                "e.g. --option chunk_cap=20 (values are JSON, else strings)",
            )
        try:
            options[name.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[name.strip()] = raw
    return options


def _loop_table(report: dict[str, Any]) -> Table:
    summary = report["summary"]
    estimated = " (estimated)" if report.get("tokens_estimated") else ""
    table = Table(
        "metric",
        "value",
        title=f"Loop evaluation: {summary['cases']} cases, controller {report['controller']}",
    )
    rows = [
        ("answer correctness", summary["answer_correctness"]),
        ("outcome accuracy", summary["outcome_accuracy"]),
        ("answered when answerable", summary["answered_when_answerable"]),
        ("gave up when unanswerable", summary["gave_up_when_unanswerable"]),
        ("grounding score (answered)", summary["grounding_score"]),
        ("duplicate-search rate", summary["duplicate_search_rate"]),
        ("searches / question", summary["searches_per_question"]),
        ("iterations / question", summary["iterations_per_question"]),
        (f"tokens / question{estimated}", summary["tokens_per_question"]),
        (
            f"controller input tokens / question{estimated}",
            summary["controller_input_tokens_per_question"],
        ),
        ("latency p50 (s)", summary["latency_s"]["p50"]),
        ("latency p95 (s)", summary["latency_s"]["p95"]),
        ("repairs", summary["repairs"]),
        ("errors", summary["errors"]),
        (
            "terminated by",
            ", ".join(f"{k} {v}" for k, v in sorted(summary["terminated_by"].items())),
        ),
    ]
    for name, value in rows:
        table.add_row(name, format_metric(value))
    return table


def _options_table(report: dict[str, Any]) -> Table:
    from arcana_loop.evaluation.options import COLUMNS

    estimated = " (tokens estimated)" if report.get("tokens_estimated") else ""
    table = Table(
        "option",
        "setting",
        *(title for _, title in COLUMNS),
        title=f"Options on and off, controller {report['controller']}{estimated}",
    )
    for row in report["rows"]:
        table.add_row(
            row["option"], row["setting"], *(format_metric(row.get(name)) for name, _ in COLUMNS)
        )
    return table


@eval_app.command("loop")
@loop_flags(
    Flag("duplicate_guard", help="Answer repeated searches from the history."),
    Flag("show_chunks_once", help="Show a chunk's text only the first time."),
    Flag("budget_ledger", help="Show the controller its budget every turn."),
    Flag("max_parallel_searches", help="Searches of one turn run at once."),
    Flag("min_support", help="Send answers grounded below this back once."),
    Flag("max_iterations", help="Most controller turns."),
)
@flag_group(CaseChoice)
def loop(
    choice: CaseChoice = FROM_FLAGS,
    model: Annotated[
        str, typer.Option("--model", help="Controller model, e.g. offline or openai:gpt-4o-mini.")
    ] = "offline",
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model", help="Model that grades answers (default: key-fact matching)."
        ),
    ] = None,
    grounder: Annotated[
        str, typer.Option("--grounder", help="Grounder: local, llm_judge, or none.")
    ] = "local",
    options: dict[str, Any] = FROM_FLAGS,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Any other loop option as NAME=VALUE; repeatable."),
    ] = None,
    compare_options: Annotated[
        bool,
        typer.Option(
            "--compare-options",
            help="Run the set once per option setting, side by side (with the --model controller).",
        ),
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Evaluate only the first N cases.")
    ] = None,
    as_json: JsonOption = False,
    out_path: OutOption = None,
) -> None:
    """Run each question through the loop and score outcome, correctness, grounding, searches, tokens and latency."""
    from arcana_loop.evaluation.cases import CaseSet
    from arcana_loop.evaluation.loop import evaluate_loop
    from arcana_loop.evaluation.options import compare_options as run_comparison
    from arcana_loop.nodes.deps import ConfigurationError
    from arcana_loop.nodes.models import ModelSpecError

    cases = _load_cases(choice)
    if limit is not None:
        cases = CaseSet(
            cases.cases[:limit],
            name=cases.name,
            collection=cases.collection,
            description=cases.description,
        )
    scope = choice.collection or cases.collection
    kb = _prepare_kb(scope)
    main = _cli()
    options = {**_named_options(option), **options}
    # a comparison and a plain evaluation run the same loop over the same knowledge base
    loop_over = {"search_fn": kb.search, "collection": scope, "controller": model}
    try:
        if compare_options:
            if options:
                main.fail(
                    "--compare-options sets the compared options itself.",
                    "drop the option flags, or run without --compare-options",
                )
            with main.err.status("Running the set once per option setting...") as status:
                report = run_comparison(
                    cases,
                    **loop_over,
                    progress=lambda label: status.update(f"Running {label}..."),
                )
            _emit(report, as_json, out_path, _options_table(report))
            return
        with main.err.status("Running the loop over the cases...") as status:
            report = evaluate_loop(
                cases,
                **loop_over,
                judge_model=judge_model,
                grounder=None if grounder == "none" else grounder,
                options=options,
                progress=lambda done, total: status.update(f"Running the loop: {done}/{total}"),
            )
    except (ModelSpecError, ConfigurationError, TypeError, ValueError) as exc:
        main.fail(
            str(exc),
            "check --model / --judge-model (provider:model or offline) and the option values",
        )
    _emit(report, as_json, out_path, _loop_table(report))


@eval_app.command("generate")
def generate(
    collection: Annotated[
        str, typer.Option("--collection", "-c", help="Collection to sample chunks from.")
    ],
    model: Annotated[
        str,
        typer.Option(
            "--model", help="Chat model that writes the questions, e.g. openai:gpt-4o-mini."
        ),
    ],
    out_path: Annotated[Path, typer.Option("--out", help="Case file to write.")],
    n: Annotated[
        int, typer.Option("--n", min=1, help="Chunks to sample (one question each).")
    ] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
) -> None:
    """Generate labelled questions, one per sampled chunk, with a chat model."""
    from arcana_loop.evaluation.cases import save_cases
    from arcana_loop.evaluation.generate import generate_cases, sample_chunks
    from arcana_loop.nodes.models import ModelSpecError

    main = _cli()
    kb = _prepare_kb(collection)
    chunks = sample_chunks(kb, collection, n, seed=seed)
    try:
        with main.err.status("Generating questions...") as status:
            generated = generate_cases(
                chunks,
                model,
                collection=collection,
                progress=lambda done, total: status.update(f"Generating questions: {done}/{total}"),
            )
    except (ModelSpecError, TypeError) as exc:
        main.fail(
            str(exc),
            "pass --model provider:model (e.g. openai:gpt-4o-mini) and set the provider's API key",
        )
    try:
        save_cases(generated.cases, out_path)
    except OSError as exc:
        main.fail(f"could not write {out_path}: {exc}", "check the path and its permissions")
    main.out.print(
        f"Wrote {len(generated.cases.cases)} cases to {out_path} ({len(generated.skipped)} chunks skipped)."
    )
    for skipped in generated.skipped:
        main.err.print(
            f"[yellow]skipped[/] {main.shown(skipped['chunk_id'])}: {main.shown(skipped['reason'])}"
        )


@eval_app.command("diff")
def diff(
    before: Annotated[Path, typer.Argument(help="The earlier report (from --out).")],
    after: Annotated[Path, typer.Argument(help="The later report.")],
    changed_only: Annotated[
        bool, typer.Option("--changed-only", help="Show only metrics that changed.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Show the metric deltas between two reports of the same kind."""
    from arcana_loop.evaluation.report import diff_reports, load_report

    main = _cli()
    try:
        result = diff_reports(load_report(before), load_report(after))
    except FileNotFoundError as exc:
        main.fail(f"no report at {exc.filename}.", "write reports with --out PATH")
    except ValueError as exc:
        main.fail(str(exc), "diff two reports written by the same eval command with --out")
    rows = [r for r in result["metrics"] if not changed_only or r["delta"] != 0]
    if as_json:
        print(
            json.dumps({**result, "metrics": rows}, ensure_ascii=False, indent=2)
        )  # machine output
        return
    table = Table(
        "metric", "before", "after", "delta", title=f"{result['before']}  →  {result['after']}"
    )
    for row in rows:
        delta = row["delta"]
        table.add_row(
            row["name"],
            format_metric(row["before"]),
            format_metric(row["after"]),
            f"[bold]{format_delta(delta)}[/]" if delta else format_metric(delta),
        )
    main.out.print(table)
