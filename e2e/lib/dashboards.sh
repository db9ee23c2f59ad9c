# shellcheck shell=bash
# The Python environment of the dashboards generator (charts/tracehouse/dashboards/gen): its
# pinned requirements.txt in a venv of their own (lib/venv.sh).

source "$E2E_DIR/lib/venv.sh"
DASHBOARDS_GEN="$REPO_DIR/charts/tracehouse/dashboards/gen"

dashboards_venv() { requirements_venv dashboards "$DASHBOARDS_GEN/requirements.txt"; }
