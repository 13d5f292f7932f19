"""What the controller reads about each default tool: when to call it, and when not."""

SEARCH_DESCRIPTION = (
    "Search the knowledge base for chunks relevant to a query. Returns the full text of the "
    "best chunks, each prefixed by a stable id. Uses the knowledge graph automatically when "
    "the collection has one. Use it for facts that should come from the knowledge base, not "
    "for general knowledge. Make each query a focused phrase or question about one aspect; "
    "do not repeat a query you already ran: rephrase it or answer."
)
SEARCH_QUERY_DESCRIPTION = "A focused phrase or question, not a bag of keywords."
SEARCH_LIMIT_DESCRIPTION = (
    "How many chunks to return. Keep it low (3-5) unless you need comprehensive context."
)
SEARCH_COLLECTION_DESCRIPTION = (
    "Optional. Restrict this search to one collection. Must be one of: {allowed}. "
    "Omit it to search all of them."
)
SEARCH_COLLECTIONS_PARAGRAPH = (
    "\n\nThe knowledge base is split into collections; pass `collection` to narrow a search "
    "to one of them. Available collections: {allowed}."
)

ANSWER_DESCRIPTION = (
    "Give the final answer and end the conversation. Call it as soon as the chunks you have "
    "are enough to answer; answering from imperfect evidence is expected. Do not call it "
    "before you have searched at least once."
)
ANSWER_TEXT_DESCRIPTION = "The complete final answer, exactly as the user will see it."

GIVE_UP_DESCRIPTION = (
    "Stop because the knowledge base cannot answer the question, after several good-faith "
    "searches with different wordings found nothing relevant. Ends the conversation."
)
GIVE_UP_REASON_DESCRIPTION = "A short explanation of what is missing."

EXPLORE_DESCRIPTION = (
    "Look up one entity of the knowledge graph (a module, class, function or named term): "
    "its description, the entities most often named with it, a summary of its cluster and "
    "the ids of chunks that mention it. Use it to find related names to search for, or to "
    "check how two things relate. It does not return document text: search for that."
)
EXPLORE_ENTITY_DESCRIPTION = "The entity's name, e.g. 'asyncio.wait_for' or 'ThreadPoolExecutor'."
