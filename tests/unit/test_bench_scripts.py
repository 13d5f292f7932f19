"""The benchmark scripts' own logic: every variant runs its whole script, and counts are read right."""

from __future__ import annotations

import pytest

from bench import loop_bench, loop_instructions


def test_every_loop_variant_runs_the_whole_script_without_a_checkpointer():
    runners = loop_bench.make_runners(loop_bench.InstantChatModel(), {"none": None})
    loop_bench.check_runs(runners)  # raises if a variant ends early or gathers the wrong chunks


@pytest.mark.parametrize("variant", loop_instructions.VARIANTS)
def test_instruction_variants_name_runnable_loops(variant):
    loop_instructions.run_variant(variant, 1)


def test_the_instruction_count_is_read_from_valgrind_output():
    stderr = "==12== Events    : Ir\n==12== Collected : 123456789\n==12==\n==12== I   refs:      123,456,789\n"
    found = loop_instructions._COLLECTED.search(stderr)
    assert found is not None and int(found.group(1)) == 123456789
