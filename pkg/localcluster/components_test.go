package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// scriptCluster is a Cluster without a cluster: its components are shell
// scripts in dir/bin, enough for the component bookkeeping.
func scriptCluster(t *testing.T, scripts map[string]string) *Cluster {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"bin", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, "bin", name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Cluster{Options: Options{RepoRoot: dir}, LogDir: filepath.Join(dir, "logs"), components: map[string]*Process{}}
}

// described is a describe function for a component running binary.
func described(name, binary string) func() (Component, error) {
	return func() (Component, error) { return Component{Name: name, Binary: binary}, nil }
}

// running returns the process of a component that must be running.
func running(t *testing.T, c *Cluster, name string) *Process {
	t.Helper()
	p, ok := c.Component(name)
	if !ok {
		t.Fatalf("component %s is not running", name)
	}
	return p
}

func waitExited(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit", p.Name)
	}
}

// TestReviveComponentsReportsAndRestartsTheDead: a suite component that
// exits on its own is reported with its exit status and the end of its log,
// and runs again afterwards; a healthy one and one killed on purpose are
// left alone.
func TestReviveComponentsReportsAndRestartsTheDead(t *testing.T) {
	c := scriptCluster(t, map[string]string{
		// The first run dies as a bind failure would; the second stays up.
		"flaky":  `if [ -e "$0.ran" ]; then exec sleep 600; fi; touch "$0.ran"; echo "starting"; echo "listen tcp 127.0.0.1:20001: bind: address already in use"; exit 3`,
		"steady": "exec sleep 600",
	})
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	err := c.startSuite(context.Background(),
		described("controller", "flaky"), described("scheduler", "steady"), described("topology-agent", "steady"))
	if err != nil {
		t.Fatal(err)
	}
	flaky, steady, killed := running(t, c, "controller"), running(t, c, "scheduler"), running(t, c, "topology-agent")
	if err := c.KillComponent("topology-agent"); err != nil {
		t.Fatal(err)
	}
	waitExited(t, flaky)

	err = c.ReviveComponents(context.Background())
	if err == nil {
		t.Fatal("ReviveComponents found nothing dead")
	}
	for _, want := range []string{
		"component controller exited unexpectedly (exit status 3)",
		"listen tcp 127.0.0.1:20001: bind: address already in use",
		"started it again",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("report lacks %q:\n%v", want, err)
		}
	}
	for _, unwanted := range []string{"scheduler", "topology-agent"} {
		if strings.Contains(err.Error(), unwanted) {
			t.Errorf("report names %s, which did not die on its own:\n%v", unwanted, err)
		}
	}
	again, ok := c.Component("controller")
	if !ok || again == flaky {
		t.Fatalf("controller not started again (running: %v)", ok)
	}
	if exited, _ := again.Exited(); exited {
		t.Error("the restarted controller exited")
	}
	if p, ok := c.Component("scheduler"); !ok || p != steady {
		t.Error("the healthy scheduler was replaced")
	}
	if _, ok := c.Component("topology-agent"); ok {
		t.Errorf("the killed agent (pid %d) was started again", killed.Pid())
	}
	if err := c.ReviveComponents(context.Background()); err != nil {
		t.Errorf("second look: %v", err)
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	var long strings.Builder
	for i := range 20000 { // about 200 KiB, beyond logTail's window
		fmt.Fprintf(&long, "line %05d\n", i)
	}
	tests := []struct {
		name, content string
		n             int
		want          string
	}{
		{"short log", "a\nb\nc\n", 2, "b\nc"},
		{"fewer lines than asked", "only\n", 5, "only"},
		{"no trailing newline", "a\nb", 1, "b"},
		{"long log", long.String(), 3, "line 19997\nline 19998\nline 19999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := logTail(path, tc.n); got != tc.want {
				t.Errorf("logTail = %q, want %q", got, tc.want)
			}
		})
	}
	if got := logTail(filepath.Join(dir, "missing"), 3); !strings.HasPrefix(got, "(log unreadable:") {
		t.Errorf("logTail of a missing file = %q", got)
	}
}

// TestRenderSchedulerConfigLeaderElection: without a LeaderElection the
// rendered scheduler has leader election off; with one it is on, on the
// deployed Lease, with the given durations.
func TestRenderSchedulerConfigLeaderElection(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := DeployedSchedulerConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: t.TempDir()}
	le := LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	for _, tc := range []struct {
		name string
		le   *LeaderElection
		want map[string]any
	}{
		{"single", nil, map[string]any{"leaderElect": false}},
		{"replica", &le, map[string]any{
			"leaderElect": true, "resourceName": SchedulerLeaseName, "resourceNamespace": SchedulerLeaseNamespace,
			"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms",
		}},
	} {
		path, err := c.renderSchedulerConfig(tc.name, "kubeconfig", cfg, tc.le, SchedulerClientRate)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rendered map[string]any
		if err := yaml.Unmarshal(data, &rendered); err != nil {
			t.Fatal(err)
		}
		if got := rendered["leaderElection"]; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: leaderElection %v, want %v", tc.name, got, tc.want)
		}
	}
	// The deployed configuration itself is left as it was.
	if got := cfg["leaderElection"].(map[string]any)["leaseDuration"]; got != nil {
		t.Errorf("rendering changed the input: leaseDuration %v", got)
	}
}
