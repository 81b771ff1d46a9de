package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// waitGPUSlice waits for the fake NVIDIA DRA driver's GPU ResourceSlice of
// node and returns it.
func waitGPUSlice(t *testing.T, node string) *resourcev1.ResourceSlice {
	t.Helper()
	slice := &resourcev1.ResourceSlice{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "ResourceSlice of "+node, func(ctx context.Context) (bool, error) {
		return cluster.Client.Get(ctx, client.ObjectKey{Name: agent.GPUSliceName(node)}, slice) == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return slice
}

// TestDRAPodGetsClaimedGPU adds a DGX-1 node of a DRA pool (as in
// models/mixed-dra.yaml) beside the model's device-plugin nodes: the fake
// agent publishes its gpu.nvidia.com ResourceSlice, the scheduler's
// DynamicResources plugin allocates a plain pod's one-GPU claim (from a
// template of DeviceClass gpu.nvidia.com) from it, and the node's
// NodeTopology records that GPU, whose UUID is the device's.
func TestDRAPodGetsClaimedGPU(t *testing.T) {
	ctx := context.Background()
	model := *cluster.Model
	model.Pools = []clustermodel.Pool{{Name: "dra", Profile: "dgx1-v100", GPUDriver: lockstep.GPUDriverDRA, Nodes: 1, NodesPerDomain: map[string]int{}}}
	for _, l := range model.Levels {
		model.Pools[0].NodesPerDomain[l.Name] = 1
	}
	nodes := model.Nodes()
	// The scheduler does not plan device-plugin gangs around DRA nodes yet:
	// it reads their GPUs from NodeTopology. The taint keeps the gangs of
	// tests running beside this one off the node; the pod tolerates it.
	nodes[0].Spec.Taints = []corev1.Taint{{Key: "lockstep.dev/e2e-dra", Effect: corev1.TaintEffectNoSchedule}}
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	node := nodes[0].Name

	slice := waitGPUSlice(t, node)
	if len(slice.Spec.Devices) != 8 || slice.Spec.Pool.Name != node {
		t.Fatalf("slice of %d devices in pool %s, want 8 in %s", len(slice.Spec.Devices), slice.Spec.Pool.Name, node)
	}

	ns := cluster.NewNamespace(t)
	template := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass}}},
		}}},
	}
	if err := cluster.Client.Create(ctx, template); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dra", Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: lockstep.SchedulerName,
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			Tolerations:   []corev1.Toleration{{Key: "lockstep.dev/e2e-dra", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template.Name}},
		},
	}
	cluster.CreatePods(t, pod)
	if got := waitBound(t, ns, pod.Name); got != node {
		t.Fatalf("pod bound to %s, want %s", got, node)
	}

	// The claim the template made, as the scheduler allocated it.
	var claims resourcev1.ResourceClaimList
	if err := cluster.Client.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 || claims.Items[0].Status.Allocation == nil {
		t.Fatalf("claims %+v, want one allocated", claims.Items)
	}
	results := claims.Items[0].Status.Allocation.Devices.Results
	if len(results) != 1 || results[0].Driver != lockstep.DRAGPUDriver || results[0].Pool != node {
		t.Fatalf("allocation %+v, want one %s device of pool %s", results, lockstep.DRAGPUDriver, node)
	}
	device := results[0].Device
	gpu, err := strconv.Atoi(strings.TrimPrefix(device, lockstep.DRAGPUDevicePrefix))
	if err != nil {
		t.Fatalf("allocated device %q is no whole GPU", device)
	}
	uid := podUID(t, ns, pod.Name)
	nt := waitNodeTopology(t, node, "the claimed GPU allocated to the pod", func(nt *v1alpha1.NodeTopology) bool {
		return len(nt.Status.Allocations) == 1 && nt.Status.Allocations[0].PodUID == uid
	})
	if got := nt.Status.Allocations[0].GPUs; len(got) != 1 || int(got[0]) != gpu || nt.Status.FreeGPUs != 7 {
		t.Errorf("NodeTopology allocation %v with %d free, want GPU %d (device %s) and 7 free", got, nt.Status.FreeGPUs, gpu, device)
	}
	for _, d := range slice.Spec.Devices {
		if d.Name == device && *d.Attributes[lockstep.DRAUUIDAttribute].StringValue != nt.Spec.GPUs[gpu].UUID {
			t.Errorf("device %s has uuid %s, NodeTopology GPU %d %s", device, *d.Attributes[lockstep.DRAUUIDAttribute].StringValue, gpu, nt.Spec.GPUs[gpu].UUID)
		}
	}
}
