# shellcheck shell=bash
# The Python environment of the dashboards generator (charts/tracehouse/dashboards/gen): the
# pinned packages of its requirements.txt in a venv of their own, keyed by that file's hash.

DASHBOARDS_GEN="$REPO_DIR/charts/tracehouse/dashboards/gen"

dashboards_venv() {
  local h; h="$(sha256sum "$DASHBOARDS_GEN/requirements.txt" | cut -c1-12)"
  local venv="$TRACEHOUSE_CACHE/venv-dashboards-$h"
  if [[ ! -f "$venv/.installed" ]]; then
    command -v python3 >/dev/null || apt_ensure python3 python3-venv
    say "dashboards: installing the generator's packages into $venv"
    local log="$LOG_DIR/dashboards-install.log"
    rm -rf "$venv"
    python3 -m venv "$venv" >"$log" 2>&1 || die "dashboards: python venv failed; log: $log"
    "$venv/bin/pip" install -q -r "$DASHBOARDS_GEN/requirements.txt" >>"$log" 2>&1 \
      || die "dashboards: pip install failed; log: $log"
    touch "$venv/.installed"
  fi
  echo "$venv"
}
