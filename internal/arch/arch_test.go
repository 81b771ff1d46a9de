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
		why:       "shipped commands use pkg/localcluster, never the test tree",
	}, {
		// The binaries we ship in images: the harness (a local cluster,
		// its peers and fault proxy), envtest and the benchmarks are for
		// tests and developers only, and would bloat and widen them.
		pattern: "./cmd/scheduler ./cmd/controller ./cmd/topology-agent ./cmd/kubectl-lockstep",
		forbidden: []string{module + "/pkg/localcluster", module + "/pkg/util/envtest", "sigs.k8s.io/controller-runtime/pkg/envtest",
			module + "/pkg/bench", module + "/pkg/scheduler/perf", module + "/test/"},
		why: "shipped binaries never link the test harness, envtest or the benchmarks",
	}, {
		pattern:   "./pkg/...",
		forbidden: []string{module + "/test/", module + "/cmd/"},
		why:       "libraries do not reach into tests or commands",
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
