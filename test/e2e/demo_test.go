package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// TestDemo runs make demo's own path: bin/lockstep-demo up with the
// Makefile's arguments, on a local cluster of its own, as a newcomer's
// first run does. Every example (ours and the converted Kubeflow ones) must
// end placed or held on purpose with its reason (the Kueue-queued manifest,
// with no Kueue in the demo), the command must exit 0 and draw the
// picture, and down must remove the cluster.
func TestDemo(t *testing.T) {
	if !cluster.Local() {
		t.Skip("the demo starts a local cluster of its own; this run uses $KUBECONFIG's")
	}
	// Under the e2e temp-dir prefix with this process as owner, so that
	// hack/e2e.sh reaps the detached demo cluster if the test is killed.
	base, err := os.MkdirTemp("", localcluster.TempDirPrefix+"demo-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, localcluster.OwnerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "demo")
	demo := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(cluster.RepoRoot, "bin", "lockstep-demo"), args...)
		cmd.Dir = cluster.RepoRoot
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := demo("down", "--dir", dir, "--bin", "bin"); err != nil {
			t.Errorf("lockstep-demo down: %v\n%s", err, out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("lockstep-demo down left %s behind", dir)
		}
		os.RemoveAll(base)
	})

	out, err := demo("up", "--dir", dir, "--model", "test/e2e/models/hgx-32.yaml", "--bin", "bin",
		"--examples", "deploy/examples", "--kubeflow", "deploy/examples/kubeflow")
	t.Logf("lockstep-demo up:\n%s", out)
	if err != nil {
		t.Fatalf("lockstep-demo up: %v", err)
	}
	// The last progress line counts every submitted job as placed or held,
	// and only the Kueue-queued one as held.
	var submitted, placed, total, held int
	for _, line := range strings.Split(out, "\n") {
		if n, _ := fmt.Sscanf(line, "submitted %d jobs", &submitted); n == 1 {
			continue
		}
		fmt.Sscanf(line, "%d/%d jobs placed, %d held", &placed, &total, &held)
	}
	if submitted == 0 || total != submitted || placed+held != submitted || held != 1 {
		t.Errorf("%d jobs submitted; last count %d/%d placed, %d held: want all placed but the one queued for Kueue", submitted, placed, total, held)
	}
	for _, want := range []string{
		"JOB ", "EFFICIENCY",
		// The Kueue-queued example is shown held, with the controller's reason.
		"is held: WaitingForAdmission",
		"Placement picture:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if strings.Contains(out, "only ") && strings.Contains(out, "jobs placed and running") {
		t.Error("the demo reported jobs neither placed nor held")
	}
	if _, err := os.Stat(filepath.Join(dir, "placement.svg")); err != nil {
		t.Errorf("no placement picture: %v", err)
	}
}
