import json

import pytest

from arcana_loop.evaluation.report import diff_reports, flatten_metrics, load_report, save_report


def loop_report(correctness, tokens, created="t1"):
    return {
        "kind": "loop",
        "name": "set",
        "controller": "offline",
        "created_at": created,
        "options": {"chunk_cap": 5},
        "summary": {
            "answer_correctness": correctness,
            "tokens_per_question": tokens,
            "latency_s": {"p50": 0.5},
            "distributions": {"tokens": {"mean": tokens}},
            "terminated_by": {"answered": 3},
        },
        "per_case": [{"correctness": 1.0}],
    }


def test_flatten_keeps_numeric_metrics_by_dotted_path():
    metrics = flatten_metrics(loop_report(0.5, 100))
    assert metrics == {
        "summary.answer_correctness": 0.5,
        "summary.tokens_per_question": 100.0,
        "summary.latency_s.p50": 0.5,
        "summary.terminated_by.answered": 3.0,
    }


def test_diff_reports_metric_deltas():
    before = loop_report(0.5, 100)
    after = loop_report(0.75, 80, created="t2")
    del after["summary"]["latency_s"]
    after["summary"]["repairs"] = 2
    rows = {r["name"]: r for r in diff_reports(before, after)["metrics"]}
    assert rows["summary.answer_correctness"]["delta"] == pytest.approx(0.25)
    assert rows["summary.tokens_per_question"]["delta"] == -20
    assert rows["summary.terminated_by.answered"]["delta"] == 0
    assert rows["summary.latency_s.p50"] == {
        "name": "summary.latency_s.p50",
        "before": 0.5,
        "after": None,
        "delta": None,
    }
    assert rows["summary.repairs"]["before"] is None and rows["summary.repairs"]["delta"] is None


def test_diff_rejects_different_kinds_and_non_reports():
    with pytest.raises(ValueError, match="cannot diff a loop report with a retrieval report"):
        diff_reports(loop_report(0.5, 1), {"kind": "retrieval", "modes": {}})
    with pytest.raises(ValueError, match="not an evaluation report"):
        diff_reports({"summary": {}}, loop_report(0.5, 1))


def test_save_and_load(tmp_path):
    report = loop_report(0.5, 100)
    path = save_report(report, tmp_path / "out" / "r.json")
    assert load_report(path) == report
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_report(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "something"}))
    with pytest.raises(ValueError, match="not an evaluation report"):
        load_report(tmp_path / "other.json")
    with pytest.raises(FileNotFoundError):
        load_report(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not an evaluation report"):
        save_report({"kind": "nope"}, tmp_path / "x.json")
