"""The page's routes (`ui.app`), in process: the files it serves, the collections, the evidence route."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from arcana_loop.knowledge import KnowledgeBase
from arcana_loop.ui.app import ASSETS, CONTENT_SECURITY_POLICY, create_app


def _client(kb: KnowledgeBase | None = None) -> TestClient:
    return TestClient(create_app(lambda: kb) if kb is not None else create_app())


def test_the_page_and_its_files_are_served_with_a_strict_policy() -> None:
    client = _client()
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    linked = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert linked == ["/ui/static/favicon.svg", "/ui/static/app.css", "/ui/static/app.js"]
    for path in linked:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == ASSETS[path.rsplit("/", 1)[1]]
        # an SVG names its XML namespace by URL; that is no request
        text = response.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert not re.search(r"https?://", text), f"{path} reaches another host"
    assert client.get("/ui/").text == page.text


@pytest.mark.parametrize(
    "path",
    [
        "/ui/static/app.py",
        "/ui/static/..%2Fapp.py",
        "/ui/static/x.js",
        "/ui/foo",
        "/ui/index.html",
        "/ui/static/",
        "/ui/api/collections/",
    ],
)
def test_nothing_but_the_page_files_is_served(path: str) -> None:
    assert _client().get(path).status_code == 404


@pytest.mark.postgres
def test_collections_lists_the_knowledge_base_and_says_when_it_is_empty(kb: KnowledgeBase) -> None:
    client = _client(kb)
    assert client.get("/ui/api/collections").json() == {"collections": []}
    kb.ingest("Ships unload grain at 800 tonnes an hour.", collection="harbor")
    assert client.get("/ui/api/collections").json() == {
        "collections": [{"name": "harbor", "documents": 1, "chunks": 1}]
    }


@pytest.mark.postgres
def test_collections_of_a_database_that_is_down_is_a_503_saying_so() -> None:
    down = KnowledgeBase("postgresql://nobody:secret@127.0.0.1:9/none")
    response = _client(down).get("/ui/api/collections")
    assert response.status_code == 503
    message = response.json()["error"]
    assert message.startswith("cannot read the knowledge base:") and "secret" not in message


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"values": 3}',
        b'{"values": {"chunks": 5, "terminated_by": "answered"}}',
        b'{"values": {"answer": 5, "sources": "x", "tool_history": [1], "chunks": {"a": 1}}}',
        # each was a bare 500 without the page's headers
        b'{"values": {"messages": [5]}}',
        b'{"values": {"tool_history": [{"tool": "search", "iteration": 1e999}]}}',
        b'{"values": {"tool_history": [{"tool": "search", "duplicate_of": Infinity}]}}',
        b'{"values": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
    ],
)
def test_evidence_refuses_what_is_not_a_thread_state_with_a_400(body: bytes) -> None:
    response = _client().post("/ui/api/evidence", content=body)
    assert response.status_code == 400, response.text[:200]
    assert response.headers["x-content-type-options"] == "nosniff"
    error = response.json()["error"]
    assert "object has no attribute" not in error and "'str'" not in error  # no Python detail
    not_json = body == b"not json" or b"Infinity" in body or b"[[[" in body
    assert (error == "the body is not JSON") == not_json


def test_evidence_of_an_empty_thread_is_an_empty_view() -> None:
    view = _client().post("/ui/api/evidence", json={"values": {}}).json()
    assert (view["question"], view["answer"], view["citations"], view["earlier"]) == (
        None,
        [],
        [],
        [],
    )


def test_the_evidence_route_takes_a_post_only() -> None:
    answered = _client().get("/ui/api/evidence")
    assert answered.status_code == 405 and answered.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/ui", "GET, HEAD"),
        ("DELETE", "/ui/static/app.js", "GET, HEAD"),
        ("POST", "/ui/api/collections", "GET, HEAD"),
        ("PUT", "/ui/api/evidence", "POST"),
    ],
)
def test_a_route_asked_with_another_method_says_which_it_takes(
    method: str, path: str, allowed: str
) -> None:
    answered = _client().request(method, path, follow_redirects=False)
    assert answered.status_code == 405 and answered.headers["allow"] == allowed


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/ui/api/collections", None),  # a database that is down: a 503
        ("POST", "/ui/api/evidence", b"not json"),
        ("POST", "/ui/api/evidence", b'{"values": {}}'),
        ("GET", "/ui/nothing/here", None),
        ("POST", "/ui", None),
    ],
)
def test_every_response_carries_the_policy_json_and_errors_too(
    method: str, path: str, body: bytes | None
) -> None:
    down = KnowledgeBase("postgresql://nobody@127.0.0.1:9/none")
    answered = _client(down).request(method, path, content=body, follow_redirects=False)
    assert answered.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert answered.headers["x-content-type-options"] == "nosniff"
