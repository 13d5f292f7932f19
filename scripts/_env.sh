# Shared by the scripts: create .venv on first use and keep it in step with pyproject.toml.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "arcana-loop needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)." >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "Creating .venv (first run only)..." >&2
    "$python" -m venv .venv
fi
# The extras to install come from the calling script (ARCANA_LOOP_EXTRAS): the CLI needs
# the runtime ones only (pdf,html,office,onnx,mcp), the test command the development tools (dev, which
# includes the runtime extras, so its install serves the CLI too).
extras="${ARCANA_LOOP_EXTRAS:-dev}"
# Keyed on pyproject.toml and the list of modules: the editable install links each module
# (strict mode, so type checkers and import contracts read the installed layout), and a
# module added later needs a new link.
key=$( { cat pyproject.toml; git ls-files -co --exclude-standard -- arcana_loop core graph nodes tools grounding knowledge cli evaluation ui 2>/dev/null | sort; } | sha1sum | cut -c1-12)
stamp=".venv/.installed-${extras//,/+}-$key"
if [ ! -f "$stamp" ] && [ ! -f ".venv/.installed-dev-$key" ]; then
    echo "Installing arcana-loop[$extras] into .venv (first run only)..." >&2
    rm -rf build/__editable__.*  # links to modules that may be gone
    # pip's own progress is left out; its errors still reach the terminal
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]" \
        --config-settings editable_mode=strict >&2
    if [[ ",$extras," == *,onnx,* ]]; then  # the quick start; the tests make their own
        # the MiniLM files checked against their digests, and its per-machine model made (once,
        # saying so): the first ingest then starts at once
        .venv/bin/python -c 'from arcana_loop.knowledge.embeddings_minilm import prepare; prepare()'
    fi
    find .venv -maxdepth 1 -name '.installed-*' ! -name ".installed-*-$key" -delete
    touch "$stamp"
fi
