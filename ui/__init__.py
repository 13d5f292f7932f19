"""The web page: ask a question, watch the answer stream, see the evidence behind each claim.

Served by the project's LangGraph server at ``/ui`` (``langgraph.json``'s ``http.app``
is `ui.app.app`); see ``ui/README.md``.
"""
