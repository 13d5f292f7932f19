"""The ``give_up`` tool: the knowledge base cannot answer; a valid call ends the run as ``gave_up``."""

from __future__ import annotations

from arcana_loop.tools.base import ControlTool

NAME = "give_up"
DESCRIPTION = (
    "Stop because the knowledge base cannot answer the question, after several good-faith "
    "searches with different wordings found nothing relevant. Ends the conversation."
)
REASON_DESCRIPTION = "A short explanation of what is missing."
GUIDANCE = f"- `{NAME}`: say the knowledge base cannot answer the question; this also ends the conversation."
LAST_STEP = (
    "6. After a few honest attempts that found nothing relevant, give up and say what is missing."
)
"""The workflow's last step while the tool is offered (else ``nodes.prompts.NO_GIVE_UP_STEP``)."""

GIVE_UP_ANSWER = "Could not answer: {reason}"
"""The answer of a question given up (by this tool, or before any model call when nothing can be searched)."""
GAVE_UP_SUMMARY = "Gave up: {answer}"


class GiveUpTool(ControlTool):
    """``give_up``: its ``reason`` says what is missing."""

    name = NAME
    description = DESCRIPTION
    guidance = GUIDANCE
    prompt_slots = {"last_step": LAST_STEP}
    ends_as = "gave_up"
    argument = "reason"
    argument_description = REASON_DESCRIPTION
    answer_template = GIVE_UP_ANSWER
    summary_template = GAVE_UP_SUMMARY


TOOL = GiveUpTool()
