# meshwrap's image: FROM scratch, nothing but the static binary.
#
#   docker build -t meshwrap .                    # builds the binary inside (rust:alpine)
#   docker build --target prebuilt -t meshwrap .  # uses target/x86_64-unknown-linux-musl/release/meshwrap
#                                                 # from the build context (.ci/release builds it)
#
# The webhook's image, also FROM scratch, with only /kubectl-meshwrap:
#
#   docker build --target webhook -t kubectl-meshwrap .
#   docker build --target webhook-prebuilt -t kubectl-meshwrap .   # target/x86_64-unknown-linux-musl/release/kubectl-meshwrap
#
# .ci/release passes VERSION, SOURCE (https://github.com/OWNER/NAME), REVISION
# (the git commit) and CREATED (RFC 3339, the commit's time) as --build-arg for
# the OCI labels.
#
# Use it as an init container (`meshwrap install /mesh` into an emptyDir), or
# copy /meshwrap into a training image (examples/docker/).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-alpine AS build
WORKDIR /src
COPY . .
# rust:alpine's native target is musl, so this binary is static; non-PIE, as
# .ci/release builds it (benches/LIMITS.md, "Startup overhead").
RUN cargo rustc --release --locked -p meshwrap --bin meshwrap -- -C relocation-model=static && \
    cp target/release/meshwrap /meshwrap

# The webhook (kubectl-meshwrap) is built the same way; ring's C needs gcc
# and musl-dev, which rust:alpine has.
FROM rust:${RUST_VERSION}-alpine AS build-webhook
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kubectl-meshwrap --bin kubectl-meshwrap && \
    cp target/release/kubectl-meshwrap /kubectl-meshwrap

FROM scratch AS webhook-base
ARG VERSION=0.1.0
ARG SOURCE=unknown
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kubectl-meshwrap" \
      org.opencontainers.image.description="meshwrap's admission webhook and manifest injector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0"
# The restricted profile's user; the webhook writes no file.
USER 65532:65532
ENTRYPOINT ["/kubectl-meshwrap"]

# TARGET: the Rust target the binary was built for, which names its folder
# (aarch64-unknown-linux-musl for linux/arm64, with --platform linux/arm64).
FROM webhook-base AS webhook-prebuilt
ARG TARGET=x86_64-unknown-linux-musl
COPY target/${TARGET}/release/kubectl-meshwrap /kubectl-meshwrap

FROM webhook-base AS webhook
COPY --from=build-webhook /kubectl-meshwrap /kubectl-meshwrap

# What both final stages of meshwrap's image share: labels and the entrypoint.
FROM scratch AS base
ARG VERSION=0.1.0
ARG SOURCE=unknown
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="meshwrap" \
      org.opencontainers.image.description="Wait for the service-mesh sidecar, run a command as PID 1, then quit the sidecar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["/meshwrap"]

# The final stage from a binary built outside the image.
FROM base AS prebuilt
ARG TARGET=x86_64-unknown-linux-musl
COPY target/${TARGET}/release/meshwrap /meshwrap

# The default final stage: the binary built above.
FROM base AS release
COPY --from=build /meshwrap /meshwrap
