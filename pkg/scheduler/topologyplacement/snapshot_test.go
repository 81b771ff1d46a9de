package topologyplacement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestSnapshotSeesEveryChange plans repeatedly over the same NodeInfos,
// which snapshotRows remembers between plans, changing one thing at a time
// between snapshots: each change must show in the next one, as a snapshot
// built from nothing would show it.
func TestSnapshotSeesEveryChange(t *testing.T) {
	p, _ := newTestPlugin(t)
	pod := utiltesting.MakePod("p", "ns").GPUs(8).PodGroup("g").Obj()
	a, b := nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8))
	p.gpus.set(hgxNodeTopology(t, "a"))
	p.gpus.set(hgxNodeTopology(t, "b"))
	infos := []fwk.NodeInfo{a, b}

	// view is what the planner is told about each node.
	type view struct {
		Free        int
		HasTopology bool
		FreePods    int
	}
	views := func(step string, p *TopologyPlacement) map[string]view {
		t.Helper()
		snap, err := p.snapshot(pod, "ns/g", infos)
		if err != nil {
			t.Fatalf("%s: snapshot: %v", step, err)
		}
		out := map[string]view{}
		for _, n := range snap.Nodes {
			out[n.Name] = view{Free: n.FreeGPUs.Len(), HasTopology: n.Topology != nil, FreePods: int(n.FreePods)}
		}
		return out
	}
	check := func(step string, want map[string]view) {
		t.Helper()
		got := views(step, p)
		// The same change seen by a plugin that never planned before.
		fresh := *p
		fresh.rows = &snapshotRows{}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: snapshot (-want,+got):\n%s", step, diff)
		}
		if diff := cmp.Diff(views(step, &fresh), got); diff != "" {
			t.Errorf("%s: remembered rows differ from a fresh snapshot (-fresh,+remembered):\n%s", step, diff)
		}
	}
	check("start", map[string]view{"a": {8, true, 110}, "b": {8, true, 110}})

	held := hgxNodeTopology(t, "a")
	held.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "ns", Pod: "x", GPUs: []int32{0, 1, 2}}}
	p.gpus.set(held)
	check("the agent reports 3 GPUs of a held", map[string]view{"a": {5, true, 110}, "b": {8, true, 110}})

	b.(*framework.NodeInfo).AddPod(utiltesting.MakePod("y", "ns").GPUs(2).Obj())
	check("a pod of 2 GPUs lands on b before the agent reports it", map[string]view{"a": {5, true, 110}, "b": {6, true, 109}})

	p.gpus.remove("a")
	check("a's NodeTopology is deleted", map[string]view{"a": {8, false, 110}, "b": {6, true, 109}})

	p.gpus.set(hgxNodeTopology(t, "a"))
	check("a's NodeTopology is back", map[string]view{"a": {8, true, 110}, "b": {6, true, 109}})

	smaller := gpuNode("b", 4)
	b.(*framework.NodeInfo).SetNode(smaller)
	check("b's allocatable shrinks to 4 GPUs", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	infos = []fwk.NodeInfo{b, a}
	check("the scheduler lists the nodes in another order", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	c := nodeInfo(gpuNode("c", 8))
	infos = []fwk.NodeInfo{b, a, c}
	check("node c without a NodeTopology joins", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, false, 110}})

	p.gpus.set(hgxNodeTopology(t, "c"))
	check("c's NodeTopology arrives", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, true, 110}})

	unschedulable := gpuNode("c", 8)
	unschedulable.Spec.Unschedulable = true
	c.(*framework.NodeInfo).SetNode(unschedulable)
	check("c is cordoned", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})
}
