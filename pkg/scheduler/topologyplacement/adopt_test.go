package topologyplacement

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// boundPod is a pod of the default profile bound to node with gpus
// requested and the lockstep.dev/gpus annotation list ("" for none).
func boundPod(name, node string, gpus int64, list string) *v1.Pod {
	pod := utiltesting.MakePod(name, "ns").GPUs(gpus).SchedulerName(lockstep.SchedulerName).Obj()
	pod.UID = types.UID("uid-" + name)
	pod.Spec.NodeName = node
	if list != "" {
		pod.Annotations = map[string]string{lockstep.AnnotationGPUs: list}
	}
	return pod
}

// TestAdoption is the adoption rule: a bound pod's lockstep.dev/gpus is
// taken into the books only when this scheduler could have written it.
func TestAdoption(t *testing.T) {
	ours := func(name string) bool {
		return name == lockstep.SchedulerName || name == lockstep.SchedulerPluginsSchedulerName
	}
	foreign := boundPod("ds", "a", 0, "0,1,2,3,4,5,6,7")
	foreign.Spec.SchedulerName = "default-scheduler"
	operator := boundPod("ray", "a", 2, "0,1")
	operator.Spec.SchedulerName = lockstep.SchedulerPluginsSchedulerName
	deleting := boundPod("deleting", "a", 2, "0,1")
	deleting.DeletionTimestamp = &metav1.Time{}
	finished := boundPod("done", "a", 2, "0,1")
	finished.Status.Phase = v1.PodSucceeded
	tests := []struct {
		name     string
		pod      *v1.Pod
		nodeGPUs int
		want     topology.GPUSet
		// wantIgnored is a fragment of the reason; "" when not ignored.
		wantIgnored string
	}{
		{name: "ours, within its request", pod: boundPod("p", "a", 2, "0,1"), nodeGPUs: 8, want: topology.NewGPUSet(0, 1)},
		{name: "the second profile is ours too", pod: operator, nodeGPUs: 8, want: topology.NewGPUSet(0, 1)},
		{name: "fewer than it requests", pod: boundPod("p", "a", 4, "6,7"), nodeGPUs: 8, want: topology.NewGPUSet(6, 7)},
		{name: "node's GPU count unknown", pod: boundPod("p", "a", 2, "0,1"), nodeGPUs: gangmanager.UnknownGPUCount, want: topology.NewGPUSet(0, 1)},
		{name: "no annotation", pod: boundPod("p", "a", 2, "")},
		{name: "not bound", pod: boundPod("p", "", 2, "0,1")},
		{name: "being deleted", pod: deleting, nodeGPUs: 8},
		{name: "finished", pod: finished, nodeGPUs: 8},
		{name: "another scheduler's pod", pod: foreign, nodeGPUs: 8, wantIgnored: `schedulerName is "default-scheduler"`},
		{name: "a DaemonSet-like pod requesting no GPUs", pod: boundPod("ds", "a", 0, "0,1,2,3,4,5,6,7"), nodeGPUs: 8, wantIgnored: "requests no nvidia.com/gpu"},
		{name: "a range is not a GPU list", pod: boundPod("ds", "a", 8, "0-7"), nodeGPUs: 8, wantIgnored: `"0-7" is not a GPU index`},
		{name: "GPUs the node does not have", pod: boundPod("p", "a", 2, "8,9"), nodeGPUs: 8, wantIgnored: "GPUs {8,9} do not exist: the node has 8"},
		{name: "more than it requests", pod: boundPod("p", "a", 2, "0,1,2,3"), nodeGPUs: 8, wantIgnored: "names 4 GPUs, more than the 2 the pod requests"},
	}
	p, _ := newTestPlugin(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ignored := gangmanager.Adoption(tc.pod, p.view.Request(tc.pod).ResourceGPUs(), ours, tc.nodeGPUs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("adopted GPUs (-want,+got):\n%s", diff)
			}
			if tc.wantIgnored == "" && ignored != "" || !strings.Contains(ignored, tc.wantIgnored) {
				t.Errorf("ignored = %q, want it to say %q", ignored, tc.wantIgnored)
			}
			if ignored != "" && !strings.Contains(ignored, lockstep.AnnotationGPUs) {
				t.Errorf("ignored = %q does not name the annotation", ignored)
			}
		})
	}
}

// A pod found bound with GPUs the books do not know (a previous leader's,
// or one whose Binding answer was lost and Unreserve forgot) keeps those
// GPUs from other pods until its NodeTopology shows them; pods the books
// know, unbound pods, finished pods and pods adoption refuses are left
// alone.
func TestAdoptBoundGPUs(t *testing.T) {
	p, _ := newTestPlugin(t)
	p.adoptBoundGPUs(boundPod("lost", "a", 2, "0,1"))
	finished := boundPod("done", "a", 2, "2,3")
	finished.Status.Phase = v1.PodSucceeded
	p.adoptBoundGPUs(finished)
	p.adoptBoundGPUs(boundPod("pending", "", 2, "4,5"))
	p.adoptBoundGPUs(boundPod("daemon", "a", 0, "0,1,2,3,4,5,6,7"))
	p.adoptBoundGPUs(boundPod("greedy", "a", 1, "6,7"))
	if diff := cmp.Diff(topology.NewGPUSet(0, 1), p.gangs.Books.HeldOn("a", "")); diff != "" {
		t.Errorf("GPUs held on a, the lost pod's only (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"uid-daemon/0,1,2,3,4,5,6,7", "uid-greedy/6,7"}, p.ignored.Take()); diff != "" {
		t.Errorf("pods whose annotation was ignored (-want,+got):\n%s", diff)
	}
	// A pod whose allocation its node reports has nothing to guess.
	nt := hgxNodeTopology(t, "c")
	nt.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "ns", Pod: "reported", PodUID: "uid-reported", GPUs: []int32{4, 5}}}
	p.view.Set(nil, nt)
	p.adoptBoundGPUs(boundPod("reported", "c", 2, "0,1"))
	if diff := cmp.Diff(topology.GPUSet(0), p.gangs.Books.HeldOn("c", "")); diff != "" {
		t.Errorf("GPUs held on c, none (-want,+got):\n%s", diff)
	}
	// Known pods keep what the books say.
	p.gangs.Books.Assign("uid-known", "b", topology.NewGPUSet(6, 7))
	p.adoptBoundGPUs(boundPod("known", "b", 2, "0,1"))
	if diff := cmp.Diff(topology.NewGPUSet(6, 7), p.gangs.Books.HeldOn("b", "")); diff != "" {
		t.Errorf("GPUs held on b, as assigned (-want,+got):\n%s", diff)
	}
}

// The agent's allocation replaces the scheduler's choice in the books once
// reported, through the NodeTopology informer's handler.
func TestReportedAllocationReplacesChoice(t *testing.T) {
	p, _ := newTestPlugin(t)
	p.gangs.Books.Assign("uid-p", "a", topology.NewGPUSet(0, 1, 2, 3))
	nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	h := p.view.Handler()
	h.OnAdd(nt, false)
	if diff := cmp.Diff(topology.NewGPUSet(0, 1, 2, 3), p.gangs.Books.HeldOn("a", "")); diff != "" {
		t.Errorf("held before the report: the choice (-want,+got):\n%s", diff)
	}
	reported := nt.DeepCopy()
	reported.Status.Allocations = []v1alpha1.GPUAllocation{
		{Namespace: "ns", Pod: "p", PodUID: "uid-p", GPUs: []int32{4, 5, 6, 7}},
		{Namespace: "ns", Pod: "other", PodUID: "uid-other", GPUs: []int32{0}},
	}
	h.OnUpdate(nt, reported)
	if diff := cmp.Diff(topology.NewGPUSet(4, 5, 6, 7), p.gangs.Books.HeldOn("a", "")); diff != "" {
		t.Errorf("held after the report: the allocation (-want,+got):\n%s", diff)
	}
}
