# shellcheck shell=bash
# The OpenTelemetry Collector that e2e/bench compares tracehouse against: the contrib Kafka
# receiver, the core batch processor and the contrib ClickHouse exporter, plus the contrib
# filter, redaction, attributes and probabilistic sampler processors for the processing
# differential test (issue 38; e2e/otelcol/PROCESSORS.md), built from the Go module proxy with
# the collector builder (ocb) at the versions pinned in e2e/otelcol/builder-config.yaml.
# Sourced after lib/common.sh.
#
#   otelcol_install   install the builder and build the collector (cached; ~5 min cold)
#   otelcol_bin       path of the built binary

OTELCOL_BUILDER_VERSION=v0.155.0
OTELCOL_BUILDER="$TRACEHOUSE_CACHE/otelcol-builder-$OTELCOL_BUILDER_VERSION/bin/builder"
OTELCOL_BUILDER_CONFIG="$E2E_DIR/otelcol/builder-config.yaml"

# The build directory is keyed by the builder config's hash: editing the config rebuilds.
otelcol_dir() { echo "$TRACEHOUSE_CACHE/otelcol-$(sha256sum "$OTELCOL_BUILDER_CONFIG" | cut -c1-12)"; }
otelcol_bin() { echo "$(otelcol_dir)/dist/otelcol-tracehouse-bench"; }

otelcol_install() {
  local dir log="$LOG_DIR/otelcol-install.log"
  dir="$(otelcol_dir)"
  [[ -f "$dir/.installed" && -x "$(otelcol_bin)" ]] && return 0
  command -v go >/dev/null || die "otelcol: the Go toolchain is required (it ships on this machine kind)"
  : >"$log"
  if [[ ! -x "$OTELCOL_BUILDER" ]]; then
    say "otelcol: installing the collector builder $OTELCOL_BUILDER_VERSION from the Go module proxy"
    GOBIN="$(dirname "$OTELCOL_BUILDER")" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_BUILDER_VERSION" \
      >>"$log" 2>&1 || die "otelcol: builder install failed; log: $log"
  fi
  say "otelcol: building the OpenTelemetry Collector into $dir (about 5 min the first time); log: $log"
  rm -rf "$dir"
  mkdir -p "$dir"
  # output_path in the builder config is relative: the build happens inside $dir.
  (cd "$dir" && "$OTELCOL_BUILDER" --config "$OTELCOL_BUILDER_CONFIG") >>"$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "otelcol: build failed; log: $log"; }
  [[ -x "$(otelcol_bin)" ]] || die "otelcol: the builder left no binary at $(otelcol_bin); log: $log"
  touch "$dir/.installed"
}
