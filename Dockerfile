# easeoff container image: a release build on Debian 12, run as a non-root user on
# distroless/cc (glibc and libgcc_s, which the binary links; TLS is rustls, so no
# OpenSSL). Build from the repository root:
#
#   docker build -t easeoff:0.1.0 .
#
# The config is read from /etc/easeoff/easeoff.toml (mount yours there); the image
# ships config/generic-api.toml in that place so `docker run easeoff:0.1.0 check`
# shows a working example.

ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-slim-bookworm AS builder
WORKDIR /src

# Dependencies first, against a placeholder crate, so this layer is reused until
# Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src target/release/easeoff target/release/deps/easeoff-* \
        target/release/deps/libeaseoff-* target/release/.fingerprint/easeoff-*

COPY src ./src
RUN cargo build --release --locked \
    && install -D -m 0755 target/release/easeoff /out/easeoff

FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="easeoff" \
      org.opencontainers.image.description="A sidecar proxy that paces requests to throttled upstreams" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=builder /out/easeoff /usr/local/bin/easeoff
COPY config/generic-api.toml /etc/easeoff/easeoff.toml

# `easeoff check` and `easeoff run` without --config read the same file.
ENV EASEOFF_CONFIG=/etc/easeoff/easeoff.toml
# 8000: the upstream listener of the shipped configs; 9901: admin (/metrics, /healthz,
# /readyz, /status), which the shipped config binds on 0.0.0.0.
EXPOSE 8000 9901
# distroless's nonroot user, by number so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532

ENTRYPOINT ["easeoff"]
CMD ["run", "--config", "/etc/easeoff/easeoff.toml"]
