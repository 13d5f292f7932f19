"""Prompts of the evaluation harness: test-case generation and the answer judge."""

GENERATE_QUESTION_PROMPT = """You write test questions for a retrieval system.

Below is one passage from the collection "{collection}". Write ONE question that this
passage answers and that other passages of a documentation collection are unlikely to
answer: name the specific module, class or function it is about, and ask for a fact
stated in the passage. Then list 1 to 3 key facts: short strings (a few words each,
copied from the passage) that any correct answer must contain.

<passage source="{source}">
{text}
</passage>

Reply with JSON only, no prose:
{{"question": "...", "key_facts": ["...", "..."]}}"""
"""Slots: ``collection``, ``source``, ``text``. The reply must be a JSON object."""

JUDGE_PROMPT = """You grade an answer against a reference.

<question>{question}</question>
<reference>{reference}</reference>
<key_facts>{key_facts}</key_facts>
<answer>{answer}</answer>

The answer is correct when it states every key fact (in any wording) and contradicts
nothing in the reference. Extra correct detail is fine. Reply with JSON only:
{{"score": <a number from 0 to 1: the share of key facts the answer states correctly>, "reason": "<one sentence>"}}"""
"""Slots: ``question``, ``reference``, ``key_facts`` (one per line), ``answer``."""
