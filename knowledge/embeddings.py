"""Embedding models for the knowledge base, behind LangChain's `Embeddings` interface.

Two ship with the project, and nothing is ever downloaded at run time:

* ``minilm``: all-MiniLM-L6-v2 on onnxruntime (384 dimensions, the ``onnx`` extra;
  `knowledge.embeddings_minilm`): a contextual model, the default for new
  collections when its extra is installed;
* ``wordllama``: WordLlama (256 dimensions), whose weights ship inside its wheel: a
  static embedder, about 50x as fast, that ranks evidence markedly worse (see
  knowledge/README.md). The loop's own similarity checks use it (`default_embeddings`).

Any ``"provider:model"`` spec goes through LangChain's `init_embeddings`
(``"openai:text-embedding-3-small"``, ``"ollama:..."``; the provider's LangChain
package must be installed); any `Embeddings` instance is used as it is. Each
collection records the name of the embedder it was built with
(`embedding_model_name`), and `embeddings_for_record` turns that name back into
the embedder.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from arcana_loop.knowledge import settings
from arcana_loop.knowledge.embeddings_minilm import (
    MINILM_DIMENSION,
    MINILM_MODEL,
    MODEL_FILE,
    TOKENIZER_FILE,
    MiniLMEmbeddings,
)
from arcana_loop.knowledge.errors import EmbedderFailed, EmbedderUnavailable, EmbeddingMismatch
from arcana_loop.providers import ProviderErrors, from_provider

DEFAULT_EMBEDDING_MODEL = "wordllama:l2_supercat_256"
"""Name recorded per collection for WordLlama."""
EMBEDDER_NAMES = ("minilm", "wordllama")
"""The embedders that ship with the project, by the name the CLI's ``--embeddings`` takes."""
EMBEDDINGS_ENV = settings.EMBEDDINGS.env
"""The embedder new collections use, by name or spec (default: `default_embedder_name`)."""

WORDLLAMA_DIMENSION = 256
_WORDLLAMA_BATCH = 1000
_MAX_EMBED_CHARS = 8000
"""Texts longer than this are cut before embedding: WordLlama averages token
vectors, so the tail of a very long query adds cost and little signal."""


class WordLlamaEmbeddings(Embeddings):
    """WordLlama static embeddings, L2-normalised, loaded from the installed wheel."""

    model_name = DEFAULT_EMBEDDING_MODEL
    dimension = WORDLLAMA_DIMENSION

    def __init__(self, batch_size: int = _WORDLLAMA_BATCH) -> None:
        """Load the model from the weights inside the `wordllama` package."""
        wordllama = _import_wordllama()
        WordLlama = wordllama.WordLlama  # the library's class name

        # Plain `WordLlama.load()` looks in a user cache and may try the network;
        # the weights live next to the package itself.
        self._model = WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        self._batch_size = batch_size
        self._lock = threading.Lock()

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._one_by_one(texts):
            return self._embed_few(texts).tolist()  # type: ignore[no-any-return]  # numpy's tolist is untyped
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = [t[:_MAX_EMBED_CHARS] for t in texts[start : start + self._batch_size]]
            with self._lock:  # the tokenizer is not documented as thread-safe
                vectors = self._model.embed(batch, norm=True)
            out.extend(vectors.tolist())
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed a batch of documents."""
        return self._embed(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self._embed([text])[0]

    async def aembed_query(self, text: str) -> list[float]:
        """Embed one query inline: it takes well under a millisecond, less than a thread hop."""
        return self.embed_query(text)

    def embed_array(self, texts: list[str]) -> Any:
        """Embed texts into a float32 numpy array of shape (n, 256), normalised."""
        import numpy as np

        if self._one_by_one(texts):
            return self._embed_few(texts)
        parts = []
        for start in range(0, len(texts), self._batch_size):
            batch = [t[:_MAX_EMBED_CHARS] for t in texts[start : start + self._batch_size]]
            with self._lock:
                parts.append(self._model.embed(batch, norm=False))
        if not parts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _unit_rows(np.concatenate(parts).astype(np.float32, copy=False))

    def _one_by_one(self, texts: list[str]) -> bool:
        """Whether `texts` are few enough to embed one by one (`_embed_few`)."""
        return 0 < len(texts) <= _ONE_BY_ONE and not self._model.binary

    def _embed_few(self, texts: list[str]) -> Any:
        """`embed_array` for a few texts: each tokenized alone, its token vectors averaged.

        What WordLlama's `embed` computes (the token vectors' mean, normalised) without
        its batch machinery: it pads every text to the longest and tokenizes them on a
        thread pool, which for a few texts cost more than the work (6 chunks 1.24 ms
        against 0.67, 20 chunks 3.4 against 2.2; the vectors agree to 3e-8).
        """
        import numpy as np

        table = self._model.embedding
        out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
        with self._lock:
            encoded = [
                self._model.tokenizer.encode(t[:_MAX_EMBED_CHARS], add_special_tokens=False)
                for t in texts
            ]
        for row, tokens in enumerate(encoded):
            ids = np.clip(np.asarray(tokens.ids, dtype=np.int32), 0, table.shape[0] - 1)
            out[row] = table[ids].sum(axis=0, dtype=np.float32) / max(len(ids), 1)
        return _unit_rows(out)


def _unit_rows(matrix: Any) -> Any:
    """Each row scaled to length 1, as WordLlama's ``norm=True`` does; a zero row stays zero.

    A text of no token (empty, or only what the tokenizer drops) would otherwise be NaN,
    to which no distance can be taken.
    """
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix /= np.where(norms == 0, 1, norms)
    return matrix


_ONE_BY_ONE = 64
"""Up to this many texts are embedded one by one (`WordLlamaEmbeddings._embed_few`)."""


def _import_wordllama() -> Any:
    """Import wordllama without letting it configure logging for the whole application.

    Its import calls ``logging.basicConfig(level=INFO)``, which gives an application
    that never configured logging a root handler at INFO: every library's INFO lines
    would then print. What the import added to the root logger is taken back.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import wordllama

    if root.handlers != handlers:
        root.handlers = handlers
        root.setLevel(level)
    return wordllama


@lru_cache(maxsize=1)
def default_embeddings() -> WordLlamaEmbeddings:
    """Return the process-wide WordLlama embedder (loaded once, about 0.5 s).

    The loop's similarity checks (duplicate queries, the offline controller, local
    grounding) use it; which embedder a new collection uses is `default_embedder_name`.
    """
    return WordLlamaEmbeddings()


@lru_cache(maxsize=1)
def minilm_embeddings() -> Embeddings:
    """Return the process-wide MiniLM embedder (loaded once; the first load on a machine quantizes it).

    Raises:
        EmbedderUnavailable: if the ``onnx`` extra is missing, or a file fails its digest.
    """
    return MiniLMEmbeddings()


def minilm_installed() -> bool:
    """Whether the ``onnx`` extra is installed (its files are checked only when loaded)."""
    modules = ("onnxruntime", "tokenizers", "onnx")
    if not all(importlib.util.find_spec(name) is not None for name in modules):
        return False
    try:
        for pinned in (MODEL_FILE, TOKENIZER_FILE):
            importlib.metadata.distribution(pinned.distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def default_embedder_name() -> str:
    """The embedder new collections use: `ARCANA_LOOP_EMBEDDINGS`, else minilm when its extra is installed, else wordllama.

    A collection keeps the embedder it was created with; this only picks one for new ones.
    """
    chosen: str | None = settings.EMBEDDINGS.read()
    if chosen is not None:
        return chosen
    return "minilm" if minilm_installed() else "wordllama"


def embedding_model_name(embeddings: Embeddings) -> str:
    """Return the name recorded per collection for an embedder."""
    name = getattr(embeddings, "model_name", None) or getattr(embeddings, "model", None)
    if isinstance(name, str) and name:
        if isinstance(embeddings, WordLlamaEmbeddings) or name == MINILM_MODEL:
            return name
        prefix = "openai:" if type(embeddings).__name__ == "OpenAIEmbeddings" else ""
        return f"{prefix}{name}"
    return f"{type(embeddings).__module__}.{type(embeddings).__qualname__}"


def resolve_embeddings(spec: Embeddings | str | None) -> Embeddings:
    """Turn an embedder spec into an `Embeddings` instance.

    Args:
        spec: `None` for the default of new collections (`default_embedder_name`),
            `"minilm"` or `"wordllama"` (or the name either records), `"provider:model"`
            for LangChain's `init_embeddings`, or an `Embeddings` instance.

    Raises:
        EmbedderUnavailable: for ``minilm`` without its extra, or with a file that
            fails its digest (a `ValueError`).
        ValueError: for an unknown spec or provider, or a provider whose package
            is not installed.
    """
    if spec is None:
        spec = default_embedder_name()
    if isinstance(spec, Embeddings):
        return spec
    if spec in ("wordllama", DEFAULT_EMBEDDING_MODEL):
        return default_embeddings()
    if spec in ("minilm", MINILM_MODEL):
        return minilm_embeddings()
    value: object = spec
    if not isinstance(value, str) or ":" not in spec or not all(spec.split(":", 1)):
        raise ValueError(
            f"unknown embedding model {spec!r}: expected {' or '.join(map(repr, EMBEDDER_NAMES))},"
            " 'provider:model' (LangChain init_embeddings) or a"
            " langchain_core.embeddings.Embeddings instance"
        )
    return _provider_embeddings(spec)


_KNOWN_RECORDS = {
    "wordllama": (DEFAULT_EMBEDDING_MODEL, WORDLLAMA_DIMENSION),
    DEFAULT_EMBEDDING_MODEL: (DEFAULT_EMBEDDING_MODEL, WORDLLAMA_DIMENSION),
    "minilm": (MINILM_MODEL, MINILM_DIMENSION),
    MINILM_MODEL: (MINILM_MODEL, MINILM_DIMENSION),
}


def known_record(spec: str) -> tuple[str, int] | None:
    """The (name, dimension) a collection records for an embedder that ships here, without loading it."""
    return _KNOWN_RECORDS.get(spec)


def cli_name(model_name: str) -> str:
    """What ``--embeddings`` takes for the embedder a collection records (``minilm``, ``wordllama``, a spec)."""
    return next(
        (name for name in EMBEDDER_NAMES if _KNOWN_RECORDS[name][0] == model_name), model_name
    )


def embeddings_for_record(model_name: str) -> Embeddings:
    """The embedder a collection records by `model_name` (what `embedding_model_name` gave it).

    Raises:
        EmbedderUnavailable: if that embedder cannot be loaded here (its extra is
            missing, or it was an instance of a class that records no spec).
    """
    if ":" not in model_name:  # a class name: an instance the caller built
        raise EmbedderUnavailable(
            f"the collection was embedded with {model_name!r}, an embedder given as an"
            " instance: open the knowledge base with it (KnowledgeBase(embeddings=...))"
        )
    return _cached_record(model_name)


@lru_cache(maxsize=8)
def _cached_record(model_name: str) -> Embeddings:
    return resolve_embeddings(model_name)


EMBEDDER_ERRORS = ProviderErrors(
    ValueError,
    missing_package="embedding model {spec} needs a package that is not installed: {exc}",
    unusable="unknown embedding model {spec}: {exc}",
    failed="embedding model {spec} could not be made: {kind}: {exc}",
)
"""How a provider embedder that cannot be made is said (a client without its API key, say)."""


def _provider_embeddings(spec: str) -> Embeddings:
    from langchain.embeddings import init_embeddings

    provider = spec.split(":", 1)[0]
    # check_embedding_ctx_length=False: otherwise tiktoken downloads an encoding
    # file on first use, before any request reaches base_url.
    kwargs: dict[str, Any] = {"check_embedding_ctx_length": False} if provider == "openai" else {}
    embeddings = from_provider(init_embeddings, spec, kwargs, EMBEDDER_ERRORS)
    if not isinstance(
        embeddings, Embeddings
    ):  # init_embeddings may return a config-deferred wrapper
        raise ValueError(f"embedding model {spec!r} did not resolve to an Embeddings instance")
    return embeddings


def probed_dimension(embeddings: Embeddings) -> int:
    """The length of the embedder's vectors, from one text embedded.

    Raises:
        EmbedderFailed: if the embedder raises (its service unreachable, say).
    """
    try:
        return len(embeddings.embed_query("probe"))
    except Exception as exc:
        raise _failed(exc) from exc


def _failed(exc: Exception) -> EmbedderFailed:
    # a provider's service that cannot be reached or refuses the key: said as the
    # knowledge base's error, whatever client library raised it
    return EmbedderFailed(f"the embedder failed: {type(exc).__name__}: {exc}")


def embeds_in_process(embeddings: Embeddings) -> bool:
    """Whether `embeddings` runs in this process (this package's embedders, with an `embed_array`), not as a service.

    Only these embed inside a write's open transaction (`knowledge.writer`): a service's
    call may take seconds, and the rows the transaction holds would wait with it.
    """
    return callable(getattr(embeddings, "embed_array", None))


def embed_matrix(embeddings: Embeddings, texts: list[str], dimension: int) -> np.ndarray[Any, Any]:
    """Embed `texts` into a float32 matrix, checking the dimension.

    Raises:
        EmbedderFailed: if the embedder raises (its service unreachable, say).
        EmbeddingMismatch: if the embedder returns vectors of another dimension.
    """
    if not texts:  # an edit that only removes chunks: an embedder may give no row shape for none
        return np.zeros((0, dimension), dtype=np.float32)
    embed_array = getattr(embeddings, "embed_array", None)
    try:
        if callable(embed_array):
            matrix = np.asarray(embed_array(texts), dtype=np.float32)
        else:
            matrix = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    except Exception as exc:
        raise _failed(exc) from exc
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise EmbeddingMismatch(
            f"embedder returned vectors of shape {matrix.shape}, collection expects {dimension}"
        )
    return matrix
