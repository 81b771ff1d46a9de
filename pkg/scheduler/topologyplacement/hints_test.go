package topologyplacement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestPodDeleted is the plugin's hint for a deleted pod: skipped when the
// pod held no node (requeue.PodDeleted) or freed room on a node the
// waiting pod cannot use; queued otherwise, and whenever unsure.
func TestPodDeleted(t *testing.T) {
	cordoned := gpuNode("cordoned", 8)
	cordoned.Spec.Unschedulable = true
	tainted := gpuNode("tainted", 8)
	tainted.Spec.Taints = []v1.Taint{{Key: "team", Value: "infra", Effect: v1.TaintEffectNoSchedule}}
	preferNot := gpuNode("prefer-not", 8)
	preferNot.Spec.Taints = []v1.Taint{{Key: "team", Value: "infra", Effect: v1.TaintEffectPreferNoSchedule}}
	zoneB := gpuNode("zone-b", 8)
	zoneB.Labels = map[string]string{"zone": "b"}
	nodes := []*v1.Node{gpuNode("gpu", 8), gpuNode("cpu", 0), cordoned, tainted, preferNot, zoneB}

	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(), 0)
	for _, n := range nodes {
		if err := factory.Core().V1().Nodes().Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := newTestPlugin(t)
	p.handle = &fakeHandle{informers: factory}

	member := func(mutate ...func(*v1.Pod)) *v1.Pod {
		pod := utiltesting.MakePod("m-0", "ml").GPUs(4).PodGroup("train").Obj()
		pod.UID = "waiting"
		for _, m := range mutate {
			m(pod)
		}
		return pod
	}
	on := func(node string, mutate ...func(*v1.Pod)) *v1.Pod {
		pod := utiltesting.MakePod("gone", "other").GPUs(4).Obj()
		pod.UID = types.UID("uid-gone")
		pod.Spec.NodeName = node
		for _, m := range mutate {
			m(pod)
		}
		return pod
	}
	cpuOnly := func(pod *v1.Pod) { pod.Spec.Containers[0].Resources = v1.ResourceRequirements{} }
	sameGang := func(pod *v1.Pod) {
		pod.Namespace, pod.Labels = "ml", map[string]string{"scheduling.x-k8s.io/pod-group": "train"}
	}
	tolerates := func(pod *v1.Pod) {
		pod.Spec.Tolerations = []v1.Toleration{{Key: "team", Operator: v1.TolerationOpEqual, Value: "infra", Effect: v1.TaintEffectNoSchedule}}
	}
	inZoneA := func(pod *v1.Pod) { pod.Spec.NodeSelector = map[string]string{"zone": "a"} }
	nominated := func(pod *v1.Pod) { pod.Spec.NodeName, pod.Status.NominatedNodeName = "", "cpu" }

	tests := []struct {
		name    string
		deleted any
		pending *v1.Pod
		want    fwk.QueueingHint
		wantErr bool
	}{
		{name: "GPU pod on a GPU node", deleted: on("gpu"), pending: member(), want: fwk.Queue},
		{name: "CPU-only pod on a GPU node: CPU, memory or a pod slot may be short", deleted: on("gpu", cpuOnly), pending: member(), want: fwk.Queue},
		{name: "pod on a node without GPUs", deleted: on("cpu", cpuOnly), pending: member(), want: fwk.QueueSkip},
		{name: "tombstone of a pod on a node without GPUs", deleted: cache.DeletedFinalStateUnknown{Key: "other/gone", Obj: on("cpu", cpuOnly)}, pending: member(), want: fwk.QueueSkip},
		{name: "a pod outside gangs asking for no GPUs may use a node without", deleted: on("cpu", cpuOnly), pending: member(cpuOnly, func(p *v1.Pod) { p.Labels = nil }), want: fwk.Queue},
		{name: "the gang's own pod, on a node without GPUs", deleted: on("cpu", cpuOnly, sameGang), pending: member(), want: fwk.Queue},
		{name: "pod on a cordoned node", deleted: on("cordoned"), pending: member(), want: fwk.QueueSkip},
		{name: "pod on a node whose taint the pending pod does not tolerate", deleted: on("tainted"), pending: member(), want: fwk.QueueSkip},
		{name: "pod on a node whose taint the pending pod tolerates", deleted: on("tainted"), pending: member(tolerates), want: fwk.Queue},
		{name: "a PreferNoSchedule taint keeps no pod off", deleted: on("prefer-not"), pending: member(), want: fwk.Queue},
		{name: "pod on a node outside the pending pod's node selector", deleted: on("zone-b"), pending: member(inZoneA), want: fwk.QueueSkip},
		{name: "pod on a node the scheduler does not know", deleted: on("gone-node"), pending: member(), want: fwk.Queue},
		{name: "nominated pod: the nomination freed room", deleted: on("cpu", nominated), pending: member(), want: fwk.Queue},
		{name: "unbound pod held nothing", deleted: on(""), pending: member(), want: fwk.QueueSkip},
		{name: "the pending pod itself", deleted: member(), pending: member(), want: fwk.QueueSkip},
		{name: "not a pod: unsure, so queue", deleted: &v1.Node{}, pending: member(), want: fwk.Queue, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got, err := p.podDeleted(logger, tc.pending, tc.deleted, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hint (-want,+got):\n%s", diff)
			}
		})
	}

	// The plugin registers this hint for deletions.
	logger, _ := ktesting.NewTestContext(t)
	registered := hintOf(t, p, fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete})
	if got, err := registered(logger, member(), on("cpu", cpuOnly), nil); err != nil || got != fwk.QueueSkip {
		t.Errorf("registered hint for a pod on a node without GPUs = %v, %v; want QueueSkip", got, err)
	}

	// Without the scheduler's node informer (a plugin not built by the
	// framework) every deletion of a bound pod queues.
	bare, _ := newTestPlugin(t)
	if got, _ := bare.podDeleted(logger, member(), on("cpu", cpuOnly), nil); got != fwk.Queue {
		t.Errorf("hint without a node informer = %v, want Queue", got)
	}
}
