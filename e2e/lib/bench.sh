# shellcheck shell=bash
# The Python environment of e2e/bench (e2e/benchlib): its pinned requirements.txt in a venv
# of their own (lib/venv.sh).

source "$E2E_DIR/lib/venv.sh"
BENCHLIB="$E2E_DIR/benchlib"

bench_venv() { requirements_venv bench "$BENCHLIB/requirements.txt"; }
