# shellcheck shell=bash
# Container images of the local stack: the runtime base assembled from Debian packages, and
# the tracehouse collector and operator images built from the repository's Dockerfile with the
# current `cargo build` handed in as the `<target>-binaries` build context. Sourced after common.sh.
#
# Images live in a podman storage of the project's own (vfs driver: no overlay, no daemon),
# $TRACEHOUSE_CACHE/containers; the node agent reads the same storage to run pods.
# No registry can be pulled from here and RUN steps cannot execute (the OCI runtime may not
# set rlimits), so:
# - the base image the Dockerfile's FROM names (distroless cc, Debian 12) is assembled from the
#   .deb packages it is made of (apt-get download + dpkg-deb -x), imported and tagged with
#   that name without the digest (passed as BASE_IMAGE); cached until the package versions change;
# - the runtime targets are built from binaries built outside
#   (`--build-context collector-binaries=DIR`, `operator-binaries=DIR`).

IMAGES_STORE="$TRACEHOUSE_CACHE/containers"
# The name the Dockerfile's FROM uses (ARG BASE_IMAGE), without its digest.
IMAGES_BASE="gcr.io/distroless/cc-debian12:nonroot"
# What distroless cc is made of, minus the C++ runtime the binaries do not link.
IMAGES_BASE_PACKAGES=(libc6 libgcc-s1 libssl3 ca-certificates netbase tzdata)
IMAGES_VERSION="$(awk -F'"' '/^version *=/ { print $2; exit }' "$REPO_DIR/Cargo.toml")"
# The names users run: the operator's default collector image is tracehouse/collector:<version>,
# the chart's default operator image tracehouse/operator:<appVersion>.
IMAGES_COLLECTOR="tracehouse/collector:$IMAGES_VERSION"
IMAGES_OPERATOR="tracehouse/operator:$IMAGES_VERSION"

# The previous release's collector (e2e/harness/chaos/previous.py builds its binary once into
# the cache: several minutes cold), for the operator's version-skew test
# (operator/tests/e2e_skew.rs): an older collector image under this operator.
IMAGES_PREVIOUS_RELEASE="$(awk -F'"' '/^PREVIOUS_RELEASE *=/ { print $2; exit }' "$E2E_DIR/harness/chaos/previous.py")"
IMAGES_PREVIOUS_COLLECTOR="tracehouse/collector:${IMAGES_PREVIOUS_RELEASE:0:7}"

th_podman() {
  podman --root "$IMAGES_STORE/storage" --runroot "$IMAGES_STORE/run" --storage-driver vfs "$@"
}

images_install() {
  command -v podman >/dev/null || apt_ensure podman
  command -v objcopy >/dev/null || apt_ensure binutils
  mkdir -p "$IMAGES_STORE"
}

# images_label IMAGE LABEL: the label's value, empty when the image or label is missing.
images_label() {
  th_podman image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# The base image, assembled from the candidate versions of IMAGES_BASE_PACKAGES. Rebuilt when
# a version (or this recipe) changes; a few seconds when the .debs are cached.
images_base() {
  local key
  key="$( (apt-cache policy "${IMAGES_BASE_PACKAGES[@]}" | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }'
           declare -f images_base_rootfs) | sha256sum | cut -c1-16)"
  [[ "$(images_label "$IMAGES_BASE" tracehouse.base-key)" == "$key" ]] && return 0
  say "images: assembling $IMAGES_BASE from Debian packages: ${IMAGES_BASE_PACKAGES[*]}"
  local work="$IMAGES_STORE/base.tmp.$$" log="$LOG_DIR/images-base.log"
  rm -rf "$work"; mkdir -p "$work/debs" "$work/root"
  (
    set -e
    cd "$work/debs"
    # -o APT::Sandbox::User=root: apt's _apt user cannot write into a root-owned cache.
    apt-get download -o APT::Sandbox::User=root "${IMAGES_BASE_PACKAGES[@]}"
    images_base_rootfs "$work/root" "$work"/debs/*.deb
    tar --numeric-owner -C "$work/root" -c . | th_podman import \
      --change "USER 65532:65532" --change "WORKDIR /home/nonroot" \
      --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
      --change "LABEL tracehouse.base-key=$key" \
      --change "LABEL tracehouse.base-packages=\"${IMAGES_BASE_PACKAGES[*]}\"" \
      - "$IMAGES_BASE"
  ) >"$log" 2>&1 || { rm -rf "$work"; tail -n 20 "$log" >&2; die "images: assembling the base image failed; log: $log"; }
  rm -rf "$work"
  say "images: $IMAGES_BASE ready ($(th_podman image inspect --format '{{.Size}}' "$IMAGES_BASE" | numfmt --to=iec))"
}

# images_base_rootfs ROOT DEB...: the root filesystem distroless builds from those packages:
# their files (docs and manuals dropped, copyright kept), the CA bundle update-ca-certificates
# would write, and the users root, nobody and nonroot (65532).
images_base_rootfs() {
  local root="$1" deb; shift
  for deb in "$@"; do dpkg-deb -x "$deb" "$root"; done
  find "$root/usr/share/doc" -type f ! -name copyright -delete
  rm -rf "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" "$root/usr/share/locale"
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot" "$root/root" "$root/proc" "$root/dev" "$root/sys"
  chmod 1777 "$root/tmp"; chmod 700 "$root/root"
  chown 65532:65532 "$root/home/nonroot"
  find "$root/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z | xargs -0 cat \
    >"$root/etc/ssl/certs/ca-certificates.crt"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$root/etc/group"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# images_build [PROFILE]: the collector and operator images from the current build (default
# `debug`), tagged IMAGES_COLLECTOR and IMAGES_OPERATOR. Debug info is stripped on the way in
# (a debug binary is mostly DWARF). Skipped when the images already hold these binaries.
images_build() {
  local profile="${1:-debug}" bin ctx="$IMAGES_STORE/build-context" log="$LOG_DIR/images-build.log"
  bin="${CARGO_TARGET_DIR:-$REPO_DIR/target}/$profile"
  images_install
  images_base
  local f sum
  mkdir -p "$ctx"
  mkdir -p "$ctx/lib"
  for f in tracehouse-collector tracehouse-operator; do
    [[ -x "$bin/$f" ]] || die "images: $bin/$f is missing (cargo build -p $f)"
    objcopy --strip-debug "$bin/$f" "$ctx/$f.tmp" && mv "$ctx/$f.tmp" "$ctx/$f"
  done
  # The debug build links zlib dynamically (the Dockerfile's release build links it
  # statically): the runtime targets copy lib/ into /usr/lib, found on any architecture.
  cp -L "$(ldd "$bin/tracehouse-collector" | awk '$1 == "libz.so.1" { print $3; exit }')" "$ctx/lib/libz.so.1"
  sum="$(cat "$ctx"/tracehouse-* "$ctx"/lib/* "$REPO_DIR/Dockerfile" | sha256sum | cut -c1-16)"
  if [[ "$(images_label "$IMAGES_COLLECTOR" tracehouse.binaries)" == "$sum" \
     && "$(images_label "$IMAGES_OPERATOR" tracehouse.binaries)" == "$sum" ]]; then
    return 0
  fi
  say "images: building $IMAGES_COLLECTOR and $IMAGES_OPERATOR from the $profile build"
  local start=$SECONDS target
  for target in collector operator; do
    local name="IMAGES_${target^^}"
    # The base: the stand-in assembled above under the tag the Dockerfile's digest pins.
    th_podman build --target "$target" --build-context "$target-binaries=$ctx" \
      --build-arg "BASE_IMAGE=$IMAGES_BASE" \
      --build-arg "VERSION=$IMAGES_VERSION" --label "tracehouse.binaries=$sum" \
      -t "${!name}" -f "$REPO_DIR/Dockerfile" "$REPO_DIR" >>"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; die "images: podman build --target $target failed; log: $log"; }
  done
  # The previous builds' images are now untagged: drop them (vfs keeps full copies of layers).
  th_podman image prune -f >>"$log" 2>&1 || true
  say "images: built in $((SECONDS - start))s: $IMAGES_COLLECTOR $(images_size "$IMAGES_COLLECTOR"), $IMAGES_OPERATOR $(images_size "$IMAGES_OPERATOR")"
}

images_size() { th_podman image inspect --format '{{.Size}}' "$1" | numfmt --to=iec; }

# images_previous_collector: IMAGES_PREVIOUS_COLLECTOR from the previous release's binary, the
# way images_build makes IMAGES_COLLECTOR (the Dockerfile's collector target, the binary
# handed in, debug info stripped, its libz beside it). Skipped when the image holds that binary.
images_previous_collector() {
  local bin ctx="$IMAGES_STORE/build-context-previous" log="$LOG_DIR/images-build.log" sum
  images_install
  images_base
  local plog="$LOG_DIR/previous-collector.log"
  [[ -x "$TRACEHOUSE_CACHE/previous-collector-${IMAGES_PREVIOUS_RELEASE:0:12}/bin/tracehouse-collector" ]] \
    || say "images: building the previous release's collector ${IMAGES_PREVIOUS_RELEASE:0:12} (once, several minutes; log: $plog)"
  # previous.py's last line on stdout is the binary (cached, or built now).
  bin="$(cd "$E2E_DIR" && python3 -m harness.chaos.previous 2>"$plog" | tail -n 1)"
  [[ -x "$bin" ]] || { tail -n 20 "$plog" >&2; die "images: the previous release's collector was not built (e2e/harness/chaos/previous.py); log: $plog"; }
  mkdir -p "$ctx/lib"
  if [[ ! -s "$ctx/tracehouse-collector" || "$bin" -nt "$ctx/tracehouse-collector" ]]; then
    objcopy --strip-debug "$bin" "$ctx/tracehouse-collector.tmp" && mv "$ctx/tracehouse-collector.tmp" "$ctx/tracehouse-collector"
  fi
  cp -L "$(ldd "$bin" | awk '$1 == "libz.so.1" { print $3; exit }')" "$ctx/lib/libz.so.1"
  sum="$(cat "$ctx/tracehouse-collector" "$ctx"/lib/* "$REPO_DIR/Dockerfile" | sha256sum | cut -c1-16)"
  [[ "$(images_label "$IMAGES_PREVIOUS_COLLECTOR" tracehouse.binaries)" == "$sum" ]] && return 0
  say "images: building $IMAGES_PREVIOUS_COLLECTOR from the previous release ${IMAGES_PREVIOUS_RELEASE:0:12}"
  th_podman build --target collector --build-context "collector-binaries=$ctx" \
    --build-arg "BASE_IMAGE=$IMAGES_BASE" --build-arg "VERSION=$IMAGES_VERSION" \
    --build-arg "REVISION=$IMAGES_PREVIOUS_RELEASE" --label "tracehouse.binaries=$sum" \
    -t "$IMAGES_PREVIOUS_COLLECTOR" -f "$REPO_DIR/Dockerfile" "$REPO_DIR" >>"$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "images: podman build of $IMAGES_PREVIOUS_COLLECTOR failed; log: $log"; }
  th_podman image prune -f >>"$log" 2>&1 || true
  say "images: $IMAGES_PREVIOUS_COLLECTOR $(images_size "$IMAGES_PREVIOUS_COLLECTOR")"
}
