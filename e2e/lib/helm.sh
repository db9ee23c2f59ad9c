# shellcheck shell=bash
# Helm 3, built from the Go module proxy (helm.sh/helm/v3/cmd/helm) into $TRACEHOUSE_CACHE,
# and the tracehouse chart's install on the local stack. Sourced after common.sh.

# A version that downloads from the proxy here (others may be listed and still refuse: 403).
HELM_VERSION=v3.22.0
HELM_DIR="$TRACEHOUSE_CACHE/helm-$HELM_VERSION"
HELM="$HELM_DIR/helm"
CHART_DIR="$REPO_DIR/charts/tracehouse"

# About 4 minutes cold; the version is set through -ldflags (else `helm version` says v3.22).
helm_install() {
  [[ -x "$HELM" ]] && return 0
  command -v go >/dev/null || die "helm: Go is needed to build helm $HELM_VERSION; install it first"
  say "helm: building helm $HELM_VERSION from the Go module proxy into $HELM_DIR (~4 min cold)"
  local tmp="$HELM_DIR.tmp.$$" log="$LOG_DIR/helm-install.log" start=$SECONDS
  local v=helm.sh/helm/v3/internal/version
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$TRACEHOUSE_CACHE" && GOBIN="$tmp" GOFLAGS=-trimpath go install \
    -ldflags "-s -w -X $v.version=$HELM_VERSION -X $v.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >"$log" 2>&1 \
    || { rm -rf "$tmp"; tail -n 20 "$log" >&2; die "helm: go install failed; log: $log"; }
  rm -rf "$HELM_DIR"; mv "$tmp" "$HELM_DIR"
  say "helm: built in $((SECONDS - start))s ($("$HELM" version --short))"
}

helm_() { "$HELM" --kubeconfig "$K8S_DATA/admin.kubeconfig" "$@"; }
