package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// TestExitedControlPlaneComponentRestarts: kube-controller-manager exits
// (as it does when it cannot renew its leader lease in time on a loaded
// machine); the harness reports it with the end of its log before the
// next test and starts it again, as a kubelet restarts a static pod, so
// the next namespace still gets its default ServiceAccount, which only
// kube-controller-manager makes. Without the restart one exit failed every
// later test of the shard.
func TestExitedControlPlaneComponentRestarts(t *testing.T) {
	// Against a cluster the harness does not run, there are no pids and
	// the test fails: the restart it guards cannot be checked there.
	pids, err := cluster.ControlPlanePIDs()
	if err != nil {
		t.Fatal(err)
	}
	const kcm = "kube-controller-manager"
	pid, ok := pids[kcm]
	if !ok {
		t.Fatalf("no pid for %s among %v", kcm, pids)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(context.Background(), 50*time.Millisecond, 10*time.Second, kcm+" gone", func(context.Context) (bool, error) {
		return !localcluster.ProcessRunning(pid), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = cluster.ReviveComponents(context.Background())
	if err == nil {
		t.Fatalf("ReviveComponents did not notice %s exited", kcm)
	}
	t.Logf("the harness reported: %v", err)
	for _, want := range []string{"control-plane component " + kcm + " exited unexpectedly", "started " + kcm + " again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("report lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "log unreadable") {
		t.Errorf("report quotes no log:\n%v", err)
	}
	after, err := cluster.ControlPlanePIDs()
	if err != nil {
		t.Fatal(err)
	}
	if after[kcm] == pid || after[kcm] == 0 {
		t.Errorf("%s pid %d after the restart, want a new process", kcm, after[kcm])
	}
	// NewNamespace waits for the namespace's default ServiceAccount.
	cluster.NewNamespace(t)
}
