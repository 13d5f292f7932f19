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
# Keyed on pyproject.toml and the list of modules: the editable install links each module
# (strict mode, so type checkers and import contracts read the installed layout), and a
# module added later needs a new link.
stamp=.venv/.installed-$( { cat pyproject.toml; git ls-files -co --exclude-standard -- arcana_loop graph nodes tools grounding knowledge cli evaluation 2>/dev/null | sort; } | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    echo "Installing arcana-loop and its dependencies into .venv..." >&2
    .venv/bin/python -m pip install -q --upgrade pip >&2
    rm -rf build/__editable__.*  # links to modules that may be gone
    .venv/bin/python -m pip install -q -e ".[dev]" --config-settings editable_mode=strict >&2
    rm -f .venv/.installed-*
    touch "$stamp"
fi
