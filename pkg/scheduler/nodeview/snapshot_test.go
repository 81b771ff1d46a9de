package nodeview

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestSnapshotSeesEveryChange plans repeatedly over the same NodeInfos,
// which snapshotRows remembers between plans, changing one thing at a time
// between snapshots: each change must show in the next one, as a snapshot
// built from nothing would show it.
func TestSnapshotSeesEveryChange(t *testing.T) {
	v, _, _ := newTestView(t, nil)
	pod := utiltesting.MakePod("p", "ns").GPUs(8).PodGroup("g").Obj()
	a, b := nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8))
	v.Set(nil, hgxNodeTopology(t, "a"))
	v.Set(nil, hgxNodeTopology(t, "b"))
	infos := []fwk.NodeInfo{a, b}

	// view is what the planner is told about each node.
	type view struct {
		Free        int
		HasTopology bool
		FreePods    int
	}
	views := func(step string, v *View) map[string]view {
		t.Helper()
		snap, err := v.snapshot(pod, "ns/g", infos)
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
		got := views(step, v)
		// The same change seen by a plugin that never planned before.
		fresh := *v
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
	v.Set(nil, held)
	check("the agent reports 3 GPUs of a held", map[string]view{"a": {5, true, 110}, "b": {8, true, 110}})

	b.(*framework.NodeInfo).AddPod(utiltesting.MakePod("y", "ns").GPUs(2).Obj())
	check("a pod of 2 GPUs lands on b before the agent reports it", map[string]view{"a": {5, true, 110}, "b": {6, true, 109}})

	v.gpus.remove("a")
	check("a's NodeTopology is deleted", map[string]view{"a": {8, false, 110}, "b": {6, true, 109}})

	v.Set(nil, hgxNodeTopology(t, "a"))
	check("a's NodeTopology is back", map[string]view{"a": {8, true, 110}, "b": {6, true, 109}})

	smaller := gpuNode("b", 4)
	b.(*framework.NodeInfo).SetNode(smaller)
	check("b's allocatable shrinks to 4 GPUs", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	infos = []fwk.NodeInfo{b, a}
	check("the scheduler lists the nodes in another order", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	c := nodeInfo(gpuNode("c", 8))
	infos = []fwk.NodeInfo{b, a, c}
	check("node c without a NodeTopology joins", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, false, 110}})

	v.Set(nil, hgxNodeTopology(t, "c"))
	check("c's NodeTopology arrives", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, true, 110}})

	unschedulable := gpuNode("c", 8)
	unschedulable.Spec.Unschedulable = true
	c.(*framework.NodeInfo).SetNode(unschedulable)
	check("c is cordoned", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	c.(*framework.NodeInfo).SetNode(gpuNode("c", 8))
	check("c is uncordoned", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, true, 110}})

	tainted := gpuNode("c", 8)
	tainted.Spec.Taints = []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoExecute}}
	c.(*framework.NodeInfo).SetNode(tainted)
	check("c is tainted NoExecute", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}})

	softly := gpuNode("c", 8)
	softly.Spec.Taints = []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectPreferNoSchedule}}
	c.(*framework.NodeInfo).SetNode(softly)
	check("c's taint becomes PreferNoSchedule", map[string]view{"a": {8, true, 110}, "b": {2, true, 109}, "c": {8, true, 110}})
}

// TestHostCheckIsCanHost checks that hostCheck, which reads a node's
// unschedulable flag and taints from its snapshot row, judges every pod
// and node as canHost does from the Node itself.
func TestHostCheckIsCanHost(t *testing.T) {
	withTaints := func(name string, taints ...v1.Taint) *v1.Node {
		n := gpuNode(name, 8)
		n.Spec.Taints = taints
		n.Labels = map[string]string{"pool": name}
		return n
	}
	cordoned := withTaints("cordoned")
	cordoned.Spec.Unschedulable = true
	nodes := []*v1.Node{
		withTaints("plain"),
		cordoned,
		withTaints("noschedule", v1.Taint{Key: "team", Value: "a", Effect: v1.TaintEffectNoSchedule}),
		withTaints("noexecute", v1.Taint{Key: "maintenance", Effect: v1.TaintEffectNoExecute}),
		withTaints("prefer", v1.Taint{Key: "spot", Effect: v1.TaintEffectPreferNoSchedule}),
		withTaints("both",
			v1.Taint{Key: "team", Value: "a", Effect: v1.TaintEffectNoSchedule},
			v1.Taint{Key: "maintenance", Effect: v1.TaintEffectNoExecute}),
	}
	tolerates := func(keys ...string) *v1.Pod {
		pod := utiltesting.MakePod("p", "ns").GPUs(8).Obj()
		for _, k := range keys {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{Key: k, Operator: v1.TolerationOpExists})
		}
		return pod
	}
	selecting := tolerates("team")
	selecting.Spec.NodeSelector = map[string]string{"pool": "noschedule"}
	affine := tolerates("team", "maintenance")
	affine.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "pool", Operator: v1.NodeSelectorOpIn, Values: []string{"both", "plain"}}}}},
	}}}
	everything := tolerates()
	everything.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	pods := map[string]*v1.Pod{
		"no tolerations":         tolerates(),
		"tolerates team":         tolerates("team"),
		"tolerates both":         tolerates("team", "maintenance"),
		"tolerates everything":   everything,
		"node selector":          selecting,
		"required node affinity": affine,
	}
	v, _, _ := newTestView(t, nil)
	for podName, pod := range pods {
		affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
		check := newHostCheck(pod, affinity)
		admitted := 0
		for _, node := range nodes {
			var row snapshotRow
			v.refreshRow(&row, nodeInfo(node), node)
			want := CanHost(node, pod, affinity)
			if got := check.admits(&row); got != want {
				t.Errorf("pod with %s on node %s: hostCheck says %v, canHost %v", podName, node.Name, got, want)
			}
			if want {
				admitted++
			}
		}
		if admitted == 0 || admitted == len(nodes) && podName != "tolerates everything" {
			t.Errorf("pod with %s: admitted by %d of %d nodes: the case tests nothing", podName, admitted, len(nodes))
		}
	}
}

// snapshotView is what the planner is told about a node, drains included.
type snapshotView struct {
	Free        int
	HasTopology bool
	FreePods    int
	Drained     bool
}

// snapshotChecker plans pod over infos, again and again on one plugin that
// keeps its rows between plans (snapshotRows), and compares each snapshot
// with what is wanted and with a snapshot of a plugin that never planned,
// as TestSnapshotSeesEveryChange does for the node's own inputs.
type snapshotChecker struct {
	t     *testing.T
	p     *View
	pod   *v1.Pod
	gang  string
	infos []fwk.NodeInfo
}

func (c *snapshotChecker) views(step string, v *View) map[string]snapshotView {
	c.t.Helper()
	snap, err := v.snapshot(c.pod, c.gang, c.infos)
	if err != nil {
		c.t.Fatalf("%s: snapshot: %v", step, err)
	}
	out := map[string]snapshotView{}
	for _, n := range snap.Nodes {
		out[n.Name] = snapshotView{Free: n.FreeGPUs.Len(), HasTopology: n.Topology != nil, FreePods: int(n.FreePods), Drained: n.Drained}
	}
	return out
}

func (c *snapshotChecker) check(step string, want map[string]snapshotView) {
	c.t.Helper()
	got := c.views(step, c.p)
	// The same change seen by a plugin that never planned before.
	fresh := *c.p
	fresh.rows = &snapshotRows{}
	if diff := cmp.Diff(want, got); diff != "" {
		c.t.Errorf("%s: snapshot (-want,+got):\n%s", step, diff)
	}
	if diff := cmp.Diff(c.views(step, &fresh), got); diff != "" {
		c.t.Errorf("%s: remembered rows differ from a fresh snapshot (-fresh,+remembered):\n%s", step, diff)
	}
}

// TestSnapshotSeesBooksChanges is TestSnapshotSeesEveryChange for the
// books, which snapshotRows reads per node only when they journal a change
// there: every event that takes GPUs from a node or gives them back, drains
// it or releases it, must show in the next snapshot, also after the nodes
// moved between rows.
func TestSnapshotSeesBooksChanges(t *testing.T) {
	v, books, _ := newTestView(t, nil)
	pod := utiltesting.MakePod("p", "ns").GPUs(2).PodGroup("g").Obj()
	a, b, n := nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8)), nodeInfo(gpuNode("c", 8))
	for _, name := range []string{"a", "b", "c"} {
		v.Set(nil, hgxNodeTopology(t, name))
	}
	c := &snapshotChecker{t: t, p: v, pod: pod, gang: "ns/g#2", infos: []fwk.NodeInfo{a, b, n}}
	type view = snapshotView
	now := time.Unix(0, 0)
	c.check("start", map[string]view{"a": {8, true, 110, false}, "b": {8, true, 110, false}, "c": {8, true, 110, false}})

	books.Add("ns/other#4", &placement.Plan{Members: []placement.Assignment{
		{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3)}, {Node: "b", GPUs: topology.NewGPUSet(4, 5, 6, 7)},
	}}, now)
	c.check("another gang's plan holds 4 GPUs on a and b", map[string]view{"a": {4, true, 110, false}, "b": {4, true, 110, false}, "c": {8, true, 110, false}})

	books.ReserveSlot("ns/other#4", "o-0", "a", 0)
	c.check("its member reserves a's slot", map[string]view{"a": {4, true, 110, false}, "b": {4, true, 110, false}, "c": {8, true, 110, false}})

	books.ForgetPod("o-0")
	c.check("the member is forgotten", map[string]view{"a": {8, true, 110, false}, "b": {4, true, 110, false}, "c": {8, true, 110, false}})

	books.Drop("ns/other#4")
	c.check("the plan is dropped", map[string]view{"a": {8, true, 110, false}, "b": {8, true, 110, false}, "c": {8, true, 110, false}})

	books.Assign("single", "c", topology.NewGPUSet(0))
	c.check("a pod outside gangs gets a GPU of c", map[string]view{"a": {8, true, 110, false}, "b": {8, true, 110, false}, "c": {7, true, 110, false}})

	books.Add("ns/g#2", &placement.Plan{Members: []placement.Assignment{
		{Node: "b", GPUs: topology.NewGPUSet(0, 1)}, {Node: "b", GPUs: topology.NewGPUSet(2, 3)},
	}}, now)
	c.check("the gang's own open slots stay free for it", map[string]view{"a": {8, true, 110, false}, "b": {8, true, 110, false}, "c": {7, true, 110, false}})

	books.ReserveSlot("ns/g#2", "g-0", "b", 0)
	c.check("its member's reserved GPUs do not", map[string]view{"a": {8, true, 110, false}, "b": {6, true, 110, false}, "c": {7, true, 110, false}})

	books.ReserveSlot("ns/g#2", "g-1", "b", 1)
	c.check("nor once the plan is complete", map[string]view{"a": {8, true, 110, false}, "b": {4, true, 110, false}, "c": {7, true, 110, false}})

	books.Drain("ns/drainer#8", &topology.Domain{ID: "ac", Value: "ac", Nodes: []string{"a", "c"}}, 100, 15, now)
	c.check("a gang that outranks it drains a and c", map[string]view{"a": {8, true, 110, true}, "b": {4, true, 110, false}, "c": {7, true, 110, true}})

	c.infos = []fwk.NodeInfo{n, b, a}
	c.check("the scheduler lists the nodes in another order", map[string]view{"a": {8, true, 110, true}, "b": {4, true, 110, false}, "c": {7, true, 110, true}})

	books.Undrain("ns/drainer#8")
	books.ForgetPod("single")
	c.check("the drain ends and the single pod is forgotten", map[string]view{"a": {8, true, 110, false}, "b": {4, true, 110, false}, "c": {8, true, 110, false}})

	c.infos = []fwk.NodeInfo{a, b}
	c.check("c leaves the list", map[string]view{"a": {8, true, 110, false}, "b": {4, true, 110, false}})

	books.Assign("late", "c", topology.NewGPUSet(0))
	c.infos = []fwk.NodeInfo{a, b, n}
	c.check("c leaves the list, takes a pod and comes back", map[string]view{"a": {8, true, 110, false}, "b": {4, true, 110, false}, "c": {7, true, 110, false}})

	// c moves to a's row while a, cordoned, is left out: the row c left
	// must not answer for it.
	cordoned := gpuNode("a", 8)
	cordoned.Spec.Unschedulable = true
	a.(*framework.NodeInfo).SetNode(cordoned)
	c.infos = []fwk.NodeInfo{n, b, a}
	c.check("a is cordoned as c takes its place in the list", map[string]view{"b": {4, true, 110, false}, "c": {7, true, 110, false}})

	books.Assign("later", "c", topology.NewGPUSet(1))
	c.check("another pod gets a GPU of c", map[string]view{"b": {4, true, 110, false}, "c": {6, true, 110, false}})
}

// TestSnapshotRecycle: a recycled snapshot's nodes are reused by the next
// snapshot, and a snapshot that was not recycled, or not the last taken,
// keeps what it was told whatever snapshots come after.
func TestSnapshotRecycle(t *testing.T) {
	v, books, _ := newTestView(t, nil)
	pod := utiltesting.MakePod("p", "ns").GPUs(2).PodGroup("g").Obj()
	v.Set(nil, hgxNodeTopology(t, "a"))
	infos := []fwk.NodeInfo{nodeInfo(gpuNode("a", 8))}
	take := func() *placement.Snapshot {
		t.Helper()
		snap, err := v.snapshot(pod, "ns/g#2", infos)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	free := func(snap *placement.Snapshot) int { return snap.Nodes[0].FreeGPUs.Len() }

	kept := take()
	books.Assign("x", "a", topology.NewGPUSet(0))
	later := take()
	v.rows.recycle(kept) // not the last taken: left alone
	books.Assign("y", "a", topology.NewGPUSet(1))
	last := take()
	if got := []int{free(kept), free(later), free(last)}; !cmp.Equal(got, []int{8, 7, 6}) {
		t.Errorf("free GPUs of snapshots kept, taken later and last = %v, want [8 7 6]", got)
	}

	v.rows.recycle(last)
	books.ForgetPod("x")
	next := take()
	if next.Nodes[0] != last.Nodes[0] {
		t.Errorf("the next snapshot did not reuse the recycled one's nodes")
	}
	if got := []int{free(kept), free(later), free(next)}; !cmp.Equal(got, []int{8, 7, 7}) {
		t.Errorf("free GPUs of snapshots kept, taken later and next = %v, want [8 7 7]", got)
	}
}
