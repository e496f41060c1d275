# syntax=docker/dockerfile:1
#
# gorge-webhook: webhook-daemon (the entrypoint) and webhook-admin in one
# small image. Build from the repository root:
#
#   docker build -t gorge-webhook:0.1.0 .
#
# `cargo xtask image` builds it and smoke-tests the result; without Docker
# or a registry it builds with podman, passing locally made bases as
# RUST_IMAGE and RUNTIME_IMAGE (docs/operations/deploy.md, "Building the
# image without Docker").
#
# The runtime stage is debian:bookworm-slim rather than distroless so the
# health check needs no extra package: `gorge-webhook-probe`
# (deploy/healthcheck.sh) speaks HTTP over bash's /dev/tcp, and bash, grep
# and coreutils are part of every Debian base image. Installing curl would
# add libcurl, OpenSSL and their CVE stream to an image whose own TLS is
# rustls. Receivers' and the database's CA roots are compiled into the
# binaries (webpki-roots); extra roots come from GORGE_WEBHOOK_CA_FILE /
# GORGE_WEBHOOK_MYSQL_TLS_CA, so ca-certificates is not installed either.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
# The whole workspace: Cargo needs every member's manifest (xtask, the
# test-support crate, the daemon's declared bench) even to build two
# binaries. .dockerignore keeps target/ and .git out.
COPY . .
# --locked: build exactly the dependency versions CI tested. The target
# directory is a cache mount, so the binaries are copied out in the same step.
# .cargo/config.toml comes along: it holds the settings the daemon's
# allocator (jemalloc) is built with. jemalloc's licence asks binary copies
# to carry its notice, which is taken from the source cargo just built.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p webhook-daemon -p webhook-admin \
 && install -D -m 0755 target/release/webhook-daemon /out/webhook-daemon \
 && install -D -m 0755 target/release/webhook-admin /out/webhook-admin \
 && install -D -m 0644 "$(ls -d /usr/local/cargo/registry/src/*/tikv-jemalloc-sys-*/jemalloc/COPYING | tail -n 1)" \
      /out/doc/jemalloc-COPYING \
 && /out/webhook-daemon --version \
 && /out/webhook-admin --version

FROM ${RUNTIME_IMAGE}
# A fixed, unprivileged account with no home and no shell.
RUN groupadd --system --gid 10001 gorge-webhook \
 && useradd --system --uid 10001 --gid gorge-webhook \
      --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin gorge-webhook
COPY --from=builder /out/webhook-daemon /out/webhook-admin /usr/local/bin/
COPY --chmod=0755 deploy/healthcheck.sh /usr/local/bin/gorge-webhook-probe
COPY LICENSE /usr/share/doc/gorge-webhook/LICENSE
COPY --from=builder /out/doc/jemalloc-COPYING /usr/share/doc/gorge-webhook/jemalloc-COPYING

LABEL org.opencontainers.image.title="gorge-webhook" \
      org.opencontainers.image.description="Delivers Phorge's queued Herald webhook requests" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gorge-webhook/gorge-webhook"

USER 10001:10001
EXPOSE 8160
# SIGTERM lets in-flight deliveries finish and write their results, for up
# to GORGE_WEBHOOK_SHUTDOWN_GRACE_SEC (30 s). Docker's default stop timeout
# is 10 s: run with `docker stop -t 45` / compose `stop_grace_period: 45s`.
STOPSIGNAL SIGTERM
# Liveness only: /healthz answers while the process serves HTTP. Whether it
# can reach Phorge's database is /readyz (`gorge-webhook-probe /readyz`,
# as deploy/compose.yaml uses it).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["gorge-webhook-probe", "/healthz"]
ENTRYPOINT ["webhook-daemon"]
