# shellcheck shell=bash
# A Python tool's environment: the pinned packages of its requirements.txt in a venv of its
# own, keyed by that file's hash, so editing the pins makes a new one. Sourced after
# lib/common.sh.
#
#   requirements_venv NAME REQUIREMENTS   print the venv's path, creating it first if needed
#
# The harness is one Python package, e2e/harness: its modules are imported as `harness.…` and
# run as `python -m harness.<package>.<module>`, with e2e/ on the path. Set here, once, for
# every script that sources this file.
case ":${PYTHONPATH:-}:" in
  *":$E2E_DIR:"*) ;;
  *) export PYTHONPATH="$E2E_DIR${PYTHONPATH:+:$PYTHONPATH}" ;;
esac

requirements_venv() {
  local name="$1" requirements="$2"
  local h; h="$(sha256sum "$requirements" | cut -c1-12)"
  local venv="$TRACEHOUSE_CACHE/venv-$name-$h"
  if [[ ! -f "$venv/.installed" ]]; then
    command -v python3 >/dev/null || apt_ensure python3 python3-venv
    say "$name: installing its Python packages into $venv"
    local log="$LOG_DIR/$name-install.log"
    rm -rf "$venv"
    python3 -m venv "$venv" >"$log" 2>&1 || die "$name: python venv failed; log: $log"
    "$venv/bin/pip" install -q -r "$requirements" >>"$log" 2>&1 \
      || die "$name: pip install failed; log: $log"
    touch "$venv/.installed"
  fi
  echo "$venv"
}
