# syntax=docker/dockerfile:1
# tracehouse container images: `collector` and `operator`, two small runtime targets, for
# linux/amd64 and linux/arm64.
#
#   docker buildx build --platform linux/amd64,linux/arm64 --target collector --build-arg REVISION="$(git rev-parse HEAD)" -t <registry>/tracehouse/collector:0.1.0 --push .
#   docker buildx build --platform linux/amd64,linux/arm64 --target operator  --build-arg REVISION="$(git rev-parse HEAD)" -t <registry>/tracehouse/operator:0.1.0  --push .
#
# Both images carry the org.opencontainers.image.* labels (title, description, source,
# licenses, version from ARG VERSION, revision from ARG REVISION: the commit they were built
# from, which tells builds apart while every one says version 0.1.0) and the LICENSE file.
#
# Each platform is compiled natively for itself (on a builder of that architecture, or under
# QEMU emulation): nothing here names an architecture, so the same lines serve both. Each
# target compiles only its own binary (`build-collector`, `build-operator`; BuildKit builds
# only the stages a target needs), with the toolchain of rust-toolchain.toml and `--locked`.
# zlib is linked statically (`rdkafka/libz-static`), so no library is copied next to the
# binaries; they link glibc, libgcc, libssl and libcrypto, which the runtime base has.
#
# The runtime targets copy their binary from `collector-binaries` / `operator-binaries`, which
# a build can replace with a directory of binaries built elsewhere:
#
#   podman build --target collector --build-context collector-binaries=DIR -t tracehouse/collector:dev .
#
# DIR holds the binary and `lib/` (libraries to add to /usr/lib, the linker's default search
# path on every architecture: empty for static zlib). The local stack builds its images this
# way from the current debug build (e2e/lib/images.sh), because RUN steps cannot execute there.
#
# Bases are pinned by digest (the multi-architecture index). Runtime: distroless cc (Debian 12):
# glibc, libgcc, libssl3, CA certificates, user `nonroot` (65532). The release profile keeps
# line tables for backtraces; the images drop them (objcopy --strip-debug; symbols stay).

ARG RUST_IMAGE=docker.io/library/rust:1.95.0-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

FROM ${RUST_IMAGE} AS build-base
WORKDIR /src
# librdkafka is built from source by rdkafka-sys (cmake, a C/C++ toolchain), zlib from the
# sources libz-sys carries; OpenSSL is linked dynamically (the runtime base has it).
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
COPY . .

FROM build-base AS build-collector
ARG TARGETARCH
RUN --mount=type=cache,id=tracehouse-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=tracehouse-target-collector-${TARGETARCH},target=/src/target \
    cargo build --release --locked -p tracehouse-collector --bin tracehouse-collector \
        --features rdkafka/libz-static \
    && mkdir -p /out/lib \
    && cp target/release/tracehouse-collector /out/ \
    && objcopy --strip-debug /out/tracehouse-collector

FROM build-base AS build-operator
ARG TARGETARCH
RUN --mount=type=cache,id=tracehouse-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=tracehouse-target-operator-${TARGETARCH},target=/src/target \
    cargo build --release --locked -p tracehouse-operator --bin tracehouse-operator \
        --features rdkafka/libz-static \
    && mkdir -p /out/lib \
    && cp target/release/tracehouse-operator /out/ \
    && objcopy --strip-debug /out/tracehouse-operator

# What the runtime targets copy: a build stage's output, or `--build-context <name>=DIR`.
FROM scratch AS collector-binaries
COPY --from=build-collector /out/ /

FROM scratch AS operator-binaries
COPY --from=build-operator /out/ /

FROM ${BASE_IMAGE} AS runtime-base
# The version (Cargo.toml's, the chart's appVersion) and the commit built; pass
# --build-arg REVISION="$(git rev-parse HEAD)". Both targets inherit these labels.
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/tracehouse/tracehouse" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="tracehouse"
# Apache-2.0 asks that a copy of the license travel with the work.
COPY LICENSE /usr/share/doc/tracehouse/LICENSE
USER 65532:65532

FROM runtime-base AS collector
LABEL org.opencontainers.image.title="tracehouse-collector" \
      org.opencontainers.image.description="Gateway collector: OpenTelemetry spans from Kafka into ClickHouse"
COPY --from=collector-binaries /lib/ /usr/lib/
COPY --from=collector-binaries /tracehouse-collector /usr/local/bin/tracehouse-collector
ENTRYPOINT ["/usr/local/bin/tracehouse-collector"]

FROM runtime-base AS operator
LABEL org.opencontainers.image.title="tracehouse-operator" \
      org.opencontainers.image.description="Kubernetes operator: TracePipeline resources to schema migrations and gateway collectors"
COPY --from=operator-binaries /lib/ /usr/lib/
COPY --from=operator-binaries /tracehouse-operator /usr/local/bin/tracehouse-operator
ENTRYPOINT ["/usr/local/bin/tracehouse-operator"]
CMD ["run"]
