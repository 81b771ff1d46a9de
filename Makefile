# Lockstep build, test and local-cluster targets. Everything is built from the
# Go module proxy into bin/; nothing else needs installing besides Go and gcc.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

ROOT := $(CURDIR)
BIN := $(ROOT)/bin
GO ?= go
# cgo is required: go-nvml does not build without it.
export CGO_ENABLED := 1

# Our binaries: one per cmd/ directory with a main package. Each is named
# lockstep-<dir> in bin/ unless the directory name already says what it is.
COMMANDS := $(patsubst cmd/%/main.go,%,$(wildcard cmd/*/main.go))
# What a local cluster (make demo, make cluster-up) runs: our components,
# the demo and the kubectl plugin to look at it; not the benchmark, which
# links the in-process scheduler harness, nor the fabric importer.
CLUSTER_COMMANDS := scheduler controller topology-agent kubectl-lockstep lockstep-demo
MODEL ?= test/e2e/models/hgx-32.yaml
# Local cluster made by cluster-up; cluster-down removes it.
CLUSTER_DIR ?= $(ROOT)/.cluster
# The e2e suite runs in E2E_SHARDS shards side by side, each on a cluster of
# its own (hack/e2eshard); E2E_RUN selects tests by regexp; E2E_TIMEOUT
# bounds each shard; E2E_UPDATE=1 records the run's durations in
# test/e2e/shards.txt, which balances the shards.
E2E_RUN ?= .
E2E_TIMEOUT ?= 45m
E2E_SHARDS ?= 4
E2E_UPDATE ?=

.PHONY: all
all: build

##@ Build

# go-build builds the commands named in $(1) with one go build, so shared
# packages compile once and the links run side by side. It writes to
# bin/.cmd/, where go build finds the binaries it made last time and skips
# those that are up to date; bin/ gets them under their lockstep- names as
# hard links.
define go-build
	@mkdir -p $(BIN)/.cmd
	$(GO) build -o $(BIN)/.cmd/ $(addprefix ./cmd/,$(1))
	@for c in $(1); do \
	  case $$c in lockstep-*|kubectl-*) out=$$c ;; *) out=lockstep-$$c ;; esac; \
	  ln -f $(BIN)/.cmd/$$c $(BIN)/$$out; \
	done
endef

.PHONY: build
build: ## Build our binaries into bin/.
	$(call go-build,$(COMMANDS))

.PHONY: build-cluster
build-cluster: ## Build only what a local cluster runs ($(CLUSTER_COMMANDS)) into bin/.
	$(call go-build,$(CLUSTER_COMMANDS))

.PHONY: tools
tools: ## Build every tool (cluster tools, controller-gen, peer operators) into bin/, skipping those at the pinned version.
	hack/tools.sh $(BIN) all

.PHONY: cluster-tools
cluster-tools: ## Build only what a local cluster runs (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok) into bin/.
	hack/tools.sh $(BIN) cluster

.PHONY: first-run
first-run: ## Say what make demo and make test would build first on this machine (nothing is built).
	@echo "make demo and make cluster-up build $(CLUSTER_COMMANDS) (go build) and:"
	@TOOLS_DRY_RUN=1 hack/tools.sh $(BIN) cluster | sed 's/^/  /'
	@echo "make test, make e2e and make bench build our binaries and:"
	@TOOLS_DRY_RUN=1 hack/tools.sh $(BIN) all | sed 's/^/  /'
	@echo "Only lines saying 'would build' cost time; 'present' tools are kept."

.PHONY: generate
generate: tools ## Regenerate deepcopy code and CRD manifests with controller-gen.
	hack/generate.sh $(BIN)

##@ Test

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './bin/*' -not -path './.*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Unit tests run under the race detector: the scheduler plugin's books, the
# controller's expectations and the agent's workers are shared between
# goroutines.
UNIT_FLAGS ?= -race

.PHONY: unit
unit: tools ## Unit tests under -race (everything but test/e2e; the deploy/ render test needs bin/kubectl, the envtest ones etcd and kube-apiserver).
	$(GO) test $(UNIT_FLAGS) $$($(GO) list ./... | grep -v '/test/e2e$$')

# How long each fuzz target runs under make fuzz.
FUZZ_TIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_TIME each (beyond its seeds, which make unit runs).
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for target in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz: $$pkg $$target ($(FUZZ_TIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_TIME) $$pkg; \
	  done; \
	done

.PHONY: e2e
e2e: tools build ## End-to-end tests on a local KWOK cluster (or $KUBECONFIG's cluster when set).
	hack/e2e.sh -shards $(E2E_SHARDS) -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' $(if $(E2E_UPDATE),-update)

.PHONY: kind-nodes
kind-nodes: ## Regenerate deploy/kind/nodes.yaml (the fake nodes of test/e2e/models/hgx-32.yaml).
	$(GO) run ./hack/kindnodes --model test/e2e/models/hgx-32.yaml > deploy/kind/nodes.yaml

.PHONY: image-check
image-check: ## Build the images' binaries as the Dockerfile does (hack/build-image.sh) and verify them (static, -trimpath, NVML not linked, non-root USER).
	hack/build-image.sh $(ROOT)/_output/image
	$(GO) run ./hack/imagecheck --dir $(ROOT)/_output/image --dockerfile Dockerfile

# make test runs the e2e suite beside the other checks: the suite's
# clusters mostly wait (grace periods, backoffs, leases), which leaves a core
# for compiling and running the unit tests. The checks run one after another.
.PHONY: test
test: tools build ## Everything CI runs: lint, unit tests and image check, beside the e2e tests.
	$(MAKE) --no-print-directory -j2 e2e checks

.PHONY: checks
checks: ## lint, unit and image-check, one after another.
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory image-check

##@ Local cluster

.PHONY: cluster-up
cluster-up: cluster-tools build-cluster ## Start a local cluster with MODEL's nodes and our components; prints the KUBECONFIG path.
	$(GO) run ./hack/localcluster up --dir $(CLUSTER_DIR) --model $(MODEL) --bin $(BIN)

.PHONY: cluster-down
cluster-down: ## Stop the local cluster started by cluster-up.
	$(GO) run ./hack/localcluster down --dir $(CLUSTER_DIR) --bin $(BIN)

# Demo cluster made by demo; demo-down removes it. Apart from cluster-up's
# .cluster/ so one never removes the other's files under running processes.
DEMO_DIR ?= $(ROOT)/.demo

.PHONY: demo
demo: cluster-tools build-cluster ## Start a local cluster of MODEL, run the example jobs on it and show where they landed (table and SVG).
	$(BIN)/lockstep-demo up --dir $(DEMO_DIR) --model $(MODEL) --bin $(BIN) \
	  --examples deploy/examples --kubeflow deploy/examples/kubeflow

.PHONY: demo-down
demo-down: ## Stop and remove the cluster started by demo.
	$(GO) run ./cmd/lockstep-demo down --dir $(DEMO_DIR) --bin $(BIN)

##@ Benchmark

# Where make bench writes report.md, results.json and the plots: the
# committed run, so a make bench shows in git diff what changed.
BENCH_OUT ?= docs/benchmarks/results
# Where make bench-scale writes its partial report (never the committed one).
BENCH_SCALE_OUT ?= $(ROOT)/_output/bench-scale
BENCH_MODEL ?= test/e2e/models/hgx-32-oversubscribed.yaml
BENCH_TRACE ?= test/e2e/traces/default.csv
# The trace of two priority classes make bench replays after BENCH_TRACE, for
# the report's Priorities table; empty skips it. make bench-priority replays
# only it, into BENCH_PRIORITY_OUT (never the committed report).
BENCH_PRIORITY_TRACE ?= test/e2e/traces/priority.csv
BENCH_PRIORITY_OUT ?= $(ROOT)/_output/bench-priority
BENCH_SCALE_MODEL ?= test/e2e/models/scale-5000.yaml
# How the BENCH_TRACE replays' pods get GPUs: DevicePlugin (nvidia.com/gpu, the
# model as written) and DRA (the same model with every pool on NVIDIA's DRA
# driver, jobs claiming GPUs through ResourceClaimTemplates), each replayed
# with every scheduler, DRA after the device plugin, side by side in the report.
BENCH_GPU_DRIVERS ?= DevicePlugin,DRA
# Extra lockstep-bench flags, e.g. BENCH_FLAGS=--schedulers=lockstep.
BENCH_FLAGS ?=

# Rounds of each scale run (KWOK, on its one cluster, and in process,
# internal/perf), each running kube-scheduler then Lockstep; the report gives
# per-round numbers and medians.
BENCH_ROUNDS ?= 3
# make bench-scale's in-process run: the 100k-GPU model, its burst (mixed:
# gangs of 8 to 4,096 GPUs beside single-pod jobs; gangs: make bench's
# 8-GPU-pod gangs, kept for its committed numbers); BENCH_ROUNDS rounds. With
# BENCH_SCALE_PROFILES=true it writes cpu-<scheduler>-round<N>.pprof (the
# scheduler's start to its last bind) and heap-<scheduler>-round<N>.pprof
# (once every pod is bound) into BENCH_SCALE_OUT; read them with
# go tool pprof -top -nodecount=15 FILE.
BENCH_INPROCESS_MODEL ?= test/e2e/models/gb200-100k.yaml
BENCH_INPROCESS_BURST ?= mixed
BENCH_SCALE_PROFILES ?= true

.PHONY: bench
bench: tools build ## Replay BENCH_TRACE on BENCH_MODEL with kube-scheduler, Coscheduling and Lockstep, with the device plugin then DRA (BENCH_GPU_DRIVERS), then BENCH_PRIORITY_TRACE, sweep Lockstep's preferredWait, then time a gang burst on BENCH_SCALE_MODEL (KWOK and in process); results in BENCH_OUT.
	$(BIN)/lockstep-bench --bin $(BIN) --model $(BENCH_MODEL) --trace $(BENCH_TRACE) \
	  --gpu-drivers $(BENCH_GPU_DRIVERS) \
	  --priority-trace=$(BENCH_PRIORITY_TRACE) \
	  --scale-model $(BENCH_SCALE_MODEL) --scale-rounds $(BENCH_ROUNDS) \
	  --inprocess-model $(BENCH_SCALE_MODEL) --inprocess-rounds $(BENCH_ROUNDS) \
	  --out $(BENCH_OUT) $(BENCH_FLAGS)

.PHONY: bench-priority
bench-priority: tools build ## Only the priority replay: BENCH_PRIORITY_TRACE on BENCH_MODEL with kube-scheduler, Coscheduling and Lockstep (BENCH_FLAGS=--schedulers=... for fewer); results in BENCH_PRIORITY_OUT.
	$(BIN)/lockstep-bench --bin $(BIN) --model $(BENCH_MODEL) --skip-replay --sweep-preferred-wait= \
	  --priority-trace=$(BENCH_PRIORITY_TRACE) --out $(BENCH_PRIORITY_OUT) $(BENCH_FLAGS)

.PHONY: bench-scale
bench-scale: tools build ## Only the in-process scale run: kube-scheduler and Lockstep in turn in one process, the BENCH_INPROCESS_BURST burst on BENCH_INPROCESS_MODEL, BENCH_ROUNDS rounds, CPU and heap profiles when BENCH_SCALE_PROFILES; results in BENCH_SCALE_OUT.
	$(BIN)/lockstep-bench --bin $(BIN) --skip-replay --inprocess-model $(BENCH_INPROCESS_MODEL) \
	  --inprocess-burst $(BENCH_INPROCESS_BURST) --inprocess-rounds $(BENCH_ROUNDS) \
	  --inprocess-profiles=$(BENCH_SCALE_PROFILES) --sweep-preferred-wait= --out $(BENCH_SCALE_OUT) $(BENCH_FLAGS)

##@ Other

.PHONY: clean
clean: ## Remove build outputs (keeps nothing in bin/, so tools rebuild).
	rm -rf $(BIN) _artifacts _output

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
