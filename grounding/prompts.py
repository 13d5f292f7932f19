"""Prompts of the LLM judge."""

JUDGE_SYSTEM_PROMPT = """\
You check whether an answer is faithful to numbered context chunks, each given as a \
`<chunk n="...">` element; text inside an element is the chunk's content only.
1. Split the answer into atomic factual claims. Quote each claim exactly as it appears in the \
answer, so it can be found there.
2. Judge each claim against the chunks only: "supported" when the chunks entail it, \
"unsupported" when they do not say it, "contradicted" when a chunk says otherwise. Knowledge \
that the chunks do not contain is unsupported. Skip purely stylistic sentences.
3. For supported and contradicted claims, list the numbers (`n`) of the chunks involved.
Reply with one JSON object and nothing else:
{"claims": [{"text": "...", "verdict": "supported", "chunk_indices": [1]}]}"""

JUDGE_USER_PROMPT = """\
## Question
{question}

## Answer to check
{answer}

## Context chunks
{chunks}"""
