# syntax=docker/dockerfile:1
#
# autocapture's image: one static binary (CGO_ENABLED=0; the SQLite driver,
# modernc.org/sqlite, is pure Go) on distroless static, run as the distroless
# nonroot user. The shipped vLLM playbooks are embedded in the binary.
#
#   docker build -t autocapture .
#
# What it reads and keeps, and how to run it: README.md, "Deploy".
# e2e/deploy/dockerfile_test.go checks this file's structure and runs its go build.

# Pinned to go.mod's go version (the test checks they agree).
FROM golang:1.26.8-bookworm AS builder
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Set by BuildKit for the platform built for (docker buildx build --platform ...).
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/autocapture ./cmd/autocapture
# storage.path's mount point, owned by the runtime user: a fresh named volume
# takes its owner from here, and distroless has no shell to mkdir with.
RUN mkdir -p /out/var/lib/autocapture && chown 65532:65532 /out/var/lib/autocapture

# vllmsim, the stand-in vLLM of deploy/compose/compose.yaml: only built for
# its target (docker build --target vllmsim, or compose's build.target); the
# default build stops at the autocapture stage below and never runs this.
FROM builder AS vllmsim-builder
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/vllmsim ./cmd/vllmsim
# --profiler-dir's mount point, owned by the runtime user, so a fresh named
# volume shared with the agent is writable.
RUN mkdir -p /out/profiles && chown 65532:65532 /out/profiles

FROM gcr.io/distroless/static-debian12:nonroot AS vllmsim
COPY --from=vllmsim-builder /out/vllmsim /vllmsim
COPY --from=vllmsim-builder --chown=65532:65532 /out/profiles /profiles
USER 65532:65532
# vLLM's port; --web.listen-address=0.0.0.0:8000 in a container.
EXPOSE 8000
ENTRYPOINT ["/vllmsim"]
CMD ["--web.listen-address=0.0.0.0:8000"]

# The image (the last stage, the default target).
FROM gcr.io/distroless/static-debian12:nonroot AS autocapture
COPY --from=builder /out/autocapture /autocapture
COPY --from=builder --chown=65532:65532 /out/var/lib/autocapture /var/lib/autocapture
COPY deploy/docker/autocapture.yaml /etc/autocapture/autocapture.yaml
# distroless's nonroot (65532); no shell, no package manager.
USER 65532:65532
# web.listen_address of the image's config.
EXPOSE 9095
# storage.path: the SQLite run store, local artifacts and the S3 upload spool,
# which must survive a restart.
VOLUME ["/var/lib/autocapture"]
# SIGTERM: no new webhooks, running steps get runs.shutdown_grace (20 s), so
# give the container more than Docker's 10 s (docker run --stop-timeout 40).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/autocapture"]
CMD ["serve", "--config.file=/etc/autocapture/autocapture.yaml"]
# No shell or curl in the image: the binary probes /-/healthy on the address
# the same config names.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/autocapture", "healthcheck", "--config.file=/etc/autocapture/autocapture.yaml", "--timeout=4s"]
