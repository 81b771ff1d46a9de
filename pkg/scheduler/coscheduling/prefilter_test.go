package coscheduling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/scheduler-plugins/apis/config"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

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

// newPodGroupClient is the PodGroup reader the manager gets.
func newPodGroupClient(t testing.TB, pgs ...*schedv1alpha1.PodGroup) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]client.Object, len(pgs))
	for i, pg := range pgs {
		objs[i] = pg
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// newTestPlugin builds the plugin as New does, with the deployed args
// (permitWaitingTimeSeconds 30, no backoff), over pods in the informer,
// bound ones also on the snapshot's nodes, and PodGroups pgs. It returns
// the snapshot's nodes, as the framework gives them to PreFilter.
func newTestPlugin(t testing.TB, h *fakeHandle, pods []*v1.Pod, nodes []*v1.Node, pgs ...*schedv1alpha1.PodGroup) (*Coscheduling, []fwk.NodeInfo) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(), 0)
	podInformer := factory.Core().V1().Pods()
	if err := podgroupindex.Register(podInformer.Informer()); err != nil {
		t.Fatal(err)
	}
	var bound []*v1.Pod
	for _, pod := range pods {
		if err := podInformer.Informer().GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" {
			bound = append(bound, pod)
		}
	}
	snapshot := internalcache.NewSnapshot(bound, nodes)
	p := newPlugin(h, &config.CoschedulingArgs{PermitWaitingTimeSeconds: 30, PodGroupRejectPercentage: 10}, podInformer)
	p.mgr = core.NewPodGroupManager(newPodGroupClient(t, pgs...), snapshot, &p.scheduleTimeout, podgroupindex.Informer(podInformer))
	list, err := snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	return p, list
}

func gpus(n int64) v1.ResourceList {
	return v1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

func withMinResources(g *schedv1alpha1.PodGroup, r v1.ResourceList) *schedv1alpha1.PodGroup {
	g.Spec.MinResources = r
	return g
}

// TestPreFilter: the manager's answer (core.PodGroupManager.PreFilter),
// message and all, for every pod but a PodGroup of one member, which is let
// through: quorum, gates and the minResources sum, for GPU and CPU gangs.
func TestPreFilter(t *testing.T) {
	// Three 4-GPU, 64-CPU nodes: a is free, b holds two 2-GPU members of
	// gang "own", c one 3-GPU member of gang "other".
	nodes := []*v1.Node{gpuNode("a"), gpuNode("b"), gpuNode("c")}
	gated := utiltesting.MakePod("gated-1", "ns").GPUs(2).PodGroup("gated").Obj()
	gated.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "wait"}}
	cpu := func(name, pg string) *v1.Pod { return utiltesting.MakePod(name, "ns").PodGroup(pg).Obj() }
	gpu := func(name, pg string, n int64) *v1.Pod {
		return utiltesting.MakePod(name, "ns").GPUs(n).PodGroup(pg).Obj()
	}
	pods := []*v1.Pod{
		gpu("single-0", "single", 2),
		gpu("gang-0", "gang", 2), gpu("gang-1", "gang", 2),
		gpu("fits-0", "fits", 2), gpu("fits-1", "fits", 2),
		gpu("short-0", "short", 2),
		cpu("cpu-0", "cpu"), cpu("cpu-1", "cpu"),
		cpu("cpufits-0", "cpufits"), cpu("cpufits-1", "cpufits"),
		cpu("mixed-ps", "mixed"), gpu("mixed-worker", "mixed", 2),
		gpu("gated-0", "gated", 2), gated,
		onNode(gpu("own-0", "own", 2), "b"), onNode(gpu("own-1", "own", 2), "b"), gpu("own-2", "own", 2),
		onNode(gpu("other-0", "other", 3), "c"), gpu("other-1", "other", 3),
		gpu("ghost-0", "ghost", 2),
		utiltesting.MakePod("loose", "ns").GPUs(2).Obj(),
	}
	pgs := []*schedv1alpha1.PodGroup{
		// More GPUs than the cluster's 12: the sum says no.
		withMinResources(utiltesting.MakePodGroup("single", "ns", 1).Obj(), gpus(64)),
		withMinResources(utiltesting.MakePodGroup("gang", "ns", 2).Obj(), gpus(64)),
		withMinResources(utiltesting.MakePodGroup("fits", "ns", 2).Obj(), gpus(4)),
		utiltesting.MakePodGroup("short", "ns", 3).Obj(),
		// More CPUs than the cluster's 192.
		withMinResources(utiltesting.MakePodGroup("cpu", "ns", 2).Obj(), v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}),
		withMinResources(utiltesting.MakePodGroup("cpufits", "ns", 2).Obj(), v1.ResourceList{v1.ResourceCPU: resource.MustParse("100")}),
		withMinResources(utiltesting.MakePodGroup("mixed", "ns", 2).Obj(), gpus(64)),
		utiltesting.MakePodGroup("gated", "ns", 2).Obj(),
		// 9 GPUs: the 5 free plus the 4 of its own on b.
		withMinResources(utiltesting.MakePodGroup("own", "ns", 3).Obj(), gpus(9)),
		// 10 GPUs: more than the 5 free and its own 3 on c.
		withMinResources(utiltesting.MakePodGroup("other", "ns", 2).Obj(), gpus(10)),
	}
	const (
		ok     = fwk.Success
		reject = fwk.UnschedulableAndUnresolvable
	)
	want := map[string]fwk.Code{
		"single-0":     ok, // upstream: a resource gap
		"gang-0":       reject,
		"gang-1":       reject,
		"fits-0":       ok,
		"fits-1":       ok,
		"short-0":      reject, // 1 of 3 members
		"cpu-0":        reject, // resource gap
		"cpu-1":        reject,
		"cpufits-0":    ok,
		"cpufits-1":    ok,
		"mixed-ps":     reject,
		"mixed-worker": reject,
		"gated-0":      reject,
		"gated-1":      reject,
		"own-2":        ok,     // counting its own GPUs as free
		"other-1":      reject, // even counting its own
		"ghost-0":      ok,     // no PodGroup: Permit turns it away
		"loose":        ok,
	}
	p, list := newTestPlugin(t, &fakeHandle{}, pods, nodes, pgs...)
	ctx := context.Background()
	got := map[string]fwk.Code{}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" {
			continue
		}
		_, status := p.PreFilter(ctx, nil, pod, list)
		got[pod.Name] = status.Code()
		if _, pg := p.mgr.GetPodGroup(ctx, pod); pg != nil && pg.Spec.MinMember <= 1 {
			continue
		}
		// Everything else is upstream's answer, message and all.
		upstream := fwk.NewStatus(fwk.Success)
		if err := p.mgr.PreFilter(ctx, pod); err != nil {
			upstream = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		if diff := cmp.Diff(upstream.Message(), status.Message()); diff != "" || upstream.Code() != status.Code() {
			t.Errorf("%s: %v, upstream says %v (-upstream,+got):\n%s", pod.Name, status, upstream, diff)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PreFilter codes (-want +got):\n%s", diff)
	}
}

// TestPreFilterAdmits: a PodGroup whose minResources fit is not summed
// again for permitWaitingTimeSeconds, as upstream's manager keeps it,
// unless PostFilter or Unreserve fail it.
func TestPreFilterAdmits(t *testing.T) {
	pods := []*v1.Pod{
		utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(),
		utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(),
	}
	p, list := newTestPlugin(t, &fakeHandle{}, pods, []*v1.Node{gpuNode("a")},
		withMinResources(utiltesting.MakePodGroup("g", "ns", 2).Obj(), gpus(4)))
	now := time.Unix(1000, 0)
	p.admitted = newExpiring(p.scheduleTimeout, func() time.Time { return now })
	ctx := context.Background()
	// full is the node taken by another pod: the sum no longer fits.
	full := nodeWith(gpuNode("a"), onNode(utiltesting.MakePod("other", "ns").GPUs(4).Obj(), "a"))
	var got []fwk.Code
	for _, step := range []struct {
		after time.Duration
		nodes []fwk.NodeInfo
		fail  func()
	}{
		{nodes: list},
		{after: 10 * time.Second, nodes: []fwk.NodeInfo{full}},
		{after: 10 * time.Second, nodes: []fwk.NodeInfo{full}, fail: func() {
			p.Unreserve(ctx, framework.NewCycleState(), pods[1], "a")
		}},
		{nodes: list},
		{after: 10 * time.Second, nodes: []fwk.NodeInfo{full}, fail: func() {
			p.PostFilter(ctx, framework.NewCycleState(), pods[1], nil)
		}},
		{nodes: list},
		{after: 31 * time.Second, nodes: []fwk.NodeInfo{full}},
	} {
		now = now.Add(step.after)
		if step.fail != nil {
			step.fail()
		}
		_, status := p.PreFilter(ctx, nil, pods[0], step.nodes)
		got = append(got, status.Code())
	}
	ok, reject := fwk.Success, fwk.UnschedulableAndUnresolvable
	want := []fwk.Code{ok, ok, reject, ok, reject, ok, reject}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PreFilter codes over time (-want,+got):\n%s", diff)
	}
}

// TestPreFilterBackoff: with podGroupBackoffSeconds, a gang that failed at
// PostFilter is turned away until its backoff ends; a failure during the
// backoff does not extend it.
func TestPreFilterBackoff(t *testing.T) {
	pods := []*v1.Pod{
		utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(),
		utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(),
	}
	p, list := newTestPlugin(t, &fakeHandle{}, pods, []*v1.Node{gpuNode("a")},
		withMinResources(utiltesting.MakePodGroup("g", "ns", 2).Obj(), gpus(4)))
	now := time.Unix(1000, 0)
	p.backoff = newExpiring(10*time.Second, func() time.Time { return now })
	var got []fwk.Code
	step := func(d time.Duration, fail bool) {
		now = now.Add(d)
		if fail {
			p.PostFilter(context.Background(), nil, pods[1], nil)
		}
		_, status := p.PreFilter(context.Background(), nil, pods[0], list)
		got = append(got, status.Code())
	}
	step(0, false)
	step(0, true)
	step(5*time.Second, true)
	step(5*time.Second, false)
	want := []fwk.Code{fwk.Success, fwk.UnschedulableAndUnresolvable, fwk.UnschedulableAndUnresolvable, fwk.Success}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PreFilter codes over time (-want,+got):\n%s", diff)
	}
}

func nodeWith(node *v1.Node, pods ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// nodeView is what the minResources check reads of a NodeInfo.
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

// TestCheckClusterResource: checkClusterResource gives upstream's
// core.CheckClusterResource's answer, message and all, and leaves the
// scheduler's snapshot as it was.
func TestCheckClusterResource(t *testing.T) {
	// Three 4-GPU nodes: a holds two of gang g's 2-GPU members, b one pod
	// of another gang, c is empty; d has no GPUs.
	pods := []*v1.Pod{
		onNode(utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(), "a"),
		onNode(utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(), "a"),
		onNode(utiltesting.MakePod("h-0", "ns").GPUs(3).PodGroup("h").Obj(), "b"),
		onNode(utiltesting.MakePod("g-0", "other").GPUs(1).PodGroup("g").Obj(), "c"),
	}
	cpuNode := gpuNode("d")
	delete(cpuNode.Status.Allocatable, lockstep.GPUResource)
	snapshot := internalcache.NewSnapshot(pods, []*v1.Node{gpuNode("a"), gpuNode("b"), gpuNode("c"), cpuNode})
	request := func(gpus int64, more v1.ResourceList) v1.ResourceList {
		r := v1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI), v1.ResourcePods: resource.MustParse("4")}
		for k, v := range more {
			r[k] = v
		}
		return r
	}
	// One sum for every case, as the plugin keeps one: the cases' changing
	// resources add columns to it.
	free := &clusterFree{}
	for _, tc := range []struct {
		name    string
		request v1.ResourceList
		gang    string
		wantErr bool
	}{
		{"fits the empty node", request(3, nil), "ns/x", false},
		{"fits the free GPUs of b and c", request(4, nil), "ns/x", false},
		{"needs more than is free", request(5, nil), "ns/x", true},
		{"g counts its own GPUs as free", request(8, nil), "ns/g", false},
		{"g needs more than that", request(9, nil), "ns/g", true},
		{"h counts its own", request(7, nil), "ns/h", false},
		{"only g of its namespace", request(9, nil), "other/g", true},
		{"CPU and memory", request(0, v1.ResourceList{v1.ResourceCPU: resource.MustParse("250"), v1.ResourceMemory: resource.MustParse("2000Gi")}), "ns/x", false},
		{"too much CPU", request(0, v1.ResourceList{v1.ResourceCPU: resource.MustParse("257")}), "ns/x", true},
		{"too many pods", request(0, v1.ResourceList{v1.ResourcePods: resource.MustParse("437")}), "ns/x", true},
		{"a resource no node has", request(0, v1.ResourceList{"example.com/fpga": resource.MustParse("1")}), "ns/x", true},
		{"ephemeral storage no node states", request(0, v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}), "ns/x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := snapshot.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			before := map[string]nodeView{}
			for _, ni := range list {
				before[ni.Node().Name] = viewOf(ni)
			}
			errString := func(err error) string {
				if err == nil {
					return ""
				}
				return err.Error()
			}
			ns, name, _ := strings.Cut(tc.gang, "/")
			want := errString(core.CheckClusterResource(context.Background(), list, tc.request.DeepCopy(), tc.gang))
			got := errString(checkClusterResource(klog.Background(), free, list, tc.request.DeepCopy(), ns, name))
			if (want != "") != tc.wantErr {
				t.Fatalf("upstream: %q, want an error %v", want, tc.wantErr)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("check (-upstream,+ours):\n%s", diff)
			}
			for _, ni := range list {
				if diff := cmp.Diff(before[ni.Node().Name], viewOf(ni)); diff != "" {
					t.Errorf("node %s changed (-before,+after):\n%s", ni.Node().Name, diff)
				}
			}
		})
	}
}

// BenchmarkCheckClusterResource is the minResources check for a 4-GPU
// single-pod gang on 5,000 4-GPU nodes, each full with one 4-GPU pod of
// its own gang, but the last: the scan reads every node, upstream's
// (core.CheckClusterResource) with a copy of each; ours/fresh reads each
// as it is, and ours sums only the nodes that changed since its last
// check, here none (clusterFree), as between two checks of a scheduler
// that bound a few pods in between.
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
	list, err := internalcache.NewSnapshot(pods, nodeObjs).NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	request := v1.ResourceList{lockstep.GPUResource: resource.MustParse("4"), v1.ResourcePods: resource.MustParse("1")}
	free := &clusterFree{}
	for _, check := range []struct {
		name  string
		check func() error
	}{
		{"upstream", func() error {
			return core.CheckClusterResource(context.Background(), list, request.DeepCopy(), "ns/new")
		}},
		{"ours/fresh", func() error {
			return checkClusterResource(klog.Background(), &clusterFree{}, list, request.DeepCopy(), "ns", "new")
		}},
		{"ours", func() error {
			return checkClusterResource(klog.Background(), free, list, request.DeepCopy(), "ns", "new")
		}},
	} {
		b.Run(check.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := check.check(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
