package nodeview

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// pcieNodeTopology is an L40S PCIe NodeTopology: other hardware than HGX.
func pcieNodeTopology(t testing.TB, name string) *v1alpha1.NodeTopology {
	t.Helper()
	nt := hgxNodeTopology(t, name)
	prof, _ := topology.LookupProfile("l40s-pcie")
	hw, err := prof.Node()
	if err != nil {
		t.Fatal(err)
	}
	nt.Spec = v1alpha1.SpecFromTopology(hw, prof.Name)
	return nt
}

// TestGPUIndexSharesSelectorsByHardware indexes, changes and deletes
// NodeTopology objects and checks which nodes share a selector and which
// selectors the index keeps: one per hardware in use, whatever the profile
// is called.
func TestGPUIndexSharesSelectorsByHardware(t *testing.T) {
	unnamed := func(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
		nt.Spec.Profile = ""
		return nt
	}
	// slower is HGX with one NVLink pair slower: other hardware.
	slower := func(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
		nt.Spec.Profile = ""
		links := append([]v1alpha1.GPULink(nil), nt.Spec.Links...)
		links[0].BandwidthMBps /= 2
		nt.Spec.Links = links
		return nt
	}
	type step struct {
		name   string
		do     func(t *testing.T, x *gpuIndex)
		shapes [][]string // nodes by selector, each group sharing one
	}
	steps := []step{
		{
			name: "HGX nodes with and without the profile name, and a PCIe node",
			do: func(t *testing.T, x *gpuIndex) {
				x.set(hgxNodeTopology(t, "a"))
				x.set(hgxNodeTopology(t, "b"))
				x.set(unnamed(hgxNodeTopology(t, "c")))
				x.set(pcieNodeTopology(t, "d"))
			},
			shapes: [][]string{{"a", "b", "c"}, {"d"}},
		},
		{
			name:   "a heartbeat keeps the selector",
			do:     func(t *testing.T, x *gpuIndex) { x.set(hgxNodeTopology(t, "a")) },
			shapes: [][]string{{"a", "b", "c"}, {"d"}},
		},
		{
			name:   "c's links changed: a selector of its own",
			do:     func(t *testing.T, x *gpuIndex) { x.set(slower(hgxNodeTopology(t, "c"))) },
			shapes: [][]string{{"a", "b"}, {"c"}, {"d"}},
		},
		{
			name:   "a became a PCIe node",
			do:     func(t *testing.T, x *gpuIndex) { x.set(pcieNodeTopology(t, "a")) },
			shapes: [][]string{{"a", "d"}, {"b"}, {"c"}},
		},
		{
			name: "the last HGX node deleted, c malformed",
			do: func(t *testing.T, x *gpuIndex) {
				x.remove("b")
				x.set(malformed(hgxNodeTopology(t, "c")))
			},
			shapes: [][]string{{"a", "d"}},
		},
		{
			name: "all gone",
			do: func(t *testing.T, x *gpuIndex) {
				x.remove("a")
				x.remove("d")
			},
			shapes: [][]string{},
		},
	}
	x := newGPUIndex(nil)
	for _, s := range steps {
		s.do(t, x)
		bySelector := map[*topology.Selector][]string{}
		for _, name := range []string{"a", "b", "c", "d"} {
			if n, ok := x.get(name); ok {
				bySelector[n.selector] = append(bySelector[n.selector], name)
			}
		}
		got := [][]string{}
		for _, names := range bySelector {
			got = append(got, names)
		}
		if diff := cmp.Diff(s.shapes, got, cmpGroups); diff != "" {
			t.Errorf("%s: nodes by selector (-want,+got):\n%s", s.name, diff)
		}
		// The index keeps the selectors in use, each counting its nodes.
		kept := map[*topology.Selector]int{}
		for _, shared := range x.selectors {
			kept[shared.selector] = shared.nodes
		}
		used := map[*topology.Selector]int{}
		for sel, names := range bySelector {
			used[sel] = len(names)
		}
		if diff := cmp.Diff(used, kept); diff != "" {
			t.Errorf("%s: selectors kept, by nodes using them (-in use,+kept):\n%s", s.name, diff)
		}
	}
}

// cmpGroups compares lists of groups of names in any order.
var cmpGroups = cmp.Transformer("groups", func(groups [][]string) []string {
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		out = append(out, fmt.Sprint(sortedCopy(g)))
	}
	return sortedCopy(out)
})

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestGPUIndexBuildsSelectorsUnlocked sets nodes of two hardware shapes
// from several goroutines, checking that no selector is built while the
// index's lock is held (by anyone: Filter and Score read the index
// meanwhile), and that each shape ends with one selector all its nodes share.
func TestGPUIndexBuildsSelectorsUnlocked(t *testing.T) {
	x := newGPUIndex(nil)
	x.newSelector = func(hw *topology.NodeTopology) (*topology.Selector, error) {
		if !x.mu.TryLock() {
			t.Error("a selector is built with the index locked")
		} else {
			x.mu.Unlock()
		}
		return topology.NewSelector(hw)
	}
	const workers, perWorker = 4, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				name := fmt.Sprintf("n-%d-%d", w, i)
				if i%2 == 0 {
					x.set(hgxNodeTopology(t, name))
				} else {
					x.set(pcieNodeTopology(t, name))
				}
			}
		}()
	}
	wg.Wait()
	// Nodes by their profile's hardware: the selectors they use.
	sels := map[string]map[*topology.Selector]bool{}
	for _, n := range x.nodes {
		if sels[n.hardware] == nil {
			sels[n.hardware] = map[*topology.Selector]bool{}
		}
		sels[n.hardware][n.selector] = true
	}
	if len(sels) != 2 {
		t.Errorf("nodes of %d hardware keys, want 2", len(sels))
	}
	for _, s := range sels {
		if len(s) != 1 {
			t.Errorf("nodes of one hardware use %d selectors, want 1", len(s))
		}
	}
	if len(x.selectors) != 2 {
		t.Errorf("index keeps %d selectors, want 2", len(x.selectors))
	}
}
