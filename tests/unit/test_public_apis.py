"""Only public APIs of LangGraph and LangChain: a private module can change in any release."""

from __future__ import annotations

import ast

from tests.fixtures.source import offenders

LIBRARIES = ("langgraph", "langchain", "langchain_core", "langchain_openai", "langsmith")


def _private_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            parts = name.split(".")
            if parts[0] in LIBRARIES and (
                any(p.startswith("_") for p in parts) or any(i.startswith("_") for i in imported)
            ):
                found.append(f"{name}: {', '.join(imported) or name}")
    return found


def test_no_module_imports_a_private_langgraph_or_langchain_name():
    assert offenders(_private_imports) == {}


def test_the_check_catches_private_imports():
    tree = ast.parse(
        "from langgraph._internal._runnable import RunnableCallable\nfrom langgraph.graph import _x\nimport langchain_core._api\n"
    )
    assert len(_private_imports(tree)) == 3
    assert _private_imports(ast.parse("from langgraph.runtime import get_runtime\n")) == []
