import pytest

from arcana_loop.evaluation.metrics import (
    distribution,
    fact_found,
    hit_at_k,
    key_fact_recall,
    mean_scores,
    normalize_text,
    precision_at_k,
    quantile,
    recall_at_k,
    reciprocal_rank,
    retrieval_scores,
)

RANKED = ["d", "a", "x", "b", "a"]
RELEVANT = {"a", "b", "c"}


def test_recall_counts_distinct_relevant_keys():
    assert recall_at_k(RANKED, RELEVANT, 1) == 0.0
    assert recall_at_k(RANKED, RELEVANT, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, RELEVANT, 5) == pytest.approx(
        2 / 3
    )  # "a" twice counts once; "c" never found
    assert recall_at_k(RANKED, set(), 3) == 1.0


def test_precision_counts_positions_and_divides_by_k():
    assert precision_at_k(RANKED, RELEVANT, 2) == 0.5
    assert precision_at_k(RANKED, RELEVANT, 5) == pytest.approx(3 / 5)
    assert precision_at_k(["a"], RELEVANT, 4) == 0.25  # a short list is not rewarded


def test_hit_and_reciprocal_rank():
    assert hit_at_k(RANKED, RELEVANT, 1) == 0.0
    assert hit_at_k(RANKED, RELEVANT, 2) == 1.0
    assert reciprocal_rank(RANKED, RELEVANT) == 0.5
    assert reciprocal_rank(["x", "y"], RELEVANT) == 0.0


def test_retrieval_scores_and_means():
    scores = retrieval_scores(RANKED, RELEVANT, ks=(1, 4))
    assert scores == {
        "recall@1": 0.0,
        "precision@1": 0.0,
        "hit@1": 0.0,
        "recall@4": pytest.approx(2 / 3),
        "precision@4": 0.5,
        "hit@4": 1.0,
        "mrr": 0.5,
    }
    assert mean_scores([{"m": 1.0, "n": 0.0}, {"m": 0.0}]) == {"m": 0.5, "n": 0.0}


@pytest.mark.parametrize("fn", [recall_at_k, precision_at_k, hit_at_k])
def test_k_below_one_is_rejected(fn):
    with pytest.raises(ValueError, match="k must be at least 1"):
        fn(RANKED, RELEVANT, 0)


def test_normalized_fact_matching():
    assert normalize_text("Returns (done, pending)!") == "returns done pending"
    assert fact_found("(done, pending)", "Returns two sets: done, pending.")
    assert fact_found("cache_info()", "see f.cache_info() for statistics")
    assert not fact_found("cache", "see f.cache_info()")  # whole words only
    with pytest.raises(ValueError, match="empty once normalised"):
        fact_found("!!", "text")


def test_key_fact_recall():
    assert key_fact_recall(
        "It raises TimeoutError and cancels the task.",
        ["TimeoutError", "cancels the task", "shield"],
    ) == pytest.approx(2 / 3)
    assert key_fact_recall(None, ["x"]) == 0.0
    assert key_fact_recall("anything", []) == 1.0


def test_quantile_and_distribution():
    assert quantile([5, 1, 3], 0.5) == 3
    assert quantile([1, 2, 3, 4], 0.95) == 4
    assert quantile([], 0.5) is None
    with pytest.raises(ValueError):
        quantile([1], 1.5)
    assert distribution([1, 2, 3, 6]) == {
        "count": 4,
        "mean": 3.0,
        "p50": 3.0,
        "p95": 6.0,
        "min": 1.0,
        "max": 6.0,
    }
    assert distribution([])["count"] == 0
