package topology_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPureCore keeps pkg/topology and everything under it a functional core:
// no package they link may come from Kubernetes (k8s.io, sigs.k8s.io) or
// from our API types, which would point an arrow back up from the core to
// the glue. The contract (pkg/lockstep) is standard library only and allowed.
func TestPureCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		if strings.Contains(dep, "k8s.io") || strings.HasPrefix(dep, "github.com/lockstep-dev/lockstep/pkg/apis") {
			t.Errorf("pkg/topology/... links %s", dep)
		}
		if strings.HasPrefix(dep, "github.com/lockstep-dev/lockstep/") &&
			!strings.HasPrefix(dep, "github.com/lockstep-dev/lockstep/pkg/topology") && dep != "github.com/lockstep-dev/lockstep/pkg/lockstep" {
			t.Errorf("pkg/topology/... links %s: the core may use only pkg/lockstep of ours", dep)
		}
	}
}
