package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestParseLevels(t *testing.T) {
	tests := []struct {
		in      string
		want    []topology.Level
		wantErr string
	}{
		{in: "leaf=example.com/leaf", want: []topology.Level{{Name: "leaf", LabelKey: "example.com/leaf"}}},
		{in: "leaf=a, spine=b", want: []topology.Level{{Name: "leaf", LabelKey: "a"}, {Name: "spine", LabelKey: "b"}}},
		{in: "leaf=", wantErr: `--levels: "leaf=" is not name=nodeLabelKey`},
		{in: "leaf=a,,spine=b", wantErr: `--levels: "" is not name=nodeLabelKey`},
		{in: "leaf=a,leaf=b", wantErr: `--levels: levels[1].name "leaf" is used twice`},
		{in: "host=a", wantErr: "reserved for the implicit level"},
	}
	for _, tc := range tests {
		got, err := parseLevels(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseLevels(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseLevels(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseLevels(%q) (-want,+got):\n%s", tc.in, diff)
		}
	}
}

func TestLevelsFromSchedulerConfig(t *testing.T) {
	const header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
	tests := []struct {
		name    string
		config  string
		want    []topology.Level
		wantErr string
	}{{
		name: "levels",
		config: header + `profiles:
- schedulerName: lockstep-scheduler
  pluginConfig:
  - {name: Coscheduling, args: {permitWaitingTimeSeconds: 30}}
  - name: TopologyPlacement
    args:
      levels:
      - {name: rack, nodeLabel: example.com/rack, nvlink: true}
      - {name: row, nodeLabel: example.com/row}
`,
		want: []topology.Level{{Name: "rack", LabelKey: "example.com/rack", NVLink: true}, {Name: "row", LabelKey: "example.com/row"}},
	}, {
		name:   "args without levels: the plugin's defaults",
		config: header + "profiles:\n- pluginConfig:\n  - {name: TopologyPlacement, args: {planTTL: 60s}}\n",
		want:   topology.DefaultLevels(),
	}, {
		name:    "plugin not configured",
		config:  header + "profiles:\n- schedulerName: a\n",
		wantErr: "no profile has TopologyPlacement pluginConfig",
	}, {
		name: "profiles disagree",
		config: header + `profiles:
- schedulerName: a
  pluginConfig: [{name: TopologyPlacement, args: {levels: [{name: leaf, nodeLabel: x}]}}]
- schedulerName: b
  pluginConfig: [{name: TopologyPlacement, args: {levels: [{name: leaf, nodeLabel: y}]}}]
`,
		wantErr: `profiles "a" and "b" configure different TopologyPlacement levels`,
	}, {
		name:    "invalid levels",
		config:  header + "profiles:\n- schedulerName: a\n  pluginConfig: [{name: TopologyPlacement, args: {levels: [{name: leaf}]}}]\n",
		wantErr: `profile "a": TopologyPlacement levels: levels[0].labelKey is empty`,
	}, {
		name:    "not a scheduler configuration",
		config:  "kind: Pod\n",
		wantErr: `kind is "Pod", want KubeSchedulerConfiguration`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := levelsFromSchedulerConfig([]byte(tc.config))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("levels (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestLevelsFromDeployedSchedulerConfig reads the configuration we deploy,
// which spells out the default levels.
func TestLevelsFromDeployedSchedulerConfig(t *testing.T) {
	f := levelFlags{schedulerConfig: filepath.Join("..", "..", "deploy", "scheduler", "config.yaml")}
	got, err := f.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(topology.DefaultLevels(), got); diff != "" {
		t.Errorf("levels (-want,+got):\n%s", diff)
	}
	missing := levelFlags{schedulerConfig: filepath.Join(t.TempDir(), "none.yaml")}
	if _, err := missing.resolve(); err == nil || !strings.Contains(err.Error(), "reading the scheduler configuration") {
		t.Errorf("missing file: %v", err)
	}
}
