package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// claimingPod is a pod of ns/name in phase with a container "main" that
// uses a claim and one "sidecar" that does not.
func claimingPod(name string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{
			{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}},
			{Name: "sidecar"},
		}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestDynamicResourcesCondition(t *testing.T) {
	running, pending := claimingPod("train", corev1.PodRunning), claimingPod("next", corev1.PodPending)
	plain := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "plain"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	tests := []struct {
		name   string
		pods   []corev1.Pod
		listed map[string]bool
		status metav1.ConditionStatus
		reason string
	}{
		{"no pods", nil, map[string]bool{}, metav1.ConditionUnknown, v1alpha1.ReasonNoClaimedContainers},
		{"containers without claims", []corev1.Pod{plain}, map[string]bool{"ml/plain/main": false},
			metav1.ConditionUnknown, v1alpha1.ReasonNoClaimedContainers},
		{"claims' devices listed", []corev1.Pod{running, plain},
			map[string]bool{"ml/train/main": true, "ml/train/sidecar": false, "ml/plain/main": false},
			metav1.ConditionTrue, v1alpha1.ReasonKubeletReportsDynamicResources},
		{"claims' devices omitted", []corev1.Pod{running},
			map[string]bool{"ml/train/main": false, "ml/train/sidecar": false},
			metav1.ConditionFalse, v1alpha1.ReasonKubeletOmitsDynamicResources},
		// A pod not running yet has no devices prepared, and one the
		// kubelet does not list (just bound, or gone) says nothing.
		{"claiming pod not running", []corev1.Pod{pending}, map[string]bool{"ml/next/main": false},
			metav1.ConditionUnknown, v1alpha1.ReasonNoClaimedContainers},
		{"claiming pod not listed", []corev1.Pod{running}, map[string]bool{},
			metav1.ConditionUnknown, v1alpha1.ReasonNoClaimedContainers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DynamicResourcesCondition(tc.pods, tc.listed)
			got := []string{c.Type, string(c.Status), c.Reason}
			want := []string{v1alpha1.NodeTopologyDynamicResourcesReported, string(tc.status), tc.reason}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("condition (-want,+got):\n%s\nmessage: %s", diff, c.Message)
			}
			if c.Message == "" {
				t.Error("condition without a message")
			}
		})
	}
}

// TestRealAgentPublishesClaimedGPUs publishes a report whose kubelet lists
// a DRA pod's devices: the devices, named after minor numbers, are joined
// to GPUs through the node's ResourceSlice (not taken as indexes), the
// allocation and freeGPUs show them, and the condition says the kubelet
// reports them. The same node with a kubelet that omits them publishes no
// such allocation, and the condition turns False with a new transition
// time.
func TestRealAgentPublishesClaimedGPUs(t *testing.T) {
	ctx := context.Background()
	report := hgxReport(t)
	report.GPUHealth[7] = discovery.GPUHealth{Index: 7, State: discovery.GPUHealthy}
	for i := range report.Topology.GPUs {
		report.Topology.GPUs[i].UUID = fmt.Sprintf("GPU-real-%d", i)
	}
	report.Allocations = []discovery.Allocation{{Namespace: "ml", Pod: "train", Container: "main", ClaimDevices: []discovery.ClaimDevice{
		{Claim: "ml/train-gpus", Pool: "gpu-0", Device: "gpu-0"}, {Claim: "ml/train-gpus", Pool: "gpu-0", Device: "gpu-1"}}}}
	report.DynamicResources = map[string]bool{"ml/train/main": true, "ml/train/sidecar": false}

	// The driver's gpu-<minor> is GPU 7-minor here.
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-0-gpu.nvidia.com-x"},
		Spec: resourcev1.ResourceSliceSpec{Driver: lockstep.DRAGPUDriver, NodeName: ptr("gpu-0"),
			Pool: resourcev1.ResourcePool{Name: "gpu-0", ResourceSliceCount: 1}},
	}
	for minor := range 8 {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", minor),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				lockstep.DRAUUIDAttribute: {StringValue: ptr(fmt.Sprintf("GPU-real-%d", 7-minor))}}})
	}
	other := slice.DeepCopy()
	other.Name, other.Spec.NodeName, other.Spec.Pool.Name = "gpu-1-gpu.nvidia.com-x", ptr("gpu-1"), "gpu-1"
	other.Spec.Devices = other.Spec.Devices[:1]
	pod := claimingPod("train", corev1.PodRunning)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", UID: "node-uid"}}

	c := fake.NewClientBuilder().WithScheme(agentScheme(t)).WithObjects(node, &pod, slice, other).
		WithStatusSubresource(&v1alpha1.NodeTopology{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithIndex(&resourcev1.ResourceSlice{}, "spec.nodeName", func(o client.Object) []string {
			return []string{deref(o.(*resourcev1.ResourceSlice).Spec.NodeName)}
		}).
		WithIndex(&resourcev1.ResourceSlice{}, "spec.driver", func(o client.Object) []string {
			return []string{o.(*resourcev1.ResourceSlice).Spec.Driver}
		}).Build()
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	a := &RealAgent{Client: c, NodeName: "gpu-0",
		Publisher: &Publisher{Client: c, Clock: clock, HeartbeatInterval: time.Minute, Mode: "real"}}

	publish := func() v1alpha1.NodeTopologyStatus {
		t.Helper()
		if _, err := a.publish(ctx, report); err != nil {
			t.Fatal(err)
		}
		nt := &v1alpha1.NodeTopology{}
		if err := c.Get(ctx, client.ObjectKey{Name: "gpu-0"}, nt); err != nil {
			t.Fatal(err)
		}
		return nt.Status
	}
	status := publish()
	want := []v1alpha1.GPUAllocation{{Namespace: "ml", Pod: "train", PodUID: "uid-train", GPUs: []int32{6, 7}}}
	if diff := cmp.Diff(want, status.Allocations); diff != "" {
		t.Errorf("allocations (-want,+got):\n%s", diff)
	}
	if status.FreeGPUs != 6 {
		t.Errorf("freeGPUs = %d, want 6", status.FreeGPUs)
	}
	cond := meta.FindStatusCondition(status.Conditions, v1alpha1.NodeTopologyDynamicResourcesReported)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("conditions %+v, want DynamicResourcesReported True", status.Conditions)
	}
	since := cond.LastTransitionTime

	// The same kubelet a heartbeat later: the transition time stays.
	clock.Step(2 * time.Minute)
	if got := meta.FindStatusCondition(publish().Conditions, v1alpha1.NodeTopologyDynamicResourcesReported); !got.LastTransitionTime.Equal(&since) {
		t.Errorf("transition time moved from %v to %v without a change", since, got.LastTransitionTime)
	}

	// A kubelet that omits claims' devices.
	clock.Step(time.Minute)
	report.Allocations = nil
	report.DynamicResources = map[string]bool{"ml/train/main": false, "ml/train/sidecar": false}
	status = publish()
	if len(status.Allocations) != 0 || status.FreeGPUs != 8 {
		t.Errorf("allocations %v, freeGPUs %d from a kubelet that lists no devices, want none and 8", status.Allocations, status.FreeGPUs)
	}
	cond = meta.FindStatusCondition(status.Conditions, v1alpha1.NodeTopologyDynamicResourcesReported)
	wantCond := metav1.Condition{Type: v1alpha1.NodeTopologyDynamicResourcesReported, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonKubeletOmitsDynamicResources, LastTransitionTime: metav1.NewTime(clock.Now())}
	if diff := cmp.Diff(&wantCond, cond, cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
		t.Errorf("condition (-want,+got):\n%s", diff)
	}
}

func toPtr[T any](v T) *T { return &v }
