package lockstep

import "testing"

// TestLevelLookups: a constraint may name host, a configured level or
// cluster; lookups by name and by node label find configured levels only.
func TestLevelLookups(t *testing.T) {
	cfg := DefaultTopologyConfig()
	for name, want := range map[string]bool{LevelHost: true, LevelLeaf: true, LevelCluster: true, "rack": false, "": false} {
		if got := cfg.HasLevel(name); got != want {
			t.Errorf("HasLevel(%q) = %v, want %v", name, got, want)
		}
	}
	if l, ok := cfg.Level(LevelSpine); !ok || l.LabelKey != LabelFabricTier1 {
		t.Errorf("Level(spine) = %+v, %v", l, ok)
	}
	if _, ok := cfg.Level(LevelHost); ok {
		t.Error("Level(host) found an implicit level")
	}
	if l, ok := cfg.LevelLabelled(LabelGPUClique); !ok || l.Name != LevelClique {
		t.Errorf("LevelLabelled(%s) = %+v, %v", LabelGPUClique, l, ok)
	}
	for m, want := range map[ConstraintMode]bool{Required: true, Preferred: true, "": false, "Sometimes": false} {
		if got := m.Valid(); got != want {
			t.Errorf("%q.Valid() = %v, want %v", m, got, want)
		}
	}
	if got := ConstraintModeList(); got != "Required or Preferred" {
		t.Errorf("ConstraintModeList() = %q", got)
	}
}
