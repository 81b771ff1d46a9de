// Package arch holds the tests that keep the arrows between our packages
// pointing the way docs/architecture.md draws them.
package arch

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/lockstep-dev/lockstep"

// deps lists every package the space-separated patterns link (go list
// -deps), tests excluded.
func deps(t *testing.T, pattern string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps"}, strings.Fields(pattern)...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, out)
	}
	list := strings.Fields(string(out))
	if len(list) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pattern)
	}
	return list
}

func TestArrows(t *testing.T) {
	tests := []struct {
		pattern string
		// forbidden are package path prefixes the pattern must not link.
		forbidden []string
		why       string
	}{{
		pattern:   "./cmd/...",
		forbidden: []string{module + "/test/"},
		why:       "commands use pkg/localcluster and internal/perf, never the test tree",
	}, {
		// The binaries we ship in images: the harness (a local cluster),
		// the e2e framework on top of it, envtest and the benchmarks are
		// for tests and developers only, and would bloat and widen them.
		pattern: "./cmd/scheduler ./cmd/controller ./cmd/topology-agent ./cmd/kubectl-lockstep",
		forbidden: []string{module + "/pkg/localcluster", module + "/pkg/util/envtest", "sigs.k8s.io/controller-runtime/pkg/envtest",
			module + "/pkg/bench", module + "/internal/perf", module + "/test/"},
		why: "shipped binaries never link the test harness, envtest or the benchmarks",
	}, {
		// make demo, make cluster-up and the benchmark link the harness:
		// what only the e2e suite needs stays in test/e2e/framework, and
		// the in-process benchmark's envtest in internal/perf.
		pattern:   "./pkg/localcluster",
		forbidden: []string{module + "/test/", module + "/internal/perf", module + "/pkg/util/envtest", "sigs.k8s.io/controller-runtime/pkg/envtest"},
		why:       "the harness does not link the e2e framework or envtest",
	}, {
		pattern:   "./pkg/...",
		forbidden: []string{module + "/test/", module + "/cmd/", module + "/internal/"},
		why:       "libraries do not reach into tests, commands or developer tools",
	}, {
		pattern:   "./cmd/controller",
		forbidden: []string{"k8s.io/kubernetes/pkg/scheduler", module + "/pkg/scheduler"},
		why:       "the controller stands alone: it shares the contract (pkg/lockstep), not the scheduler",
	}, {
		pattern:   "./cmd/kubectl-lockstep",
		forbidden: []string{"k8s.io/kubernetes/pkg/scheduler", module + "/pkg/scheduler", "sigs.k8s.io/controller-runtime"},
		why:       "the kubectl plugin stays a small client",
	}, {
		pattern:   "./pkg/topology/...",
		forbidden: []string{"k8s.io/", "sigs.k8s.io/", module + "/pkg/apis", module + "/pkg/agent", module + "/pkg/controller", module + "/pkg/scheduler"},
		why:       "the functional core imports only the standard library and the contract",
	}, {
		// The gang manager is what core.Manager is to Coscheduling: the
		// plugin calls it, never the other way, and it keeps gangs, not the
		// framework's view of nodes.
		pattern:   "./pkg/scheduler/gangmanager",
		forbidden: []string{module + "/pkg/scheduler/topologyplacement", module + "/pkg/scheduler/coscheduling", "k8s.io/kubernetes/pkg/scheduler"},
		why:       "the gang manager imports neither the plugins nor the scheduler framework",
	}, {
		// The node view reads held capacity through its two-method Held
		// interface, which the gang manager's books satisfy: neither
		// knows the other's internals, and the plugin joins them. Its
		// tests may use the real books (go list -deps leaves tests out).
		pattern:   "./pkg/scheduler/nodeview",
		forbidden: []string{module + "/pkg/scheduler/gangmanager", module + "/pkg/scheduler/topologyplacement", module + "/pkg/scheduler/coscheduling"},
		why:       "the node view imports neither the gang manager nor the plugins",
	}, {
		// Gang preemption reads candidates through the gang manager and
		// the node view and evicts through the API: the plugin decides
		// (placement.Preempt) and calls it, never the other way.
		pattern:   "./pkg/scheduler/gangpreemption",
		forbidden: []string{module + "/pkg/scheduler/topologyplacement", module + "/pkg/scheduler/coscheduling"},
		why:       "gang preemption does not import the plugins",
	}, {
		pattern:   "./pkg/lockstep",
		forbidden: []string{"k8s.io/", "sigs.k8s.io/", module + "/pkg/topology", module + "/pkg/apis"},
		why:       "the contract is standard library only, so the core can import it",
	}}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			for _, dep := range deps(t, tc.pattern) {
				for _, f := range tc.forbidden {
					if strings.HasPrefix(dep, f) {
						t.Errorf("%s links %s: %s", tc.pattern, dep, tc.why)
					}
				}
			}
		})
	}
}

// TestPluginShape: the TopologyPlacement plugin carries out its decisions
// through the gang manager and gang preemption and reads the nodes through
// the node view (the arrows above keep them from importing it back).
func TestPluginShape(t *testing.T) {
	for _, want := range []string{module + "/pkg/scheduler/gangmanager", module + "/pkg/scheduler/gangpreemption", module + "/pkg/scheduler/nodeview", module + "/pkg/topology/placement"} {
		found := false
		for _, dep := range deps(t, "./pkg/scheduler/topologyplacement") {
			found = found || dep == want
		}
		if !found {
			t.Errorf("./pkg/scheduler/topologyplacement does not link %s", want)
		}
	}
}
