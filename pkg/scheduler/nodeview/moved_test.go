package nodeview

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func TestTreeCacheRebuildsOnlyWhenLabelsChange(t *testing.T) {
	v, _, _ := newTestView(t, nil)
	levels := v.config.Levels
	node := func(name, leaf string) fwk.NodeInfo {
		n := gpuNode(name, 8)
		n.Labels = map[string]string{lockstep.LabelFabricTier0: leaf}
		return nodeInfo(n)
	}
	first, err := v.trees.get([]fwk.NodeInfo{node("a", "leaf-0"), node("b", "leaf-1")}, levels, false)
	if err != nil {
		t.Fatal(err)
	}
	same := []fwk.NodeInfo{node("a", "leaf-0"), node("b", "leaf-1")}
	again, _ := v.trees.get(same, levels, false)
	if again != first {
		t.Error("tree rebuilt for unchanged nodes")
	}
	if again, _ := v.trees.get(same, levels, false); again != first {
		t.Error("tree rebuilt for the same node objects")
	}
	moved, _ := v.trees.get([]fwk.NodeInfo{node("a", "leaf-0"), node("b", "leaf-0")}, levels, false)
	if moved == first {
		t.Error("tree reused after a node changed leaf")
	}
	if d, err := moved.LowestCommonDomain([]string{"a", "b"}); err != nil || d.Value != "leaf-0" {
		t.Errorf("nodes a and b meet at %v (%v), want leaf-0", d, err)
	}
}

// TestSnapshotTreeFollowsLabels plans through snapshot, whose rows tell the
// tree cache when no Node object moved: a node that changes leaf (a new Node
// object in its NodeInfo) must show in the next snapshot's tree, and an
// unchanged cluster keeps its tree.
func TestSnapshotTreeFollowsLabels(t *testing.T) {
	v, _, _ := newTestView(t, nil)
	pod := utiltesting.MakePod("p", "ns").GPUs(8).PodGroup("g").Obj()
	labelled := func(name, leaf string) *v1.Node {
		n := gpuNode(name, 8)
		n.Labels = map[string]string{lockstep.LabelFabricTier0: leaf}
		return n
	}
	a, b := nodeInfo(labelled("a", "leaf-0")), nodeInfo(labelled("b", "leaf-1"))
	infos := []fwk.NodeInfo{a, b}
	meet := func(step string) (*topology.Tree, string) {
		t.Helper()
		snap, err := v.snapshot(pod, "ns/g", infos)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		v.Recycle(snap)
		d, err := snap.Tree.LowestCommonDomain([]string{"a", "b"})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return snap.Tree, d.Value
	}
	first, at := meet("start")
	if at != "" {
		t.Errorf("start: a and b meet at %q, want the root", at)
	}
	if again, _ := meet("nothing changed"); again != first {
		t.Error("nothing changed: the tree was rebuilt")
	}
	b.(*framework.NodeInfo).SetNode(labelled("b", "leaf-0"))
	if _, at := meet("b moves to leaf-0"); at != "leaf-0" {
		t.Errorf("b moves to leaf-0: a and b meet at %q, want leaf-0", at)
	}
	b.(*framework.NodeInfo).SetNode(labelled("b", "leaf-1"))
	infos = []fwk.NodeInfo{b, a}
	if _, at := meet("b moves back, listed first"); at != "" {
		t.Errorf("b moves back, listed first: a and b meet at %q, want the root", at)
	}
}

// TestGPUIndexFreed: the GPU index says when an update can make room, and
// a heartbeat cannot.
func TestGPUIndexFreed(t *testing.T) {
	beat := func(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
		nt.Status.HeartbeatTime = metav1.NewTime(time.Unix(2000, 0))
		return nt
	}
	tests := []struct {
		name        string
		first, then *v1alpha1.NodeTopology
		want        bool
	}{
		{name: "new node", then: hgxNodeTopology(t, "a"), want: true},
		{name: "heartbeat", first: hgxNodeTopology(t, "a"), then: beat(hgxNodeTopology(t, "a"))},
		{name: "allocation added", first: hgxNodeTopology(t, "a"), then: withAllocation(t, "a")},
		{name: "allocation released", first: withAllocation(t, "a"), then: hgxNodeTopology(t, "a"), want: true},
		{
			name: "GPU healthy again",
			first: func() *v1alpha1.NodeTopology {
				nt := hgxNodeTopology(t, "a")
				nt.Status.GPUHealth = []v1alpha1.GPUHealth{{Index: 3}}
				return nt
			}(),
			then: hgxNodeTopology(t, "a"),
			want: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newGPUIndex(newSpecTable())
			if tc.first != nil {
				x.set(tc.first)
			}
			got := false
			x.freed = func() { got = true }
			x.set(tc.then)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("freed (-want,+got):\n%s", diff)
			}
		})
	}
}

// BenchmarkTopologyHealthHeartbeat measures one NodeTopology heartbeat of a
// healthy node followed by the refresh the next gang member's PreFilter
// does, on a 25,000-node cluster (100,000 GPUs of 4-GPU nodes are as many
// nodes; HGX objects stand in for them). Every node heartbeats in turn, so
// none goes stale.
func BenchmarkTopologyHealthHeartbeat(b *testing.B) {
	const nodes = 25_000
	clock := clocktesting.NewFakeClock(time.Unix(10_000, 0))
	h := newTopologyHealth(testMaxAge, clock, nil, excludedGauge(b), klog.Background())
	h.specs = newSpecTable()
	nts := make([]*v1alpha1.NodeTopology, nodes)
	for i := range nts {
		obj, err := h.specs.slim(topologyAt(b, fmt.Sprintf("node-%05d", i), clock.Now()))
		if err != nil {
			b.Fatal(err)
		}
		nts[i] = obj.(*v1alpha1.NodeTopology)
		h.set(nts[i])
	}
	if out := h.refresh(); len(out) != 0 {
		b.Fatalf("%d nodes excluded at the start", len(out))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clock.Step(time.Millisecond)
		nt := nts[i%nodes]
		nt.Status.HeartbeatTime = metav1.NewTime(clock.Now())
		h.set(nt)
		if out := h.refresh(); len(out) != 0 {
			b.Fatalf("%d nodes excluded", len(out))
		}
		i++
	}
}
