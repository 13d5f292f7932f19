"""Prompts of the model-backed entity steps: entity extraction and community summaries."""

from __future__ import annotations

EXTRACTION_PROMPT = """Extract the named entities of the text below and the relationships between them.

Entities are things the text names: code names (modules, classes, functions, options),
people, places, organisations, products, standards and technical terms. Give each a short
type (for example: module, class, function, concept, person, place) and a one-sentence
description taken from the text. A relationship links two entities of your list, with a
short type (for example: part_of, raises, returns, uses, calls) and a strength from 1
(loosely related) to 10 (defined by each other). Use the names exactly as the text writes
them. If the text names nothing, return empty lists.

<text>
{text}
</text>"""

COMMUNITY_SUMMARY_PROMPT = """The entities below form one cluster of a knowledge graph.
In at most three sentences, say what they have in common and what the cluster is about.
Use only what the descriptions say.

<entities>
{entities}
</entities>"""
