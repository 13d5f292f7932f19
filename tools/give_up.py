"""The ``give_up`` tool: the knowledge base cannot answer; a valid call ends the run as ``gave_up``."""

from __future__ import annotations

from typing import Any

from arcana_loop.tools.base import CallOutcome, ControlTool

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

MISSING_REASON = f"Tool error: {NAME} needs a non-empty string `reason` argument"
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
    missing = MISSING_REASON

    def ended(self, call_id: str, args: dict[str, Any], value: str) -> CallOutcome:
        """End the run with the reason, said as why there is no answer."""
        answer = GIVE_UP_ANSWER.format(reason=value)
        summary = GAVE_UP_SUMMARY.format(answer=answer)
        return CallOutcome(call_id, NAME, args, answer, summary, terminal="gave_up", answer=answer)


TOOL = GiveUpTool()
