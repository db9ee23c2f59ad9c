# shellcheck shell=bash
# The Python environment of e2e/bench (e2e/benchlib): the pinned packages of its
# requirements.txt in a venv of their own, keyed by that file's hash.

BENCHLIB="$E2E_DIR/benchlib"

bench_venv() {
  local h; h="$(sha256sum "$BENCHLIB/requirements.txt" | cut -c1-12)"
  local venv="$TRACEHOUSE_CACHE/venv-bench-$h"
  if [[ ! -f "$venv/.installed" ]]; then
    command -v python3 >/dev/null || apt_ensure python3 python3-venv
    say "bench: installing its Python packages into $venv"
    local log="$LOG_DIR/bench-install.log"
    rm -rf "$venv"
    python3 -m venv "$venv" >"$log" 2>&1 || die "bench: python venv failed; log: $log"
    "$venv/bin/pip" install -q -r "$BENCHLIB/requirements.txt" >>"$log" 2>&1 \
      || die "bench: pip install failed; log: $log"
    touch "$venv/.installed"
  fi
  echo "$venv"
}
