# shellcheck shell=bash
# The Python environment of e2e/bench (e2e/harness/bench), also the other runners' (querybench,
# chaos, column-cost): its pinned requirements.txt in a venv of their own (lib/venv.sh).

source "$E2E_DIR/lib/venv.sh"

bench_venv() { requirements_venv bench "$E2E_DIR/harness/bench/requirements.txt"; }
