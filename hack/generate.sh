#!/usr/bin/env bash
# Regenerates code and manifests with controller-gen (built by hack/tools.sh).
#
#  - deploy/crds: CRDs of our API types (pkg/apis, once they exist) and the
#    PodGroup CRD generated from scheduler-plugins' own API types, so it always
#    matches the Coscheduling version we build.
#  - zz_generated.deepcopy.go beside our API types.
#
# Usage: hack/generate.sh [BIN_DIR]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/bin}
cd "$root"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin/controller-gen" crd:crdVersions=v1 \
	paths=sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1 \
	output:crd:dir="$out"
# The package also defines ElasticQuota, which belongs to CapacityScheduling;
# we do not run that plugin, so we do not install its CRD.
cp "$out/scheduling.x-k8s.io_podgroups.yaml" deploy/crds/

if [ -d pkg/apis ]; then
	"$bin/controller-gen" object paths=./pkg/apis/...
	"$bin/controller-gen" crd:crdVersions=v1,generateEmbeddedObjectMeta=true paths=./pkg/apis/... output:crd:dir=deploy/crds
fi
