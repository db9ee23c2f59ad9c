# syntax=docker/dockerfile:1
# tracehouse container images: `collector` and `operator`, two small runtime targets.
#
#   docker build --target collector -t tracehouse/collector:0.1.0 .
#   docker build --target operator  -t tracehouse/operator:0.1.0 .
#
# The `build` stage compiles both release binaries with the toolchain pinned in
# rust-toolchain.toml and `--locked`. The runtime targets copy them from the `binaries` stage,
# which a build can replace with a directory of binaries built elsewhere:
#
#   podman build --target collector --build-context binaries=DIR -t tracehouse/collector:dev .
#
# DIR holds tracehouse-collector, tracehouse-operator and libz.so.1 (the one library the
# binaries link that the runtime base lacks). The local stack builds its images this way from
# the current `cargo build` (e2e/lib/images.sh), because RUN steps cannot execute there.
#
# Runtime base: distroless cc (Debian 12): glibc, libgcc, libssl3, CA certificates, user
# `nonroot` (65532). `ldd` of both binaries: libc, libm, libgcc_s, libssl, libcrypto, libz.
# The release profile keeps line tables for backtraces; the images drop them (objcopy
# --strip-debug; symbols stay): with release binaries built on Debian 12 the images are
# 35 MB (collector) and 42 MB (operator), 91 MB and 121 MB with the line tables.

ARG RUST_VERSION=1.95.0
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# librdkafka is built from source by rdkafka-sys (cmake, a C/C++ toolchain); OpenSSL and zlib
# are linked dynamically.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p tracehouse-collector -p tracehouse-operator \
    && mkdir /out \
    && cp target/release/tracehouse-collector target/release/tracehouse-operator /out/ \
    && objcopy --strip-debug /out/tracehouse-collector \
    && objcopy --strip-debug /out/tracehouse-operator \
    && cp "$(ldconfig -p | awk '$1 == "libz.so.1" { print $NF; exit }')" /out/libz.so.1

# What the runtime targets copy: the build stage's output, or `--build-context binaries=DIR`.
FROM scratch AS binaries
COPY --from=build /out/ /

FROM ${BASE_IMAGE} AS runtime-base
ARG VERSION=0.1.0
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/tracehouse/tracehouse" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="tracehouse"
COPY --from=binaries /libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1
USER 65532:65532

FROM runtime-base AS collector
LABEL org.opencontainers.image.title="tracehouse-collector" \
      org.opencontainers.image.description="Gateway collector: OpenTelemetry spans from Kafka into ClickHouse"
COPY --from=binaries /tracehouse-collector /usr/local/bin/tracehouse-collector
ENTRYPOINT ["/usr/local/bin/tracehouse-collector"]

FROM runtime-base AS operator
LABEL org.opencontainers.image.title="tracehouse-operator" \
      org.opencontainers.image.description="Kubernetes operator: TracePipeline resources to schema migrations and gateway collectors"
COPY --from=binaries /tracehouse-operator /usr/local/bin/tracehouse-operator
ENTRYPOINT ["/usr/local/bin/tracehouse-operator"]
CMD ["run"]
