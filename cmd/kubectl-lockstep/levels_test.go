package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestParseLevels(t *testing.T) {
	tests := []struct {
		in      string
		want    []lockstep.Level
		wantErr string
	}{
		{in: "leaf=example.com/leaf", want: []lockstep.Level{{Name: "leaf", LabelKey: "example.com/leaf"}}},
		{in: "leaf=a, spine=b", want: []lockstep.Level{{Name: "leaf", LabelKey: "a"}, {Name: "spine", LabelKey: "b"}}},
		{in: "leaf=", wantErr: `--levels: "leaf=" is not name=nodeLabelKey`},
		{in: "leaf=a,,spine=b", wantErr: `--levels: "" is not name=nodeLabelKey`},
		{in: "leaf=a,leaf=b", wantErr: `--levels: levels[1].name: Duplicate value: "leaf (also levels[0])`},
		{in: "host=a", wantErr: "host and cluster are implicit levels"},
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

// TestLevelsFromDeployedSchedulerConfig reads the configuration we deploy,
// which spells out the default levels.
func TestLevelsFromDeployedSchedulerConfig(t *testing.T) {
	f := levelFlags{topologyConfig: filepath.Join("..", "..", "deploy", "scheduler", "config.yaml")}
	got, err := f.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lockstep.DefaultLevels(), got.Levels); diff != "" {
		t.Errorf("levels (-want,+got):\n%s", diff)
	}
	missing := levelFlags{topologyConfig: filepath.Join(t.TempDir(), "none.yaml")}
	if _, err := missing.resolve(); err == nil || !strings.Contains(err.Error(), "reading the topology configuration") {
		t.Errorf("missing file: %v", err)
	}
}
