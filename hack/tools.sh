#!/usr/bin/env bash
# Builds the test-cluster tools into bin/ from the Go module proxy.
#
# Versions come from go.mod files only: the product's go.mod (kube-apiserver,
# kube-controller-manager, kubectl, and the stock kube-scheduler that is the
# local cluster's default scheduler and the one the benchmark compares
# against, built from the same Kubernetes pin as the scheduler) and hack/tools/*/go.mod (etcd, kwok, controller-gen, and the peer
# operators the interop tests run: training-operator, kueue, ray-operator). A binary is
# rebuilt only when the module version recorded in its build info differs from
# the pinned one, so a warm bin/ costs a few `go version -m` calls.
#
# Usage: hack/tools.sh [BIN_DIR [GROUP]]
#
# With TOOLS_DRY_RUN=1 it only says what it would build (make first-run).
#
# GROUP is what to build: "cluster", the local cluster alone (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok,
# kwokctl: what make demo and make cluster-up run), or "all" (the default),
# which adds controller-gen and the peer operators of the interop tests.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/bin}
group=${2:-all}
case $group in
cluster | all) ;;
*)
	echo "tools: unknown group $group (want cluster or all)" >&2
	exit 2
	;;
esac
[ -n "${TOOLS_DRY_RUN:-}" ] || mkdir -p "$bin"

# pinned_version DIR MODULE: the version MODULE resolves to in DIR's module,
# after replace directives.
pinned_version() {
	(cd "$1" && go list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' "$2")
}

# built_version BINARY MODULE: the version of MODULE recorded in BINARY's build
# info, or nothing when the binary is missing or was built without it.
built_version() {
	[ -x "$1" ] || return 0
	go version -m "$1" 2>/dev/null | awk -v m="$2" '
		($1 == "mod" || $1 == "dep" || $1 == "=>") && $2 == m { v = $3 }
		END { print v }'
}

# go_binary_name PACKAGE: the file name go build gives PACKAGE's binary: its
# last path element, skipping a major-version suffix such as /v3.
go_binary_name() {
	local base=${1##*/}
	if [[ $base =~ ^v[0-9]+$ ]]; then
		base=${1%/*}
		base=${base##*/}
	fi
	echo "$base"
}

# ensure DIR MODULE LDFLAGS NAME=PACKAGE...: builds every NAME that is not
# already at MODULE's pinned version, in one go build so shared packages
# compile once. No -trimpath: it would change every build-cache key, so the
# Kubernetes packages go vet and our scheduler build already compiled would
# be compiled again.
ensure() {
	local dir=$1 module=$2 ldflags=$3
	shift 3
	local want pkgs=() names=()
	want=$(pinned_version "$dir" "$module")
	for spec in "$@"; do
		local name=${spec%%=*} pkg=${spec#*=}
		local have
		have=$(built_version "$bin/$name" "$module")
		if [ "$have" = "$want" ]; then
			echo "tools: $name $module@$want present"
			continue
		fi
		names+=("$name")
		pkgs+=("$pkg")
	done
	[ ${#pkgs[@]} -gt 0 ] || return 0
	if [ -n "${TOOLS_DRY_RUN:-}" ]; then
		echo "tools: would build ${names[*]} ($module@$want)"
		return 0
	fi
	echo "tools: building ${names[*]} ($module@$want)"
	local out
	out=$(mktemp -d)
	(cd "$dir" && go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}") || { rm -rf "$out"; return 1; }
	for i in "${!names[@]}"; do
		mv -f "$out/$(go_binary_name "${pkgs[$i]}")" "$bin/${names[$i]}"
	done
	rm -rf "$out"
}

kube_version=$(pinned_version "$root" k8s.io/kubernetes)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$kube_minor \
 -X k8s.io/component-base/version.gitTreeState=clean"

# Tool groups build side by side, at most TOOLS_JOBS (default 2) at once:
# each is its own module with its own copy of the Kubernetes libraries, so
# they share little, and a go build spends much of its time in a single
# linker or in one large package; a second build fills the idle core. Each
# group's output is printed whole when it ends.
jobs=${TOOLS_JOBS:-2}
pids=()
logs=()
spawn() {
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n || true
	done
	local log
	log=$(mktemp)
	# The status goes to a file: wait -n above may already have reaped it.
	# ensure runs in a subshell of its own so that errexit still stops it
	# at its first failure.
	(
		set +e
		(
			set -e
			ensure "$@"
		)
		echo $? >"$log.rc"
	) >"$log" 2>&1 &
	pids+=($!)
	logs+=("$log")
}
wait_all() {
	local failed=0 i
	wait "${pids[@]}" 2>/dev/null || true
	for i in "${!logs[@]}"; do
		cat "${logs[$i]}"
		[ "$(cat "${logs[$i]}.rc" 2>/dev/null)" = 0 ] || failed=1
		rm -f "${logs[$i]}" "${logs[$i]}.rc"
	done
	return $failed
}

kube_tools=(
	kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver
	kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
	kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler
	kubectl=k8s.io/kubernetes/cmd/kubectl
)
spawn "$root" k8s.io/kubernetes "$kube_ldflags" "${kube_tools[@]}"

spawn "$root/hack/tools/etcd" go.etcd.io/etcd/server/v3 "-s -w" \
	etcd=go.etcd.io/etcd/server/v3

spawn "$root/hack/tools/kwok" sigs.k8s.io/kwok "-s -w" \
	kwok=sigs.k8s.io/kwok/cmd/kwok \
	kwokctl=sigs.k8s.io/kwok/cmd/kwokctl

if [ "$group" = all ]; then
	spawn "$root/hack/tools/controller-gen" sigs.k8s.io/controller-tools "-s -w" \
		controller-gen=sigs.k8s.io/controller-tools/cmd/controller-gen

	# Peer operators for the interop e2e tests (docs/interop.md).
	spawn "$root/hack/tools/training-operator" github.com/kubeflow/training-operator "-s -w" \
		training-operator=github.com/kubeflow/training-operator/cmd/training-operator.v1

	# Kueue's controller-manager, for the interop tests (test/e2e/kueue_test.go).
	# Its own module: it compiles a second copy of the Kubernetes libraries at
	# k8s.io v0.35, so a cold build costs several minutes more.
	spawn "$root/hack/tools/kueue" sigs.k8s.io/kueue "-s -w" \
		kueue=sigs.k8s.io/kueue/cmd/kueue

	# KubeRay's ray-operator, for the interop tests (test/e2e/kuberay_test.go);
	# the e2e framework installs its CRDs from the same module
	# (framework.Cluster.InstallKubeRay), so a pin bump brings its CRDs along.
	spawn "$root/hack/tools/kuberay" github.com/ray-project/kuberay/ray-operator "-s -w" \
		ray-operator=github.com/ray-project/kuberay/ray-operator
fi
wait_all
