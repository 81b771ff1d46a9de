package requeue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

type hintCase struct {
	name     string
	old, new any
	want     fwk.QueueingHint
	wantErr  bool
}

func runHint(t *testing.T, fn fwk.QueueingHintFn, pod *v1.Pod, cases []hintCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got, err := fn(logger, pod, tc.old, tc.new)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hint (-want +got):\n%s", diff)
			}
		})
	}
}

// waiting is the pod the queue holds: a member of gang "train" in ns "ml".
func waiting() *v1.Pod {
	p := utiltesting.MakePod("train-0", "ml").GPUs(8).PodGroup("train").Obj()
	p.UID = "waiting"
	return p
}

func pod(name, node string, gpus int64, mutate ...func(*v1.Pod)) *v1.Pod {
	p := utiltesting.MakePod(name, "other").GPUs(gpus).Obj()
	p.UID = types.UID("uid-" + p.Name)
	p.Spec.NodeName = node
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestPodDeleted(t *testing.T) {
	noRequests := func(p *v1.Pod) { p.Spec.Containers[0].Resources = v1.ResourceRequirements{} }
	nominated := func(p *v1.Pod) { p.Status.NominatedNodeName = "n1" }
	finished := func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }
	runHint(t, PodDeleted, waiting(), []hintCase{
		{name: "bound GPU pod", old: pod("a", "n1", 8), want: fwk.Queue},
		{name: "bound CPU-only pod", old: pod("a", "n1", 0), want: fwk.Queue},
		{name: "bound pod without requests frees a pod slot", old: pod("a", "n1", 0, noRequests), want: fwk.Queue},
		{name: "bound pod that finished", old: pod("a", "n1", 8, finished), want: fwk.Queue},
		{name: "tombstone of a bound pod", old: cache.DeletedFinalStateUnknown{Key: "other/a", Obj: pod("a", "n1", 8)}, want: fwk.Queue},
		{name: "nominated pod", old: pod("a", "", 8, nominated), want: fwk.Queue},
		{name: "unbound pod held nothing", old: pod("a", "", 8), want: fwk.QueueSkip},
		{name: "the waiting pod itself", old: waiting(), want: fwk.QueueSkip},
		{name: "not a pod: unsure, so queue", old: &v1.Node{}, want: fwk.Queue, wantErr: true},
	})
}

func TestPodScaledDown(t *testing.T) {
	runHint(t, PodScaledDown, waiting(), []hintCase{
		{name: "bound pod", old: pod("a", "n1", 8), new: pod("a", "n1", 4), want: fwk.Queue},
		{name: "unbound pod", old: pod("a", "", 8), new: pod("a", "", 4), want: fwk.QueueSkip},
		{name: "not a pod", new: &v1.Node{}, want: fwk.Queue, wantErr: true},
	})
}

func node(mutate ...func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{lockstep.LabelFabricTier0: "leaf-0"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:       resource.MustParse("64"),
			lockstep.GPUResource: resource.MustParse("8"),
		}},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func TestNodeChanged(t *testing.T) {
	cordoned := func(n *v1.Node) { n.Spec.Unschedulable = true }
	gpus := func(q string) func(*v1.Node) {
		return func(n *v1.Node) { n.Status.Allocatable[lockstep.GPUResource] = resource.MustParse(q) }
	}
	tainted := func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{{Key: "nvidia.com/gpu", Value: "xid", Effect: v1.TaintEffectNoSchedule}}
	}
	relabelled := func(n *v1.Node) { n.Labels[lockstep.LabelFabricTier0] = "leaf-1" }
	ready := func(n *v1.Node) {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	}
	newResource := func(n *v1.Node) { n.Status.Allocatable["example.com/nic"] = resource.MustParse("1") }
	runHint(t, NodeChanged, waiting(), []hintCase{
		{name: "added", new: node(), want: fwk.Queue},
		{name: "added cordoned", new: node(cordoned), want: fwk.QueueSkip},
		{name: "uncordoned", old: node(cordoned), new: node(), want: fwk.Queue},
		{name: "cordoned", old: node(), new: node(cordoned), want: fwk.QueueSkip},
		{name: "still cordoned, GPUs grew", old: node(cordoned, gpus("4")), new: node(cordoned), want: fwk.QueueSkip},
		{name: "GPUs grew", old: node(gpus("4")), new: node(), want: fwk.Queue},
		{name: "new resource", old: node(), new: node(newResource), want: fwk.Queue},
		{name: "GPUs shrank", old: node(), new: node(gpus("4")), want: fwk.QueueSkip},
		{name: "taint removed", old: node(tainted), new: node(), want: fwk.Queue},
		{name: "taint added", old: node(), new: node(tainted), want: fwk.QueueSkip},
		{name: "labels changed", old: node(), new: node(relabelled), want: fwk.Queue},
		{name: "condition only", old: node(), new: node(ready), want: fwk.QueueSkip},
		{name: "not a node", new: &v1.Pod{}, want: fwk.Queue, wantErr: true},
	})
}

func podGroup(name string, mutate ...func(*schedv1alpha1.PodGroup)) *schedv1alpha1.PodGroup {
	pg := utiltesting.MakePodGroup(name, "ml", 4).Obj()
	for _, m := range mutate {
		m(pg)
	}
	return pg
}

// unstructuredOf is obj as the scheduler's dynamic informers deliver custom
// resources.
func unstructuredOf(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestPodGroupChanged(t *testing.T) {
	minMember := func(n int32) func(*schedv1alpha1.PodGroup) {
		return func(pg *schedv1alpha1.PodGroup) { pg.Spec.MinMember = n }
	}
	minResources := func(pg *schedv1alpha1.PodGroup) {
		pg.Spec.MinResources = v1.ResourceList{lockstep.GPUResource: resource.MustParse("32")}
	}
	status := func(pg *schedv1alpha1.PodGroup) {
		pg.Status.Phase = schedv1alpha1.PodGroupPending
		pg.Status.Running = 1
	}
	level := func(pg *schedv1alpha1.PodGroup) {
		pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: "spine"}
	}
	placed := func(pg *schedv1alpha1.PodGroup) {
		pg.Annotations = map[string]string{"lockstep.dev/placement-domain": "leaf-0"}
	}
	otherNS := func(pg *schedv1alpha1.PodGroup) { pg.Namespace = "other" }
	runHint(t, PodGroupChanged, waiting(), []hintCase{
		{name: "own created", new: podGroup("train"), want: fwk.Queue},
		{name: "own created, unstructured", new: unstructuredOf(t, podGroup("train")), want: fwk.Queue},
		{name: "other gang's created", new: podGroup("eval"), want: fwk.QueueSkip},
		{name: "same name in another namespace", new: podGroup("train", otherNS), want: fwk.QueueSkip},
		{name: "minMember changed", old: podGroup("train"), new: podGroup("train", minMember(2)), want: fwk.Queue},
		{name: "minResources changed", old: podGroup("train", minResources), new: podGroup("train"), want: fwk.Queue},
		{name: "minMember changed, unstructured", old: unstructuredOf(t, podGroup("train")), new: unstructuredOf(t, podGroup("train", minMember(2))), want: fwk.Queue},
		{name: "topology level changed", old: podGroup("train"), new: podGroup("train", level), want: fwk.Queue},
		{name: "status only", old: podGroup("train"), new: podGroup("train", status), want: fwk.QueueSkip},
		{name: "other annotation", old: podGroup("train"), new: podGroup("train", placed), want: fwk.QueueSkip},
		{name: "other gang's spec changed", old: podGroup("eval"), new: podGroup("eval", minMember(2)), want: fwk.QueueSkip},
		{name: "not a PodGroup", new: &v1.Pod{}, want: fwk.Queue, wantErr: true},
	})
}

func TestSiblingChanged(t *testing.T) {
	sibling := func(p *v1.Pod) { p.Namespace = "ml"; p.Labels[schedv1alpha1.PodGroupLabel] = "train" }
	otherGang := func(p *v1.Pod) { p.Namespace = "ml"; p.Labels[schedv1alpha1.PodGroupLabel] = "eval" }
	runHint(t, SiblingChanged, waiting(), []hintCase{
		{name: "sibling added", new: pod("train-1", "", 8, sibling), want: fwk.Queue},
		{name: "sibling ungated", old: pod("train-1", "", 8, sibling), new: pod("train-1", "", 8, sibling), want: fwk.Queue},
		{name: "other gang's pod", new: pod("eval-0", "", 8, otherGang), want: fwk.QueueSkip},
		{name: "same label in another namespace", new: pod("train-1", "", 8, func(p *v1.Pod) { p.Labels[schedv1alpha1.PodGroupLabel] = "train" }), want: fwk.QueueSkip},
		{name: "pod outside gangs", new: pod("x", "n1", 8), want: fwk.QueueSkip},
		{name: "the waiting pod itself", new: waiting(), want: fwk.QueueSkip},
	})
	runHint(t, SiblingChanged, pod("solo", "", 8), []hintCase{
		{name: "waiting pod outside gangs", new: pod("x", "", 8), want: fwk.QueueSkip},
	})
}

func nodeTopology(mutate ...func(*v1alpha1.NodeTopology)) *v1alpha1.NodeTopology {
	nt := &v1alpha1.NodeTopology{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       v1alpha1.NodeTopologySpec{Profile: "hgx-h100", GPUCount: 8},
		Status:     v1alpha1.NodeTopologyStatus{FreeGPUs: 8},
	}
	for _, m := range mutate {
		m(nt)
	}
	return nt
}

func TestNodeTopologyChanged(t *testing.T) {
	allocated := func(gpus ...int32) func(*v1alpha1.NodeTopology) {
		return func(nt *v1alpha1.NodeTopology) {
			nt.Status.Allocations = append(nt.Status.Allocations, v1alpha1.GPUAllocation{Namespace: "other", Pod: "a", GPUs: gpus})
			nt.Status.FreeGPUs -= int32(len(gpus))
		}
	}
	lost := func(gpu int32) func(*v1alpha1.NodeTopology) {
		return func(nt *v1alpha1.NodeTopology) {
			nt.Status.GPUHealth = append(nt.Status.GPUHealth, v1alpha1.GPUHealth{Index: gpu, State: v1alpha1.GPULost})
			nt.Status.FreeGPUs--
		}
	}
	heartbeat := func(nt *v1alpha1.NodeTopology) { nt.Status.HeartbeatTime = metav1.Unix(1000, 0) }
	profile := func(nt *v1alpha1.NodeTopology) { nt.Spec.Profile = "dgx-a100" }
	// freeCountLags keeps the GPU set's change but not the count's.
	freeCountLags := func(nt *v1alpha1.NodeTopology) { nt.Status.FreeGPUs = 0 }
	runHint(t, NodeTopologyChanged, waiting(), []hintCase{
		{name: "created", new: nodeTopology(), want: fwk.Queue},
		{name: "created, unstructured", new: unstructuredOf(t, nodeTopology()), want: fwk.Queue},
		{name: "GPUs released", old: nodeTopology(allocated(0, 1)), new: nodeTopology(), want: fwk.Queue},
		{name: "GPUs released, unstructured", old: unstructuredOf(t, nodeTopology(allocated(0, 1))), new: unstructuredOf(t, nodeTopology()), want: fwk.Queue},
		{name: "GPU healthy again", old: nodeTopology(lost(3)), new: nodeTopology(), want: fwk.Queue},
		{name: "GPU freed while another taken", old: nodeTopology(allocated(0)), new: nodeTopology(allocated(1)), want: fwk.Queue},
		{name: "GPU freed, count not yet", old: nodeTopology(allocated(0), freeCountLags), new: nodeTopology(freeCountLags), want: fwk.Queue},
		{name: "hardware changed", old: nodeTopology(), new: nodeTopology(profile), want: fwk.Queue},
		{name: "GPUs allocated", old: nodeTopology(), new: nodeTopology(allocated(0, 1)), want: fwk.QueueSkip},
		{name: "GPU lost", old: nodeTopology(), new: nodeTopology(lost(2)), want: fwk.QueueSkip},
		{name: "heartbeat", old: nodeTopology(), new: nodeTopology(heartbeat), want: fwk.QueueSkip},
		{name: "not a NodeTopology", new: &v1.Pod{}, want: fwk.Queue, wantErr: true},
	})
}

func TestClaimFreed(t *testing.T) {
	claim := func(allocated bool) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-gpus"}}
		if allocated {
			c.Status.Allocation = &resourcev1.AllocationResult{}
		}
		return c
	}
	claiming := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: v1.PodSpec{
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("gpus")}},
	}}
	runHint(t, ClaimFreed, claiming, []hintCase{
		{name: "allocation removed", old: claim(true), new: claim(false), want: fwk.Queue},
		{name: "allocated claim deleted", old: claim(true), want: fwk.Queue},
		{name: "allocated claim deleted, final state unknown", old: cache.DeletedFinalStateUnknown{Obj: claim(true)}, want: fwk.Queue},
		{name: "claim allocated", old: claim(false), new: claim(true), want: fwk.QueueSkip},
		{name: "still allocated", old: claim(true), new: claim(true), want: fwk.QueueSkip},
		{name: "unallocated claim deleted", old: claim(false), want: fwk.QueueSkip},
		{name: "not a claim", old: &v1.Pod{}, new: claim(false), want: fwk.Queue, wantErr: true},
	})
	// A pod that claims nothing cannot use freed devices.
	runHint(t, ClaimFreed, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, []hintCase{
		{name: "pod without claims", old: claim(true), new: claim(false), want: fwk.QueueSkip},
	})
}

func TestSliceChanged(t *testing.T) {
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu.nvidia.com"}}
	claiming := &v1.Pod{Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("gpus")}}}}
	runHint(t, SliceChanged, claiming, []hintCase{{name: "claiming pod", new: slice, want: fwk.Queue}})
	runHint(t, SliceChanged, &v1.Pod{}, []hintCase{{name: "pod without claims", new: slice, want: fwk.QueueSkip}})
}

func TestCapacityEventsAllHinted(t *testing.T) {
	for _, e := range append(CapacityEvents(), DRAEvents()...) {
		if e.QueueingHintFn == nil {
			t.Errorf("%s has no QueueingHintFn", e.Event.Label())
		}
	}
}
