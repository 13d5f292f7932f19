"""`check_run_options` refuses what `run` refuses before its first step, and runs nothing."""

from __future__ import annotations

from typing import Any

import pytest

from arcana_loop.graph.run import check_run_options
from arcana_loop.nodes.models import ModelSpecError
from tests.fakes import ScriptedChatModel, ScriptedSearch, answer
from tests.reliability.test_bad_input import REJECTED

OPTION_CASES = [case for case in REJECTED if "question" not in case[1]]


@pytest.mark.parametrize(
    ("kind", "kwargs", "error", "fragment"), OPTION_CASES, ids=[c[0] for c in OPTION_CASES]
)
def test_what_run_refuses_is_refused_without_running(
    kind: str, kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    model = ScriptedChatModel(responses=[answer("never")])
    found = ScriptedSearch([])
    options = {"controller_llm": model, "search_fn": found, **kwargs}
    with pytest.raises(error) as caught:
        check_run_options(**options)
    assert fragment in str(caught.value)
    assert model.calls == [] and found.calls == []


def test_good_options_pass_and_a_model_without_its_key_does_not() -> None:
    check_run_options(collection="docs", controller_llm="offline", grounder="local")
    with pytest.raises(ModelSpecError, match="could not be created"):
        check_run_options(controller_llm="openai:gpt-4o-mini")  # no OPENAI_API_KEY in tests
