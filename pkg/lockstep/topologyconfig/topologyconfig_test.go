package topologyconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestParse(t *testing.T) {
	const header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
	const own = "apiVersion: lockstep.dev/v1alpha1\nkind: TopologyConfig\n"
	tests := []struct {
		name    string
		config  string
		want    lockstep.TopologyConfig
		wantErr string
	}{{
		name: "scheduler configuration: levels and oversubscription",
		config: header + `profiles:
- schedulerName: lockstep-scheduler
  pluginConfig:
  - {name: Coscheduling, args: {permitWaitingTimeSeconds: 30}}
  - name: TopologyPlacement
    args:
      preferredWait: 10s
      levels:
      - {name: rack, nodeLabel: example.com/rack, nvlink: true}
      - {name: row, nodeLabel: example.com/row}
      oversubscription: {row: 2, cluster: 4}
`,
		want: lockstep.TopologyConfig{
			Levels:           []lockstep.Level{{Name: "rack", LabelKey: "example.com/rack", NVLink: true}, {Name: "row", LabelKey: "example.com/row"}},
			Oversubscription: map[string]float64{"row": 2, "cluster": 4},
		},
	}, {
		name:   "args without levels: the plugin's defaults",
		config: header + "profiles:\n- pluginConfig:\n  - {name: TopologyPlacement, args: {planTTL: 60s}}\n",
		want:   lockstep.DefaultTopologyConfig(),
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
		name:    "scheduler configuration with an invalid level names the field",
		config:  header + "profiles:\n- schedulerName: a\n  pluginConfig: [{name: TopologyPlacement, args: {levels: [{name: leaf}]}}]\n",
		wantErr: `profile "a": profiles[0].pluginConfig[0].args.levels[0].nodeLabel: Required value`,
	}, {
		name:   "own kind",
		config: own + "levels:\n- {name: leaf, nodeLabel: fabric.topograph.run/tier-0}\n- {name: spine, nodeLabel: fabric.topograph.run/tier-1}\noversubscription: {spine: 2}\n",
		want: lockstep.TopologyConfig{
			Levels:           []lockstep.Level{{Name: "leaf", LabelKey: lockstep.LabelFabricTier0}, {Name: "spine", LabelKey: lockstep.LabelFabricTier1}},
			Oversubscription: map[string]float64{"spine": 2},
		},
	}, {
		name:   "own kind, empty: defaults",
		config: own,
		want:   lockstep.DefaultTopologyConfig(),
	}, {
		name:    "own kind is strict",
		config:  own + "levls: []\n",
		wantErr: `unknown field "levls"`,
	}, {
		name:    "own kind, wrong version",
		config:  "apiVersion: lockstep.dev/v2\nkind: TopologyConfig\n",
		wantErr: `apiVersion: Invalid value: "lockstep.dev/v2"`,
	}, {
		name:    "oversubscription of an unknown level",
		config:  own + "levels: [{name: leaf, nodeLabel: a}]\noversubscription: {rack: 2}\n",
		wantErr: `oversubscription[rack]: Unsupported value: "rack": supported values: "leaf", "cluster"`,
	}, {
		name:    "oversubscription below 1",
		config:  own + "levels: [{name: leaf, nodeLabel: a}]\noversubscription: {leaf: 0.5}\n",
		wantErr: `oversubscription[leaf]: Invalid value: 0.5: must be at least 1`,
	}, {
		name:    "reserved level name",
		config:  own + "levels: [{name: host, nodeLabel: a}]\n",
		wantErr: `levels[0].name: Invalid value: "host": host and cluster are implicit levels`,
	}, {
		name:    "duplicate label key",
		config:  own + "levels: [{name: a, nodeLabel: k}, {name: b, nodeLabel: k}]\n",
		wantErr: `levels[1].nodeLabel: Duplicate value: "k (also levels[0])`,
	}, {
		name:    "label key syntax",
		config:  own + "levels: [{name: a, nodeLabel: 'not a key'}]\n",
		wantErr: `levels[0].nodeLabel: Invalid value: "not a key": must be a label key`,
	}, {
		name:    "neither kind",
		config:  "kind: Pod\n",
		wantErr: `kind: Unsupported value: "Pod": supported values: "TopologyConfig", "KubeSchedulerConfiguration"`,
	}, {
		name:    "not YAML",
		config:  "levels: [\n",
		wantErr: "parsing YAML",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.config))
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
				t.Errorf("config (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestLoadDeployedSchedulerConfig reads the scheduler configuration we
// deploy, which spells out the default levels: the controller, agent and
// kubectl plugin are pointed at the same file.
func TestLoadDeployedSchedulerConfig(t *testing.T) {
	got, err := Load(filepath.Join("..", "..", "..", "deploy", "scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lockstep.DefaultLevels(), got.Levels); diff != "" {
		t.Errorf("levels (-want,+got):\n%s", diff)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: lockstep.dev/v1alpha1\nkind: TopologyConfig\nlevels: [{name: cluster, nodeLabel: a}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+": levels[0].name") {
		t.Errorf("Load: %v, want an error naming %s and the field", err, path)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "reading the topology configuration") {
		t.Errorf("missing file: %v", err)
	}
	if got, err := LoadOrDefault(""); err != nil || !cmp.Equal(got, lockstep.DefaultTopologyConfig()) {
		t.Errorf("LoadOrDefault(\"\") = %v, %v; want the defaults", got, err)
	}
}
