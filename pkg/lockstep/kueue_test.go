package lockstep

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKueueTopologyConstraint(t *testing.T) {
	cfg := DefaultTopologyConfig()
	type result struct {
		Level string
		Mode  ConstraintMode
		OK    bool
		Err   string // a substring of the error; "" for none
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        result
	}{
		{name: "none", annotations: map[string]string{"other": "x"}, want: result{}},
		{name: "required leaf", annotations: map[string]string{AnnotationKueueRequiredTopology: LabelFabricTier0},
			want: result{Level: LevelLeaf, Mode: Required, OK: true}},
		{name: "preferred spine", annotations: map[string]string{AnnotationKueuePreferredTopology: LabelFabricTier1},
			want: result{Level: LevelSpine, Mode: Preferred, OK: true}},
		{name: "hostname is the host level", annotations: map[string]string{AnnotationKueueRequiredTopology: LabelHostname},
			want: result{Level: LevelHost, Mode: Required, OK: true}},
		{name: "clique", annotations: map[string]string{AnnotationKueueRequiredTopology: LabelGPUClique},
			want: result{Level: LevelClique, Mode: Required, OK: true}},
		{name: "unknown key names the annotation and the valid keys",
			annotations: map[string]string{AnnotationKueueRequiredTopology: "cloud.example.com/rack"},
			want:        result{Mode: Required, OK: true, Err: `annotation kueue.x-k8s.io/podset-required-topology="cloud.example.com/rack" is no node label of a configured topology level; use one of kubernetes.io/hostname, nvidia.com/gpu.clique, fabric.topograph.run/tier-0`}},
		{name: "both", annotations: map[string]string{AnnotationKueueRequiredTopology: LabelFabricTier0, AnnotationKueuePreferredTopology: LabelFabricTier1},
			want: result{OK: true, Err: "are both set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			level, mode, ok, err := KueueTopologyConstraint(tc.annotations, cfg)
			got := result{Level: level, Mode: mode, OK: ok}
			if err != nil {
				got.Err = tc.want.Err
				if tc.want.Err == "" || !strings.Contains(err.Error(), tc.want.Err) {
					got.Err = err.Error()
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("KueueTopologyConstraint (-want,+got):\n%s", diff)
			}
		})
	}

	custom := TopologyConfig{Levels: []Level{{Name: "rack", LabelKey: "example.com/rack"}}}
	level, mode, ok, err := KueueTopologyConstraint(map[string]string{AnnotationKueuePreferredTopology: "example.com/rack"}, custom)
	if diff := cmp.Diff([]any{"rack", Preferred, true, nil}, []any{level, mode, ok, err}); diff != "" {
		t.Errorf("custom level (-want,+got):\n%s", diff)
	}
}
