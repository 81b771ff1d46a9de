package coscheduling

import (
	"context"
	"fmt"
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
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/scheduler-plugins/apis/config"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
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
// bound ones also on the snapshot's nodes, and PodGroups pgs.
func newTestPlugin(t testing.TB, h *fakeHandle, pods []*v1.Pod, nodes []*v1.Node, pgs ...*schedv1alpha1.PodGroup) *Coscheduling {
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
	p := newPlugin(h, &config.CoschedulingArgs{PermitWaitingTimeSeconds: 30, PodGroupRejectPercentage: 10}, podInformer)
	p.mgr = core.NewPodGroupManager(newPodGroupClient(t, pgs...), internalcache.NewSnapshot(bound, nodes), &p.scheduleTimeout, podgroupindex.Informer(podInformer))
	return p
}

func gpus(n int64) v1.ResourceList {
	return v1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

func withMinResources(g *schedv1alpha1.PodGroup, r v1.ResourceList) *schedv1alpha1.PodGroup {
	g.Spec.MinResources = r
	return g
}

// TestPreFilter: upstream's answer for every pod TopologyPlacement does not
// plan, and for every pod of a profile without TopologyPlacement; for a pod
// it plans, upstream's answer without the minResources sum; and a PodGroup
// of one member let through.
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
		gpu("shortbig-0", "shortbig", 2),
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
		// More GPUs than the cluster's 12: upstream's sum says no.
		withMinResources(utiltesting.MakePodGroup("single", "ns", 1).Obj(), gpus(64)),
		withMinResources(utiltesting.MakePodGroup("gang", "ns", 2).Obj(), gpus(64)),
		withMinResources(utiltesting.MakePodGroup("fits", "ns", 2).Obj(), gpus(4)),
		utiltesting.MakePodGroup("short", "ns", 3).Obj(),
		withMinResources(utiltesting.MakePodGroup("shortbig", "ns", 3).Obj(), gpus(64)),
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
	// want is the code in a profile with TopologyPlacement and without.
	type want struct{ With, Without fwk.Code }
	wants := map[string]want{
		"single-0":     {ok, ok},
		"gang-0":       {ok, reject}, // resource gap, left to TopologyPlacement
		"gang-1":       {ok, reject},
		"fits-0":       {ok, ok},
		"fits-1":       {ok, ok},
		"short-0":      {reject, reject}, // 1 of 3 members
		"shortbig-0":   {reject, reject}, // the sum skipped, not the quorum
		"cpu-0":        {reject, reject}, // resource gap: CPU pods are not planned
		"cpu-1":        {reject, reject},
		"cpufits-0":    {ok, ok},
		"cpufits-1":    {ok, ok},
		"mixed-ps":     {reject, reject}, // the parameter server still checks the sum
		"mixed-worker": {ok, reject},
		"gated-0":      {reject, reject},
		"gated-1":      {reject, reject},
		"own-2":        {ok, ok},     // counting its own GPUs as free
		"other-1":      {ok, reject}, // even counting its own
		"ghost-0":      {ok, ok},     // no PodGroup: Permit turns it away
		"loose":        {ok, ok},
	}
	got := map[string]want{}
	for _, profile := range []struct {
		name      string
		preFilter []string
	}{
		{"with TopologyPlacement", []string{Name, topologyplacement.Name}},
		{"without", []string{Name}},
	} {
		p := newTestPlugin(t, &fakeHandle{preFilter: profile.preFilter}, pods, nodes, pgs...)
		for _, pod := range pods {
			if pod.Spec.NodeName != "" {
				continue
			}
			_, status := p.PreFilter(context.Background(), nil, pod, nil)
			w := got[pod.Name]
			withPlanner := profile.preFilter[len(profile.preFilter)-1] == topologyplacement.Name
			if withPlanner {
				w.With = status.Code()
			} else {
				w.Without = status.Code()
			}
			got[pod.Name] = w
			planned := withPlanner && topologyplacement.Plans(pod)
			var pg *schedv1alpha1.PodGroup
			for _, g := range pgs {
				if g.Name == pod.Labels[schedv1alpha1.PodGroupLabel] {
					pg = g
				}
			}
			if planned || pg != nil && pg.Spec.MinMember <= 1 {
				continue
			}
			// Everything else is upstream's answer, message and all.
			upstream := fwk.NewStatus(fwk.Success)
			if err := p.mgr.PreFilter(context.Background(), pod); err != nil {
				upstream = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
			}
			if diff := cmp.Diff(upstream.Message(), status.Message()); diff != "" || upstream.Code() != status.Code() {
				t.Errorf("%s, %s: %v, upstream says %v (-upstream,+got):\n%s", profile.name, pod.Name, status, upstream, diff)
			}
		}
	}
	if diff := cmp.Diff(wants, got); diff != "" {
		t.Errorf("PreFilter codes (-want,+got):\n%s", diff)
	}
}

// TestPreFilterBackoff: with podGroupBackoffSeconds, a gang that failed at
// PostFilter is turned away until its backoff ends, also when PreFilter
// skips the manager's check (a planned gang); a failure during the backoff
// does not extend it.
func TestPreFilterBackoff(t *testing.T) {
	pods := []*v1.Pod{
		utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(),
		utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(),
	}
	for _, profile := range [][]string{{Name, topologyplacement.Name}, {Name}} {
		p := newTestPlugin(t, &fakeHandle{preFilter: profile}, pods, []*v1.Node{gpuNode("a")},
			withMinResources(utiltesting.MakePodGroup("g", "ns", 2).Obj(), gpus(4)))
		now := time.Unix(1000, 0)
		p.backoff = newBackoff(10*time.Second, func() time.Time { return now })
		var got []fwk.Code
		step := func(d time.Duration, fail bool) {
			now = now.Add(d)
			if fail {
				p.PostFilter(context.Background(), nil, pods[1], nil)
			}
			_, status := p.PreFilter(context.Background(), nil, pods[0], nil)
			got = append(got, status.Code())
		}
		step(0, false)
		step(0, true)
		step(5*time.Second, true)
		step(5*time.Second, false)
		want := []fwk.Code{fwk.Success, fwk.UnschedulableAndUnresolvable, fwk.UnschedulableAndUnresolvable, fwk.Success}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("profile %v: PreFilter codes over time (-want,+got):\n%s", profile, diff)
		}
	}
}

// BenchmarkPreFilter is PreFilter of a member of a 2 x 2-GPU gang whose
// PodGroup asks minResources of 4 GPUs, on 5,000 4-GPU nodes each full with
// a 4-GPU pod of its own gang but the last: in a profile with
// TopologyPlacement (planned: no sum), and without (upstream's sum, which
// reads every node, its PodGroup admission dropped before each call).
func BenchmarkPreFilter(b *testing.B) {
	const n = 5000
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		nodes = append(nodes, gpuNode(name))
		if i < n-1 {
			pods = append(pods, onNode(utiltesting.MakePod(fmt.Sprintf("p-%d", i), "ns").GPUs(4).PodGroup(fmt.Sprintf("g-%d", i)).Obj(), name))
		}
	}
	gang := []*v1.Pod{
		utiltesting.MakePod("new-0", "ns").GPUs(2).PodGroup("new").Obj(),
		utiltesting.MakePod("new-1", "ns").GPUs(2).PodGroup("new").Obj(),
	}
	pg := withMinResources(utiltesting.MakePodGroup("new", "ns", 2).Obj(), gpus(4))
	for _, profile := range []struct {
		name      string
		preFilter []string
	}{{"planned", []string{Name, topologyplacement.Name}}, {"unplanned", []string{Name}}} {
		b.Run(profile.name, func(b *testing.B) {
			p := newTestPlugin(b, &fakeHandle{preFilter: profile.preFilter}, append(pods, gang...), nodes, pg)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p.mgr.DeletePermittedPodGroup(ctx, "ns/new")
				if _, status := p.PreFilter(ctx, nil, gang[0], nil); !status.IsSuccess() {
					b.Fatal(status)
				}
			}
		})
	}
}
