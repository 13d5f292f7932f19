"""The ``answer`` tool: the final answer; a valid call ends the run as ``answered``."""

from __future__ import annotations

from arcana_loop.tools.base import ControlTool

NAME = "answer"
DESCRIPTION = (
    "Give the final answer and end the conversation. Call it as soon as the chunks you have "
    "are enough to answer; answering from imperfect evidence is expected. Do not call it "
    "before you have searched at least once."
)
TEXT_DESCRIPTION = "The complete final answer, exactly as the user will see it."
GUIDANCE = f"- `{NAME}`: give the final answer; this ends the conversation."
OUTPUT = f"Call `{NAME}` with a complete, well-structured reply; its `text` is exactly what the user sees."
"""How the system prompt asks for the answer while the tool is offered (else ``nodes.prompts.PLAIN_OUTPUT``)."""

ANSWERED_SUMMARY = "Answered."


class AnswerTool(ControlTool):
    """``answer``: its ``text`` is the answer."""

    name = NAME
    description = DESCRIPTION
    guidance = GUIDANCE
    prompt_slots = {"output_how": OUTPUT}
    ends_as = "answered"
    streamed_argument = argument = "text"
    argument_description = TEXT_DESCRIPTION
    answer_template = "{text}"
    summary_template = ANSWERED_SUMMARY


TOOL = AnswerTool()
