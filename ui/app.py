"""The web page's routes, served by the project's LangGraph server (``langgraph.json``'s ``http.app``).

* ``GET /ui``: the page (``static/index.html``, ``app.js``, ``app.css``, shipped in the
  package: no build step, nothing fetched from elsewhere at run time).
* ``GET /ui/api/collections``: the knowledge base's collections, for the picker.
* ``POST /ui/api/evidence``: a thread's state values in, the page's view of them out
  (`ui.evidence.evidence_view`).

The page asks, streams and lists threads through the server's own API
(``/threads``, ``/threads/{id}/runs/stream``), with whatever credentials the browser
holds there. The evidence route reads no thread itself: it reshapes the values the
page sends, which the page already read, so it cannot show anyone a thread they could
not read through the server's API.

Every response of the page forbids scripts and styles from anywhere but the server
(``Content-Security-Policy``): the page renders document text with ``textContent``,
and a document's ``<script>`` could not run even if it were ever parsed as HTML.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import NoReturn

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arcana_loop.knowledge import KnowledgeBase, default_knowledge_base
from arcana_loop.knowledge.errors import KnowledgeBaseError
from arcana_loop.ui.evidence import evidence_view

logger = logging.getLogger(__name__)

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The page's files (``static/``) and their content types: nothing else is served."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
MAX_EVIDENCE_BYTES = 20_000_000
"""The largest state the evidence route reads (a long conversation's values are a few MB)."""


_NOT_A_STATE = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    NotImplementedError,  # LangChain's answer to a message that is a number
    OverflowError,  # a count of 1e999
    RecursionError,  # values nested past Python's limit
)
"""What reshaping a body that is no thread's state raises: the caller's mistake (400), not the page's (500)."""


def _no_constant(name: str) -> NoReturn:
    """Refuse ``NaN`` and ``Infinity``, which Python's JSON reads and JSON has not."""
    raise ValueError(f"{name} is not JSON")


def asset(name: str) -> bytes:
    """One of the page's files, as shipped in the package."""
    return files("arcana_loop.ui").joinpath("static", name).read_bytes()


def _headers(content_type: str) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "Cache-Control": "no-cache",  # an upgraded package serves its new page at once
    }


SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
)
"""What every response of the page carries: its files, its JSON and its errors alike."""


class _Secured:
    """The app, each of its responses given `SECURITY_HEADERS` (an ASGI wrapper: nothing buffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, secured)


Endpoint = Callable[[Request], Awaitable[Response]]


def _only(*methods: str) -> Callable[[Endpoint], Endpoint]:
    """An endpoint that answers other methods with 405 and the ``Allow`` header."""

    def wrapped(endpoint: Endpoint) -> Endpoint:
        async def checked(request: Request) -> Response:
            if request.method not in methods:
                allowed = ", ".join(methods)
                return JSONResponse(
                    {"error": f"{allowed} only"}, status_code=405, headers={"Allow": allowed}
                )
            return await endpoint(request)

        return checked

    return wrapped


def create_app(
    knowledge_base: Callable[[], KnowledgeBase] = default_knowledge_base,
) -> Starlette:
    """The page's Starlette app; ``knowledge_base`` gives the knowledge base whose collections it lists."""
    pages = {name: asset(name) for name in ASSETS}

    async def page(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in pages:
            return JSONResponse({"error": f"no file named {name!r}"}, status_code=404)
        return Response(pages[name], headers=_headers(ASSETS[name]))

    async def collections(request: Request) -> Response:
        def listed() -> list[dict[str, object]]:
            return [
                {"name": c.name, "documents": c.documents, "chunks": c.chunks}
                for c in knowledge_base().collections()
            ]

        try:
            # opening the knowledge base loads the embedder and may start the embedded
            # server: off the event loop, which every run of the server shares
            found = await asyncio.to_thread(listed)
        except KnowledgeBaseError as exc:
            logger.warning("the page could not list the collections: %s", exc)
            return JSONResponse(
                {"error": f"cannot read the knowledge base: {exc}"}, status_code=503
            )
        return JSONResponse({"collections": found})

    async def evidence(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_EVIDENCE_BYTES:
            return JSONResponse({"error": "the state sent is too large"}, status_code=413)
        try:
            sent = json.loads(body, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # RecursionError: arrays nested past Python's limit
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        values = sent.get("values") if isinstance(sent, dict) else None
        if not isinstance(values, dict):
            return JSONResponse(
                {"error": 'send {"values": <a thread\'s state values>}'}, status_code=400
            )
        try:
            view = evidence_view(values)
        except _NOT_A_STATE:
            # which field was off is the reshaping's detail, not the caller's: said plainly
            return JSONResponse(
                {"error": "the values are not a thread's state (as GET /threads/{id}/state gives)"},
                status_code=400,
            )
        return JSONResponse(view)

    read = _only("GET", "HEAD")
    # every method reaches each route, which says which it takes: routed by method, a POST
    # to the page fell through to the catch-all below and was "not found"
    app = Starlette(
        routes=[
            Route("/ui", read(page), methods=EVERY_METHOD),
            Route("/ui/", read(page), methods=EVERY_METHOD),
            Route("/ui/static/{name}", read(page), methods=EVERY_METHOD),
            Route("/ui/api/collections", read(collections), methods=EVERY_METHOD),
            Route("/ui/api/evidence", _only("POST")(evidence), methods=EVERY_METHOD),
            # the rest of /ui is the page's too: unanswered here, the server's own mount
            # of the same prefix took the request and failed on a folder it does not have
            Route("/ui/{rest:path}", nothing_here, methods=EVERY_METHOD),
        ]
    )
    app.add_middleware(_Secured)
    return app


async def nothing_here(request: Request) -> Response:
    """Any other path under ``/ui``: not found."""
    return JSONResponse({"error": f"nothing at {request.url.path}"}, status_code=404)


EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


app = create_app()
