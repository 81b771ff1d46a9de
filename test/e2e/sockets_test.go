package e2e

import (
	"testing"

	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestListenersOnLoopbackOnly checks every listening socket of every process
// the harness started (control plane and our components) is on 127.0.0.1 or
// ::1, so a test run never exposes a port beyond the machine.
func TestListenersOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	pids, err := cluster.ControlPlanePIDs()
	if err != nil {
		t.Fatal(err)
	}
	for name, pid := range cluster.ComponentPIDs() {
		pids[name] = pid
	}
	// These must be listening; a check that found no sockets would prove
	// nothing.
	mustListen := []string{"scheduler", "topology-agent", "controller"}
	if cluster.Local() {
		mustListen = append(mustListen, "etcd", "kube-apiserver", "kube-controller-manager", "kwok-controller")
	}
	for _, name := range mustListen {
		if _, ok := pids[name]; !ok {
			t.Errorf("no pid for %s among %v", name, pids)
		}
	}
	for name, pid := range pids {
		addrs, err := framework.ListeningAddrs(pid)
		if err != nil {
			t.Errorf("%s (pid %d): %v", name, pid, err)
			continue
		}
		if len(addrs) == 0 {
			t.Errorf("%s (pid %d) has no listening socket", name, pid)
		}
		// A peer operator that cannot bind a listener to loopback (its
		// ports, from its flags) is the one exception; it may have been
		// started by an earlier test of this process.
		var wildcard map[int]bool
		if p, ok := cluster.Component(name); ok {
			wildcard = framework.WildcardPorts(name, p.Args())
		}
		for _, a := range addrs {
			if !a.IP.IsLoopback() && !(a.IP.IsUnspecified() && wildcard[a.Port]) {
				t.Errorf("%s (pid %d) listens on %s, want loopback only", name, pid, a.String())
			}
		}
		t.Logf("%s (pid %d) listens on %v", name, pid, addrs)
	}
}
