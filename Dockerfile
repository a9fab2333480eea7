# syntax=docker/dockerfile:1
#
# dcgm-otel container image.
#
#   docker build -t dcgm-otel .                    # slim image: runs --simulate anywhere; on a GPU host it needs libdcgm
#   docker build --target gpu -t dcgm-otel:gpu .   # same binary on top of NVIDIA's DCGM 4.x image (libdcgm included)
#   docker build --target collector -t dcgm-otel-collector .   # the OpenTelemetry Collector with the dcgm receiver
#
# Stages:
#   planner  - reduces the source tree to what decides the dependency graph (manifests, lock file, stub targets)
#   builder  - compiles the dependencies once (cached layer), then the real sources, with the same command CI
#              uses for release builds: `cargo build --release --locked`
#   gpu      - the same binary and files on nvcr.io/nvidia/cloud-native/dcgm (libdcgm.so.4 and its modules)
#   engine-builder, collector-builder, collector - the OpenTelemetry Collector with the dcgm receiver
#              (docs/collector.md): tests/collector's distribution and the engine library it loads
#   runtime  - debian:bookworm-slim, non-root user, counters CSVs, /health HEALTHCHECK (the default:
#              last stage). BuildKit builds only the stages a target needs; the legacy builder would also
#              build (and pull) the gpu stage.
#
# The builder is Debian bookworm (glibc 2.36). Every runtime base must have the same or a newer glibc: bookworm
# itself, or the DCGM image's Ubuntu 24.04 variant (glibc 2.39). An Ubuntu 22.04 based DCGM image (glibc 2.35)
# would need a builder on an older distribution.

ARG RUST_VERSION=1.95
ARG DCGM_IMAGE=nvcr.io/nvidia/cloud-native/dcgm:4.6.1-1-ubuntu24.04

# ---------------------------------------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-bookworm AS planner
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
COPY . .
# Keep every Cargo.toml and the lock file; replace each target root (main.rs, lib.rs, bin/, benches/, examples/,
# tests/, build.rs) with an empty program. The result only changes when dependencies or targets change, so the
# dependency layer below stays cached across ordinary source edits.
RUN set -eu; mkdir -p /skeleton; \
    find . -path ./target -prune -o \( -name Cargo.toml -o -name Cargo.lock \) -print \
      | while read -r f; do mkdir -p "/skeleton/$(dirname "$f")"; cp "$f" "/skeleton/$f"; done; \
    find . -path ./target -prune -o -name '*.rs' \( -path '*/src/main.rs' -o -path '*/src/lib.rs' \
         -o -path '*/src/bin/*' -o -path '*/benches/*' -o -path '*/examples/*' -o -path './tests/*' \
         -o -name build.rs \) -print \
      | while read -r f; do mkdir -p "/skeleton/$(dirname "$f")"; \
          printf '#![allow(dead_code)]\nfn main() {}\n' > "/skeleton/$f"; done

# Both images carry the licence (/usr/share/doc/dcgm-otel/LICENSE) and the third-party notices of every crate
# in the binary (/usr/share/doc/dcgm-otel/THIRD-PARTY-NOTICES, packaging/third_party_notices.py).
# Counters files at dcgm-exporter's paths: /etc/dcgm-exporter/default-counters.csv (ours: same fields and
# types as dcgm-exporter's), dcp-metrics-included.csv and 1.x-compatibility-metrics.csv (dcgm-exporter's,
# verbatim: the GPU Operator sets DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/dcp-metrics-included.csv).
# ---------------------------------------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# 1) dependencies only (this layer is reused until Cargo.toml / Cargo.lock change)
COPY --from=planner /skeleton/ ./
RUN cargo build --release --locked
# 2) the real sources. COPY keeps the files' own modification times, which can be older than the stub build
#    above, so touch them: cargo must see the real sources as newer than the stub artifacts.
COPY . .
RUN find . -path ./target -prune -o -name '*.rs' -exec touch {} + \
 && cargo build --release --locked \
 && install -D -m 0755 target/release/dcgm-otel /out/usr/bin/dcgm-otel \
 && install -D -m 0644 src/counters/default-counters.csv /out/etc/dcgm-exporter/default-counters.csv \
 && install -D -m 0644 src/counters/dcgm-exporter/dcp-metrics-included.csv /out/etc/dcgm-exporter/dcp-metrics-included.csv \
 && install -D -m 0644 src/counters/dcgm-exporter/1.x-compatibility-metrics.csv /out/etc/dcgm-exporter/1.x-compatibility-metrics.csv \
 && install -D -m 0644 deploy/counters/alerts.csv /out/etc/dcgm-otel/alerts-counters.csv \
 && install -D -m 0644 LICENSE /out/usr/share/doc/dcgm-otel/LICENSE \
 && install -D -m 0644 packaging/THIRD-PARTY-NOTICES /out/usr/share/doc/dcgm-otel/THIRD-PARTY-NOTICES

# ---------------------------------------------------------------------------------------------------------------
# GPU image: NVIDIA's DCGM image ships libdcgm.so.4, the DCGM modules (including the closed-source profiling
# module needed for DCGM_FI_PROF_*) and sets NVIDIA_* variables for the NVIDIA Container Toolkit.
# Profiling metrics need root and CAP_SYS_ADMIN, so this target keeps root (see docker-compose.gpu.yaml).
FROM ${DCGM_IMAGE} AS gpu
COPY --from=builder /out/ /
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32 \
    NVIDIA_VISIBLE_DEVICES=all \
    DCGM_EXPORTER_LISTEN=:9400
EXPOSE 9400
# Curl-free probe: bash's /dev/tcp sends one HTTP/1.0 request to /health and the status line must say 200.
# /health is liveness (200 through a DCGM outage, 503 only for a collector hung past max(10 min, 20 intervals));
# fresh data is /ready's answer, for readiness probes. It reads the port from DCGM_EXPORTER_LISTEN; if you pass
# -a/--address on the command line instead, change the variable too (or override the healthcheck).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["bash", "-c", "p=\"${DCGM_EXPORTER_LISTEN:-:9400}\"; exec 3<>\"/dev/tcp/127.0.0.1/${p##*:}\" && printf 'GET /health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/bin/dcgm-otel"]

# ---------------------------------------------------------------------------------------------------------------
# The OpenTelemetry Collector with the dcgm receiver (docs/collector.md, collector/receiver/dcgmreceiver): the
# distribution tests/collector builds (ocb-generated sources, complete go.sum, the receiver by a go.mod replace),
# with CGO_ENABLED=0 as ocb builds it (the receiver loads the engine with purego), beside the engine library
# (capi/, libdcgm_otel_engine.so) at the receiver's library_path. Only `--target collector` builds these stages.
FROM builder AS engine-builder
RUN cargo build --release --locked -p dcgm-otel-engine \
 && install -D -m 0755 target/release/libdcgm_otel_engine.so /engine/usr/lib/dcgm-otel/libdcgm_otel_engine.so

FROM golang:1.26-bookworm AS collector-builder
WORKDIR /src
COPY collector/receiver/dcgmreceiver collector/receiver/dcgmreceiver
COPY tests/collector/otelcol-dcgm tests/collector/otelcol-dcgm
WORKDIR /src/tests/collector/otelcol-dcgm
RUN CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -trimpath -ldflags="-s -w" -o /collector/usr/bin/otelcol-dcgm .

FROM debian:bookworm-slim AS collector
# ca-certificates: exporters over TLS; bash: the compose healthcheck (docker-compose.receiver.yaml).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 dcgm-otel \
 && useradd --system --uid 10001 --gid dcgm-otel --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin dcgm-otel
COPY --from=builder /out/etc/ /etc/
COPY --from=builder /out/usr/share/doc/ /usr/share/doc/
COPY --from=engine-builder /engine/ /
COPY --from=collector-builder /collector/ /
# libdcgm is loaded by the engine at run time (libdcgm.so.4): mount the host's DCGM libraries into /opt/dcgm/lib,
# or set the receiver's dcgm_library. DCGM profiling fields need root and CAP_SYS_ADMIN for the whole collector
# (docs/collector.md: a reason to prefer the standalone exporter).
ENV LD_LIBRARY_PATH=/opt/dcgm/lib
USER 10001:10001
# 4317/4318: OTLP in, 8888: the collector's own metrics, 13133: health_check, 9400: the compose override's
# prometheus exporter.
EXPOSE 4317 4318 8888 9400 13133
ENTRYPOINT ["/usr/bin/otelcol-dcgm"]

# ---------------------------------------------------------------------------------------------------------------
# Default image (last stage, so a plain `docker build` gives this one): small, no GPU libraries. With
# `--simulate` it runs anywhere; for real GPUs add libdcgm (README, "On a GPU host") or build the `gpu` target.
FROM debian:bookworm-slim AS runtime
# ca-certificates: OTLP over TLS to a vendor endpoint. No curl/wget: the healthcheck uses bash only.
# Unpinned on purpose: the package follows the base image's Debian release and its security updates.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 dcgm-otel \
 && useradd --system --uid 10001 --gid dcgm-otel --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin dcgm-otel
COPY --from=builder /out/ /
# libdcgm is loaded at run time by soname (libdcgm.so.4). Mount the host's DCGM libraries into /opt/dcgm/lib
# to use real GPUs with this image (README "On a GPU host"); the directory is empty otherwise.
ENV DCGM_EXPORTER_LISTEN=:9400 \
    LD_LIBRARY_PATH=/opt/dcgm/lib
USER 10001:10001
EXPOSE 9400
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "p=\"${DCGM_EXPORTER_LISTEN:-:9400}\"; exec 3<>\"/dev/tcp/127.0.0.1/${p##*:}\" && printf 'GET /health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/bin/dcgm-otel"]
# No default arguments: without flags dcgm-otel reads real GPUs through libdcgm. `docker run IMAGE --simulate`
# (or docker-compose.yaml) runs the simulated fleet.
