package localcluster

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

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
	le := FastLeaderElection()
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
		path, err := c.renderSchedulerConfig(tc.name, "kubeconfig", cfg, tc.le)
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
