"""The grounding label agrees with the claims it sums up."""

from __future__ import annotations

import pytest

from arcana_loop.graph import run
from arcana_loop.nodes.evidence import coverage_of
from tests.fakes import ScriptedSearch, answer, chunk, scripted, search

FACT = "The harbor crane lifts at most forty tonnes. Berth seven is twelve metres deep."


def _run(reply: str):
    found = ScriptedSearch([[chunk("c1", FACT)]])
    return run(
        "How much can the crane lift?",
        controller_llm=scripted(search("crane"), answer(reply)),
        search_fn=found,
        grounder="local",
    )


def test_a_verbatim_answer_is_supported():
    result = _run(FACT)
    assert result.grounding is not None
    assert all(c["verdict"] == "supported" for c in result.grounding["claims"])
    assert result.coverage == "supported"


def test_an_answer_whose_every_claim_is_unsupported_is_unsupported_whatever_its_score():
    result = _run(
        "Quantum chromodynamics describes gluons binding quarks. "
        "Photosynthesis in ferns peaks under violet light."
    )
    assert result.grounding is not None
    assert not any(c["verdict"] == "supported" for c in result.grounding["claims"])
    assert result.coverage == "unsupported"


@pytest.mark.parametrize(
    ("verdicts", "score", "min_support", "label"),
    [
        (["supported", "supported"], 0.9, None, "supported"),
        (["supported", "unsupported"], 0.5, None, "partially_supported"),
        (["unsupported", "unsupported"], 0.05, None, "unsupported"),
        (["supported", "supported"], 0.6, 0.8, "partially_supported"),  # below the bar
        ([], 0.0, None, "unsupported"),
        ([], 0.7, None, "partially_supported"),
        ([], 0.9, 0.8, "supported"),
    ],
)
def test_the_label_from_verdicts_and_the_bar(verdicts, score, min_support, label):
    grounding = {"score": score, "claims": [{"text": "x", "verdict": v} for v in verdicts]}
    assert coverage_of(grounding, min_support) == label
