# easeoff container image: a release build on Debian 12, run as a non-root user on
# distroless/cc (glibc and libgcc_s, which the binary links; TLS is rustls, so no
# OpenSSL). Build from the repository root:
#
#   docker build -t easeoff:0.1.0 .
#
# The config is read from /etc/easeoff/easeoff.toml (mount yours there); the image
# ships config/generic-api.toml in that place so `docker run easeoff:0.1.0 check`
# shows a working example.
#
# .ci/docker-context runs the builder stage below in the context .dockerignore leaves.
# Base images are pinned by digest (multi-arch index); the tag is in the comment above
# each. To update: `docker buildx imagetools inspect IMAGE:TAG`, copy the Digest.

# rust:1.94.1-slim-bookworm (Cargo.toml's rust-version)
FROM rust:1.94.1-slim-bookworm@sha256:cf9dd0ec73e75f827fe59123fff9dc65af1a1c8363c3c31ee8d7f8ad0b6a5fb2 AS builder
WORKDIR /src

# A profile-guided build: an instrumented build runs `easeoff train` (HTTP/1.1 and h2c
# clients, pass-through, the dynamodb preset, SigV4 signing, gRPC and throttles,
# against in-process mocks, about 20 s), and the release build is optimised with that profile: about a
# fifth fewer instructions per proxied request (BENCHMARKS.md, "Profile-guided build").
# The optimised binary then runs a shorter training itself before it is installed.
# llvm-profdata, which merges the profile, comes with rustup's llvm-tools component.
ENV PGO=/src/target/pgo
RUN rustup component add llvm-tools

# Dependencies first, instrumented, against a placeholder crate, so this layer is
# reused until Cargo.toml, Cargo.lock, the benchmark or the example change. Cargo reads
# every target the manifest declares, so the [[bench]] and [[example]] sources come
# with it; only the binary is built.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY examples ./examples
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && RUSTFLAGS="-Cprofile-generate=$PGO/profiles" \
        cargo build --release --locked --target-dir "$PGO/build" \
    && rm -rf src "$PGO/build/release/easeoff" "$PGO/build/release/deps/easeoff-"* \
        "$PGO/build/release/deps/libeaseoff-"* "$PGO/build/release/.fingerprint/easeoff-"*

COPY src ./src
RUN RUSTFLAGS="-Cprofile-generate=$PGO/profiles" \
        cargo build --release --locked --target-dir "$PGO/build" \
    && rm -rf "$PGO/profiles" \
    && "$PGO/build/release/easeoff" train \
    && "$(rustc --print target-libdir)/../bin/llvm-profdata" \
        merge -o "$PGO/easeoff.profdata" "$PGO/profiles" \
    && RUSTFLAGS="-Cprofile-use=$PGO/easeoff.profdata" cargo build --release --locked \
    && target/release/easeoff train --requests 10000 \
    && install -D -m 0755 target/release/easeoff /out/easeoff

# gcr.io/distroless/cc-debian12:nonroot
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="easeoff" \
      org.opencontainers.image.description="A sidecar proxy that paces requests to throttled upstreams" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot" \
      org.opencontainers.image.base.digest="sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f"

COPY --from=builder /out/easeoff /usr/local/bin/easeoff
COPY config/generic-api.toml /etc/easeoff/easeoff.toml

# `easeoff check` and `easeoff run` without --config read the same file.
# EASEOFF_LISTEN: the shipped config's listener, on every interface so `docker run -p
# 8000:8000` reaches it (outside a container its default is 127.0.0.1:8000). The
# admin port listens on 0.0.0.0:9901 in the shipped config.
ENV EASEOFF_CONFIG=/etc/easeoff/easeoff.toml \
    EASEOFF_LISTEN=0.0.0.0:8000
# 8000: the upstream listener of the shipped configs; 9901: admin (/metrics, /healthz,
# /readyz, /status), which the shipped config binds on 0.0.0.0.
EXPOSE 8000 9901
# No shell in the image: easeoff itself makes the GET (exit 0 on 2xx, 1 otherwise).
# /readyz is 200 once every listener is bound, 503 while draining. A config with
# another admin port needs its own: docker run --health-cmd, or compose healthcheck.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["easeoff", "probe", "--timeout", "2s", "http://127.0.0.1:9901/readyz"]
# distroless's nonroot user, by number so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532

ENTRYPOINT ["easeoff"]
CMD ["run", "--config", "/etc/easeoff/easeoff.toml"]
