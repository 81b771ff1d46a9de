package localcluster

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestNodeLifecycleTimings checks the node heartbeat and lifecycle timings
// kwokctl is given: upstream's by default (kwokctl's own heartbeatFactor 5
// would stretch them fivefold), the scale option's grace otherwise.
func TestNodeLifecycleTimings(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	type timings struct {
		Options map[string]any
		Args    []string
	}
	cases := []struct {
		name  string
		grace time.Duration
		want  timings
	}{
		{name: "upstream defaults", want: timings{
			Options: map[string]any{
				"heartbeatFactor":                                         float64(1),
				"nodeLeaseDurationSeconds":                                float64(40),
				"kubeControllerManagerNodeMonitorPeriodMilliseconds":      float64(5000),
				"kubeControllerManagerNodeMonitorGracePeriodMilliseconds": float64(50000),
				"kubeAdmission":                                           true,
			},
			Args: []string{"kube-api-qps=200", "kube-api-burst=400", "leader-elect=false"},
		}},
		{name: "scale models", grace: ScaleNodeMonitorGracePeriod, want: timings{
			Options: map[string]any{"kubeAdmission": true},
			Args:    []string{"kube-api-qps=200", "kube-api-burst=400", "leader-elect=false", "node-monitor-grace-period=5m0s"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := newKWOKCluster(root, t.TempDir())
			k.nodeMonitorGracePeriod = tc.grace
			out, err := k.kwokctlConfig()
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := bytes.Cut(out, []byte("\n---\n"))
			var cfg struct {
				Options           map[string]any `json:"options"`
				ComponentsPatches []struct {
					Name      string `json:"name"`
					ExtraArgs []struct{ Key, Value string }
				} `json:"componentsPatches"`
			}
			if err := yaml.Unmarshal(first, &cfg); err != nil {
				t.Fatal(err)
			}
			got := timings{Options: map[string]any{}}
			for _, key := range []string{"heartbeatFactor", "nodeLeaseDurationSeconds", "kubeControllerManagerNodeMonitorPeriodMilliseconds",
				"kubeControllerManagerNodeMonitorGracePeriodMilliseconds", "kubeAdmission"} {
				if v, ok := cfg.Options[key]; ok {
					got.Options[key] = v
				}
			}
			for _, p := range cfg.ComponentsPatches {
				if p.Name == "kube-controller-manager" {
					for _, a := range p.ExtraArgs {
						got.Args = append(got.Args, a.Key+"="+a.Value)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kwokctl configuration (-want,+got):\n%s", diff)
			}
		})
	}
}
