# syntax=docker/dockerfile:1
#
# Lockstep's container images: one Dockerfile, one image per component.
#
#   docker build --target scheduler      -t lockstep-scheduler .
#   docker build --target controller     -t lockstep-controller .
#   docker build --target topology-agent -t lockstep-topology-agent .
#
# Why one image per component rather than one image with every binary: the
# agent is a cgo binary that needs glibc (base-debian12) while the scheduler
# and controller are static (static-debian12, no libc at all); and the agent
# runs on every GPU node with host mounts, so its image should carry nothing
# but the agent. Each image holds exactly one binary, and a CVE in one base
# does not force rolling the others. The build stage is shared, so all three
# compile once.
#
# Base images are pinned by tag. Pin them by digest too when publishing
# (`crane digest gcr.io/distroless/static-debian12:nonroot`); no digest is
# written here because none was verified from this repository's machines.
# The builder is Debian 12 (bookworm) like the runtime bases, so the agent
# links against the same glibc (2.36) it runs with.
#
# hack/build-image.sh is the one place the build flags live; `make
# image-check` runs it outside Docker and verifies what it produces.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY hack/build-image.sh hack/
RUN hack/build-image.sh /out

# The scheduler and controller are static binaries: no libc, no shell.
FROM gcr.io/distroless/static-debian12:nonroot AS scheduler
COPY --from=build /out/lockstep-scheduler /usr/local/bin/lockstep-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lockstep-scheduler"]

FROM gcr.io/distroless/static-debian12:nonroot AS controller
COPY --from=build /out/lockstep-controller /usr/local/bin/lockstep-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lockstep-controller"]

# The agent links glibc only; libnvidia-ml.so.1 is not in the image: go-nvml
# dlopens it at run time from the host driver, which the NVIDIA container
# runtime mounts in (runtimeClassName: nvidia in deploy/default). The image
# user is non-root; the DaemonSet runs it as root because the kubelet's
# pod-resources socket is root-only (see deploy/default/agent.yaml).
FROM gcr.io/distroless/base-debian12:nonroot AS topology-agent
COPY --from=build /out/lockstep-topology-agent /usr/local/bin/lockstep-topology-agent
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lockstep-topology-agent"]
