package coscheduling

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestLazyNodeInfoMutators pins the NodeInfo interface: lazyNodeInfo must
// override every method that changes a NodeInfo (today AddPodInfo,
// RemovePod, SetNode), or that method writes through to the scheduler's
// snapshot. When an upgrade changes the interface, review lazyNodeInfo and
// update the list.
func TestLazyNodeInfoMutators(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[fwk.NodeInfo]()
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	want := []string{
		"AddPodInfo", "GetAllocatable", "GetGeneration", "GetImageStates", "GetNonZeroRequested",
		"GetPVCRefCounts", "GetPods", "GetPodsWithAffinity", "GetPodsWithRequiredAntiAffinity",
		"GetRequested", "GetUsedPorts", "Node", "RemovePod", "SetNode", "Snapshot", "String",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fwk.NodeInfo's methods changed (-want,+got); override any new mutator in lazyNodeInfo:\n%s", diff)
	}
}

func gpuNode(name string) *v1.Node {
	capacity := v1.ResourceList{
		v1.ResourceCPU:       resource.MustParse("64"),
		v1.ResourceMemory:    resource.MustParse("512Gi"),
		v1.ResourcePods:      resource.MustParse("110"),
		lockstep.GPUResource: resource.MustParse("4"),
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: capacity, Capacity: capacity}}
}

// onNode binds pod to node, with a UID: NodeInfo.RemovePod finds pods by
// UID.
func onNode(pod *v1.Pod, node string) *v1.Pod {
	pod.Spec.NodeName = node
	pod.UID = types.UID(pod.Namespace + "/" + pod.Name)
	return pod
}

func nodeWith(node *v1.Node, pods ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// nodeView is what CheckClusterResource reads of a NodeInfo.
type nodeView struct {
	Pods                   []string
	MilliCPU, GPUs, Memory int64
}

func viewOf(ni fwk.NodeInfo) nodeView {
	v := nodeView{
		MilliCPU: ni.GetRequested().GetMilliCPU(),
		Memory:   ni.GetRequested().GetMemory(),
		GPUs:     ni.GetRequested().GetScalarResources()[lockstep.GPUResource],
	}
	for _, pi := range ni.GetPods() {
		v.Pods = append(v.Pods, pi.GetPod().Name)
	}
	slices.Sort(v.Pods)
	return v
}

// TestLazyNodeInfoCopiesOnWrite: a lazy snapshot reads as the node until
// changed, and a change never reaches the node.
func TestLazyNodeInfoCopiesOnWrite(t *testing.T) {
	member := onNode(utiltesting.MakePod("m-0", "ns").GPUs(2).PodGroup("g").Obj(), "n")
	other := onNode(utiltesting.MakePod("o-0", "ns").GPUs(1).Obj(), "n")
	added := onNode(utiltesting.MakePod("added", "ns").GPUs(1).Obj(), "n")
	ni := nodeWith(gpuNode("n"), member, other)
	before := viewOf(ni)
	for _, tc := range []struct {
		name   string
		change func(fwk.NodeInfo) error
		want   nodeView
	}{
		{"read only", func(fwk.NodeInfo) error { return nil }, before},
		{"RemovePod", func(c fwk.NodeInfo) error { return c.RemovePod(klog.Background(), member) },
			viewOf(nodeWith(gpuNode("n"), other))},
		{"AddPodInfo", func(c fwk.NodeInfo) error {
			pi, err := framework.NewPodInfo(added)
			c.AddPodInfo(pi)
			return err
		}, viewOf(nodeWith(gpuNode("n"), member, other, added))},
		{"SetNode", func(c fwk.NodeInfo) error { c.SetNode(gpuNode("renamed")); return nil }, before},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, err := lazyNodeInfoLister{NodeInfoLister: fakeNodeLister{ni}}.List()
			if err != nil {
				t.Fatal(err)
			}
			c := nodes[0].Snapshot()
			if err := tc.change(c); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, viewOf(c)); diff != "" {
				t.Errorf("snapshot (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(before, viewOf(ni)); diff != "" {
				t.Errorf("the node changed through its snapshot (-before,+after):\n%s", diff)
			}
			if ni.Node().Name != "n" {
				t.Errorf("the node is now %s", ni.Node().Name)
			}
		})
	}
}

// fakeNodeLister lists fixed NodeInfos.
type fakeNodeLister []fwk.NodeInfo

func (l fakeNodeLister) List() ([]fwk.NodeInfo, error)                     { return l, nil }
func (l fakeNodeLister) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) { return nil, nil }
func (l fakeNodeLister) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return nil, nil
}
func (l fakeNodeLister) Get(string) (fwk.NodeInfo, error) { return nil, fmt.Errorf("not found") }

// TestCheckClusterResourceLazy: upstream's CheckClusterResource gives the
// same verdict on the lazy snapshot as on the scheduler's, and leaves the
// scheduler's snapshot as it was.
func TestCheckClusterResourceLazy(t *testing.T) {
	// Three 4-GPU nodes: a holds two of gang g's 2-GPU members, b one pod
	// of another gang, c is empty.
	pods := []*v1.Pod{
		onNode(utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(), "a"),
		onNode(utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(), "a"),
		onNode(utiltesting.MakePod("h-0", "ns").GPUs(3).PodGroup("h").Obj(), "b"),
	}
	snapshot := internalcache.NewSnapshot(pods, []*v1.Node{gpuNode("a"), gpuNode("b"), gpuNode("c")})
	lazy := lazySnapshotLister{SharedLister: snapshot}
	gpus := func(n int64) v1.ResourceList {
		return v1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI), v1.ResourcePods: resource.MustParse("4")}
	}
	for _, tc := range []struct {
		name    string
		request v1.ResourceList
		gang    string
		wantErr bool
	}{
		{"fits the empty node", gpus(4), "ns/x", false},
		{"fits the free GPUs of b and c", gpus(5), "ns/x", false},
		{"needs more than is free", gpus(6), "ns/x", true},
		{"g counts its own GPUs as free", gpus(9), "ns/g", false},
		{"g needs more than that", gpus(10), "ns/g", true},
		{"h counts its own", gpus(8), "ns/h", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]nodeView{}
			plain, err := snapshot.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			for _, ni := range plain {
				before[ni.Node().Name] = viewOf(ni)
			}
			wrapped, err := lazy.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			errString := func(err error) string {
				if err == nil {
					return ""
				}
				return err.Error()
			}
			ctx := context.Background()
			want := errString(core.CheckClusterResource(ctx, plain, tc.request.DeepCopy(), tc.gang))
			got := errString(core.CheckClusterResource(ctx, wrapped, tc.request.DeepCopy(), tc.gang))
			if (want != "") != tc.wantErr {
				t.Fatalf("upstream on the plain snapshot: %q, want an error %v", want, tc.wantErr)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("CheckClusterResource (-plain,+lazy):\n%s", diff)
			}
			for _, ni := range plain {
				if diff := cmp.Diff(before[ni.Node().Name], viewOf(ni)); diff != "" {
					t.Errorf("node %s changed (-before,+after):\n%s", ni.Node().Name, diff)
				}
			}
		})
	}
}

// TestLazyNodeInfoListOrder: nodes whose extended resources are all free
// come first, each part in the scheduler's order; a pod asking for none
// (a DaemonSet's) leaves a node untouched, and a node without extended
// resources is not.
func TestLazyNodeInfoListOrder(t *testing.T) {
	cpuNode := gpuNode("cpu")
	delete(cpuNode.Status.Allocatable, lockstep.GPUResource)
	daemon := utiltesting.MakePod("daemon", "ns").Obj()
	daemon.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")},
	}}}
	freed := nodeWith(gpuNode("freed"), onNode(utiltesting.MakePod("gone", "ns").GPUs(4).Obj(), "freed"))
	if err := freed.RemovePod(klog.Background(), freed.GetPods()[0].GetPod()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		nodes []fwk.NodeInfo
		want  []string
	}{
		{"empty", nil, nil},
		{"free GPU nodes first, stable", []fwk.NodeInfo{
			nodeWith(gpuNode("full"), onNode(utiltesting.MakePod("f", "ns").GPUs(4).Obj(), "full")),
			nodeWith(cpuNode),
			nodeWith(gpuNode("free-1")),
			nodeWith(gpuNode("part"), onNode(utiltesting.MakePod("p", "ns").GPUs(1).Obj(), "part")),
			nodeWith(gpuNode("daemon"), onNode(daemon, "daemon")),
			freed,
		}, []string{"free-1", "daemon", "freed", "full", "cpu", "part"}},
		{"all used keeps the order", []fwk.NodeInfo{
			nodeWith(gpuNode("b"), onNode(utiltesting.MakePod("b", "ns").GPUs(1).Obj(), "b")),
			nodeWith(gpuNode("a"), onNode(utiltesting.MakePod("a", "ns").GPUs(1).Obj(), "a")),
		}, []string{"b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := lazyNodeInfoLister{NodeInfoLister: fakeNodeLister(tc.nodes)}.List()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ni := range list {
				got = append(got, ni.Node().Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("order (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestListRowsSeeEveryChange lists the same positions again and again
// through one listRows, changing one node at a time: each list must be the
// one a lister that never listed before returns.
func TestListRowsSeeEveryChange(t *testing.T) {
	a, b, c := nodeWith(gpuNode("a")), nodeWith(gpuNode("b")), nodeWith(gpuNode("c"))
	nodes := []fwk.NodeInfo{a, b, c}
	rows := &listRows{}
	names := func(l lazyNodeInfoLister) []string {
		t.Helper()
		list, err := l.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ni := range list {
			if ni == nil {
				out = append(out, "<nil>")
				continue
			}
			out = append(out, ni.Node().Name)
		}
		return out
	}
	check := func(step string, want []string) {
		t.Helper()
		got := names(lazyNodeInfoLister{fakeNodeLister(nodes), rows})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: order (-want,+got):\n%s", step, diff)
		}
		if diff := cmp.Diff(names(lazyNodeInfoLister{NodeInfoLister: fakeNodeLister(nodes)}), got); diff != "" {
			t.Errorf("%s: remembered rows differ from a fresh list (-fresh,+remembered):\n%s", step, diff)
		}
	}
	check("start", []string{"a", "b", "c"})

	used := onNode(utiltesting.MakePod("u", "ns").GPUs(1).Obj(), "a")
	a.AddPod(used)
	check("a GPU pod lands on a", []string{"b", "c", "a"})

	if err := a.RemovePod(klog.Background(), used); err != nil {
		t.Fatal(err)
	}
	check("it leaves", []string{"a", "b", "c"})

	b2 := nodeWith(gpuNode("b2"), onNode(utiltesting.MakePod("v", "ns").GPUs(2).Obj(), "b2"))
	nodes = []fwk.NodeInfo{a, b2, c}
	check("another NodeInfo takes b's place", []string{"a", "c", "b2"})

	nodes = []fwk.NodeInfo{c, a, b2}
	check("the scheduler reorders its nodes", []string{"c", "a", "b2"})

	nodes = []fwk.NodeInfo{c, nil, a, b2}
	check("a nil NodeInfo joins", []string{"c", "a", "<nil>", "b2"})

	nodes = []fwk.NodeInfo{c}
	check("the list shrinks", []string{"c"})
}

// BenchmarkCheckClusterResource is upstream Coscheduling's check for a
// 4-GPU single-pod gang on 5,000 4-GPU nodes, each full with one 4-GPU pod
// of its own gang, but the last: the scan reads every node, on the
// scheduler's snapshot (plain); through lazySnapshotLister (lazy) the free
// node is listed first.
func BenchmarkCheckClusterResource(b *testing.B) {
	const nodes = 5000
	var nodeObjs []*v1.Node
	var pods []*v1.Pod
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		nodeObjs = append(nodeObjs, gpuNode(name))
		if i < nodes-1 {
			pods = append(pods, onNode(utiltesting.MakePod(fmt.Sprintf("p-%d", i), "ns").GPUs(4).PodGroup(fmt.Sprintf("g-%d", i)).Obj(), name))
		}
	}
	snapshot := internalcache.NewSnapshot(pods, nodeObjs)
	request := v1.ResourceList{lockstep.GPUResource: resource.MustParse("4"), v1.ResourcePods: resource.MustParse("1")}
	for _, lister := range []struct {
		name string
		l    framework.SharedLister
	}{{"plain", snapshot}, {"lazy", lazySnapshotLister{SharedLister: snapshot}}, {"lazy remembered", lazySnapshotLister{snapshot, &listRows{}}}} {
		b.Run(lister.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				list, err := lister.l.NodeInfos().List()
				if err != nil {
					b.Fatal(err)
				}
				if err := core.CheckClusterResource(ctx, list, request.DeepCopy(), "ns/new"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
