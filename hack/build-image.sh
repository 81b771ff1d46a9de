#!/usr/bin/env bash
# Builds the binaries the container images ship, with the flags the images
# use. The Dockerfile runs this script and so does `make image-check`, so the
# checked build and the shipped build cannot drift apart.
#
#   lockstep-scheduler, lockstep-controller  CGO_ENABLED=0: static, for a
#                                            distroless/static base.
#   lockstep-topology-agent                  CGO_ENABLED=1: go-nvml needs cgo;
#                                            it dlopens libnvidia-ml.so.1 at run
#                                            time (the host driver, injected by
#                                            the NVIDIA container runtime), so
#                                            only libc is linked.
#
# -trimpath keeps build paths out of the binaries (reproducible builds, no
# local paths in stack traces); -s -w drops the symbol and DWARF tables.
#
# Usage: hack/build-image.sh OUTDIR
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$root"

ldflags="-s -w"
build() {
	local cgo=$1 name=$2 pkg=$3
	echo "CGO_ENABLED=$cgo go build -trimpath -ldflags '$ldflags' -o $out/$name $pkg"
	CGO_ENABLED=$cgo go build -trimpath -ldflags "$ldflags" -o "$out/$name" "$pkg"
}

build 0 lockstep-scheduler ./cmd/scheduler
build 0 lockstep-controller ./cmd/controller
build 1 lockstep-topology-agent ./cmd/topology-agent
