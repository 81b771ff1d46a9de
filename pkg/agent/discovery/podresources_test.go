package discovery_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// kubeletPods are the pods of a node as its kubelet reports them: whole
// GPUs by UUID, a time-sliced GPU shared by two pods, a MIG device, the
// index id strategy, a second container, and other resources.
func kubeletPods(gpus []topology.GPU) []*podresourcesv1.PodResources {
	const gpu = lockstep.GPUResource
	trainer := discoverytest.PodWithGPUs("ml", "trainer-0", "pytorch", gpu, gpus[0].UUID, gpus[1].UUID)
	trainer.Containers = append(trainer.Containers, &podresourcesv1.ContainerResources{
		Name:    "sidecar",
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "example.com/fpga", DeviceIds: []string{"fpga0"}}},
	})
	return []*podresourcesv1.PodResources{
		trainer,
		discoverytest.PodWithGPUs("ml", "notebook-a", "jupyter", gpu, gpus[2].UUID+"::0"),
		discoverytest.PodWithGPUs("ml", "notebook-b", "jupyter", gpu, gpus[2].UUID+"::1"),
		discoverytest.PodWithGPUs("infer", "server", "triton", gpu, "MIG-0c0a1c2e-8a3b-5c7d-9e1f-2a3b4c5d6e7f"),
		discoverytest.PodWithGPUs("batch", "by-index", "job", gpu, "5"),
		{Namespace: "kube-system", Name: "no-gpus", Containers: []*podresourcesv1.ContainerResources{{Name: "c"}}},
	}
}

func TestListGPUAllocations(t *testing.T) {
	node := profileNode(t, "hgx-h100")
	socket := discoverytest.ServePodResources(t, &discoverytest.PodResourcesServer{Pods: kubeletPods(node.GPUs)})

	answer, err := discovery.ListGPUAllocations(context.Background(), socket, lockstep.GPUResource, lockstep.DRAGPUDriver)
	if err != nil {
		t.Fatalf("ListGPUAllocations: %v", err)
	}
	got := answer.Allocations
	want := []discovery.Allocation{
		{Namespace: "batch", Pod: "by-index", Container: "job", DeviceIDs: []string{"5"}},
		{Namespace: "infer", Pod: "server", Container: "triton", DeviceIDs: []string{"MIG-0c0a1c2e-8a3b-5c7d-9e1f-2a3b4c5d6e7f"}},
		{Namespace: "ml", Pod: "notebook-a", Container: "jupyter", DeviceIDs: []string{node.GPUs[2].UUID + "::0"}},
		{Namespace: "ml", Pod: "notebook-b", Container: "jupyter", DeviceIDs: []string{node.GPUs[2].UUID + "::1"}},
		{Namespace: "ml", Pod: "trainer-0", Container: "pytorch", DeviceIDs: []string{node.GPUs[0].UUID, node.GPUs[1].UUID}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocations (-want,+got):\n%s", diff)
	}

	resolved, unresolved := discovery.ResolveGPUs(got, node.GPUs)
	wantGPUs := [][]int{{5}, nil, {2}, {2}, {0, 1}}
	for i, a := range resolved {
		if diff := cmp.Diff(wantGPUs[i], a.GPUs); diff != "" {
			t.Errorf("%s/%s GPUs (-want,+got):\n%s", a.Namespace, a.Pod, diff)
		}
	}
	if diff := cmp.Diff([]string{"MIG-0c0a1c2e-8a3b-5c7d-9e1f-2a3b4c5d6e7f"}, unresolved); diff != "" {
		t.Errorf("unresolved ids (-want,+got):\n%s", diff)
	}
	if got[0].GPUs != nil {
		t.Error("ResolveGPUs modified its input")
	}
}

func TestListGPUAllocationsFails(t *testing.T) {
	tests := []struct {
		name     string
		socket   func(t *testing.T) string
		wantText string
	}{
		{
			name:     "no socket",
			socket:   func(t *testing.T) string { return filepath.Join(t.TempDir(), "kubelet.sock") },
			wantText: "mount the kubelet's pod-resources directory",
		},
		{
			name: "kubelet refuses",
			socket: func(t *testing.T) string {
				return discoverytest.ServePodResources(t, &discoverytest.PodResourcesServer{Err: status.Error(codes.PermissionDenied, "denied")})
			},
			wantText: "PermissionDenied",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := discovery.ListGPUAllocations(context.Background(), tc.socket(t), lockstep.GPUResource, lockstep.DRAGPUDriver)
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("ListGPUAllocations error = %v, want one saying %q", err, tc.wantText)
			}
		})
	}
}

// TestDiscoverAllocations checks that Discover lists allocations when given
// the socket, maps them to GPU indices, and reports what it cannot map or
// cannot reach without failing.
func TestDiscoverAllocations(t *testing.T) {
	lib, node := profileNVML(t, "hgx-h100")
	socket := discoverytest.ServePodResources(t, &discoverytest.PodResourcesServer{Pods: kubeletPods(node.GPUs)})
	report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir(), PodResourcesSocket: socket})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if got := len(report.Allocations); got != 5 || report.Allocations[4].Pod != "trainer-0" {
		t.Errorf("allocations = %+v, want the 5 containers holding GPUs", report.Allocations)
	}
	wantWarnings := []string{"allocated nvidia.com/gpu devices that are no GPU of this node: [MIG-0c0a1c2e-8a3b-5c7d-9e1f-2a3b4c5d6e7f]"}
	if diff := cmp.Diff(wantWarnings, report.Warnings); diff != "" {
		t.Errorf("warnings (-want,+got):\n%s", diff)
	}
	if report.Unavailable != nil {
		t.Errorf("unavailable sources %v with a kubelet and a readable sysfs", report.Unavailable)
	}

	lib, _ = profileNVML(t, "hgx-h100")
	report, err = discovery.Discover(context.Background(), discovery.Options{
		NVML: lib, SysfsRoot: t.TempDir(), PodResourcesSocket: filepath.Join(t.TempDir(), "missing.sock"),
	})
	if err != nil {
		t.Fatalf("Discover without a kubelet: %v", err)
	}
	if report.Allocations != nil || len(report.Warnings) != 1 || !strings.HasPrefix(report.Warnings[0], "GPU allocations unknown: ") {
		t.Errorf("without a kubelet: allocations %v, warnings %q; want none and one warning", report.Allocations, report.Warnings)
	}
	if diff := cmp.Diff([]discovery.Source{discovery.SourcePodResources}, report.Unavailable); diff != "" {
		t.Errorf("without a kubelet: unavailable sources (-want,+got):\n%s", diff)
	}
}

// recordedDRAAnswer is testdata/podresources-dra.json: a pod-resources List
// answer in the kubelet's v1 wire format (protojson), as a 1.34 kubelet
// gives it on a node of NVIDIA's DRA driver: a trainer whose container
// holds two GPUs of one claim and a ComputeDomain channel of another, a
// second container without claims, a GPU of a claim shared by name, a MIG
// device, and a DaemonSet pod holding nothing.
func recordedDRAAnswer(t *testing.T) *podresourcesv1.ListPodResourcesResponse {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "podresources-dra.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	if err := protojson.Unmarshal(b, resp); err != nil {
		t.Fatalf("testdata/podresources-dra.json: %v", err)
	}
	return resp
}

// TestListGPUAllocationsDynamicResources reads the recorded answer over the
// kubelet's socket: the GPU driver's devices by claim, pool and name
// (other drivers' left out), every container the kubelet lists with
// whether it listed claims' devices for it, and, joined by the node's
// ResourceSlice (devices named after minor numbers, not NVML indexes), the
// GPUs they are.
func TestListGPUAllocationsDynamicResources(t *testing.T) {
	resp := recordedDRAAnswer(t)
	socket := discoverytest.ServePodResources(t, &discoverytest.PodResourcesServer{Pods: resp.GetPodResources()})
	answer, err := discovery.ListGPUAllocations(context.Background(), socket, lockstep.GPUResource, lockstep.DRAGPUDriver)
	if err != nil {
		t.Fatalf("ListGPUAllocations: %v", err)
	}
	want := []discovery.Allocation{
		{Namespace: "infer", Pod: "mig-user", Container: "triton", ClaimDevices: []discovery.ClaimDevice{
			{Claim: "infer/mig-user-mig-r4t5y", Pool: "gpu-node-1", Device: "gpu-2-mig-1g10gb-19-0"}}},
		{Namespace: "infer", Pod: "shared-a", Container: "server", ClaimDevices: []discovery.ClaimDevice{
			{Claim: "infer/shared-gpu", Pool: "gpu-node-1", Device: "gpu-0"}}},
		{Namespace: "ml", Pod: "trainer-0", Container: "pytorch", ClaimDevices: []discovery.ClaimDevice{
			{Claim: "ml/trainer-0-gpus-x7k2p", Pool: "gpu-node-1", Device: "gpu-3"},
			{Claim: "ml/trainer-0-gpus-x7k2p", Pool: "gpu-node-1", Device: "gpu-7"}}},
	}
	if diff := cmp.Diff(want, answer.Allocations); diff != "" {
		t.Errorf("allocations (-want,+got):\n%s", diff)
	}
	wantListed := map[string]bool{
		"gpu-operator/dcgm-exporter-7xk2m/exporter": false,
		"infer/mig-user/triton":                     true,
		"infer/shared-a/server":                     true,
		"ml/trainer-0/log-shipper":                  false,
		"ml/trainer-0/pytorch":                      true,
	}
	if diff := cmp.Diff(wantListed, answer.DynamicResources); diff != "" {
		t.Errorf("containers listed, with claims' devices (-want,+got):\n%s", diff)
	}

	// gpu-N is the GPU of minor number N: here the reverse of NVML order.
	gpuOf := map[string]int{}
	for minor := range 8 {
		gpuOf[fmt.Sprintf("gpu-%d", minor)] = 7 - minor
	}
	resolved, unresolved := discovery.ResolveClaimDevices(answer.Allocations, "gpu-node-1", gpuOf)
	wantGPUs := [][]int{nil, {7}, {0, 4}}
	for i, a := range resolved {
		if diff := cmp.Diff(wantGPUs[i], a.GPUs); diff != "" {
			t.Errorf("%s/%s GPUs (-want,+got):\n%s", a.Namespace, a.Pod, diff)
		}
	}
	if diff := cmp.Diff([]string{"gpu-node-1/gpu-2-mig-1g10gb-19-0"}, unresolved); diff != "" {
		t.Errorf("unresolved devices (-want,+got):\n%s", diff)
	}
	// Another node's pool is not this node's GPUs.
	if _, unresolved := discovery.ResolveClaimDevices(answer.Allocations[1:2], "gpu-node-2", gpuOf); len(unresolved) != 1 {
		t.Errorf("a device of another node's pool resolved: unresolved %v", unresolved)
	}
}

// TestReadPodResourcesWithoutDynamicResources: the same answer from a
// kubelet whose KubeletPodResourcesDynamicResources feature is off lists
// the containers without claims' devices.
func TestReadPodResourcesWithoutDynamicResources(t *testing.T) {
	resp := recordedDRAAnswer(t)
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			c.DynamicResources = nil
		}
	}
	answer := discovery.ReadPodResources(resp, lockstep.GPUResource, lockstep.DRAGPUDriver)
	if len(answer.Allocations) != 0 {
		t.Errorf("allocations %v from an answer without devices", answer.Allocations)
	}
	if len(answer.DynamicResources) != 5 {
		t.Errorf("listed %d containers, want 5", len(answer.DynamicResources))
	}
	for key, listed := range answer.DynamicResources {
		if listed {
			t.Errorf("container %s listed with claims' devices", key)
		}
	}
}
