package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// quantityEqual compares quantities by value: cmp cannot see their fields.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// draNode is a simulated node of a DRA pool.
func draNode(name, profile string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{lockstep.LabelProfile: profile, lockstep.LabelGPUDriver: lockstep.GPUDriverDRA},
	}}
}

// profileHardware is what the fake agent discovers for node.
func profileHardware(t testing.TB, node *corev1.Node) (*topology.NodeTopology, topology.GPUIdentity) {
	t.Helper()
	profile, ok := topology.LookupProfile(node.Labels[lockstep.LabelProfile])
	if !ok {
		t.Fatalf("no profile %q", node.Labels[lockstep.LabelProfile])
	}
	report, err := discovery.ProfileBackend{Profile: profile, NodeName: node.Name}.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, ok := profile.GPUIdentity()
	if !ok {
		t.Fatalf("profile %s has no GPU identity", profile.Name)
	}
	return &report.Topology, id
}

// gpuDevice is the device NVIDIA's kubelet plugin publishes for a GPU,
// spelled out attribute by attribute.
type gpuDevice struct {
	minor                       int
	uuid, product, brand, arch  string
	cc, busID, root, addressing string
	memory                      string
}

func (g gpuDevice) device() resourcev1.Device {
	s := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }
	v := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{VersionValue: &v} }
	return resourcev1.Device{
		Name: fmt.Sprintf("gpu-%d", g.minor),
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":                            s("gpu"),
			"uuid":                            s(g.uuid),
			"productName":                     s(g.product),
			"brand":                           s(g.brand),
			"architecture":                    s(g.arch),
			"cudaComputeCapability":           v(g.cc),
			"driverVersion":                   v("570.148.8"),
			"cudaDriverVersion":               v("12.8.0"),
			"pcieBusID":                       s(g.busID),
			"addressingMode":                  s(g.addressing),
			"resource.kubernetes.io/pcieRoot": s(g.root),
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
			"memory": {Value: resource.MustParse(g.memory)},
		},
	}
}

func TestGPUResourceSlice(t *testing.T) {
	v100 := func(minor int, bus, root string) gpuDevice {
		return gpuDevice{minor: minor, uuid: fmt.Sprintf("GPU-fake-dgx1-0-%d", minor), product: "Tesla V100-SXM2-32GB",
			brand: "Tesla", arch: "Volta", cc: "7.0.0", busID: bus, root: root, memory: "32Gi"}
	}
	gb200 := func(minor int, bus, root string) gpuDevice {
		return gpuDevice{minor: minor, uuid: fmt.Sprintf("GPU-fake-gb200-00-%d", minor), product: "NVIDIA GB200",
			brand: "Nvidia", arch: "Blackwell", cc: "10.0.0", busID: bus, root: root, addressing: "ATS", memory: "189471Mi"}
	}
	tests := []struct {
		node    *corev1.Node
		devices []gpuDevice
	}{
		{
			// GPUs 0-3 under socket 0's root complex, 4-7 under socket 1's.
			node: draNode("dgx1-0", "dgx1-v100"),
			devices: []gpuDevice{
				v100(0, "0000:06:00.0", "pci0000:00"), v100(1, "0000:07:00.0", "pci0000:00"),
				v100(2, "0000:0a:00.0", "pci0000:00"), v100(3, "0000:0b:00.0", "pci0000:00"),
				v100(4, "0000:85:00.0", "pci0000:80"), v100(5, "0000:86:00.0", "pci0000:80"),
				v100(6, "0000:89:00.0", "pci0000:80"), v100(7, "0000:8a:00.0", "pci0000:80"),
			},
		},
		{
			// Each GPU is a PCI domain of its own.
			node: draNode("gb200-00", "gb200-nvl72"),
			devices: []gpuDevice{
				gb200(0, "0008:01:00.0", "pci0008:00"), gb200(1, "0009:01:00.0", "pci0009:00"),
				gb200(2, "0018:01:00.0", "pci0018:00"), gb200(3, "0019:01:00.0", "pci0019:00"),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.node.Labels[lockstep.LabelProfile], func(t *testing.T) {
			hw, id := profileHardware(t, tc.node)
			want := &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: tc.node.Name + "-gpu.nvidia.com",
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: tc.node.Name, UID: tc.node.UID, Controller: ptr(true),
					}},
				},
				Spec: resourcev1.ResourceSliceSpec{
					Driver:   "gpu.nvidia.com",
					Pool:     resourcev1.ResourcePool{Name: tc.node.Name, Generation: 1, ResourceSliceCount: 1},
					NodeName: ptr(tc.node.Name),
				},
			}
			for _, d := range tc.devices {
				want.Spec.Devices = append(want.Spec.Devices, d.device())
			}
			got := GPUResourceSlice(tc.node, hw, id)
			if diff := cmp.Diff(want, got, quantityEqual); diff != "" {
				t.Errorf("GPUResourceSlice (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSemverAndBusID(t *testing.T) {
	tests := []struct{ in, semver, busID string }{
		{in: "570.148.08", semver: "570.148.8"},
		{in: "12.8", semver: "12.8.0"},
		{in: "10.0", semver: "10.0.0"},
		{in: "00000000:2A:00.0", busID: "0000:2a:00.0"},
		{in: "00000018:01:00.0", busID: "0018:01:00.0"},
		{in: "0000", busID: "0000"},
	}
	for _, tc := range tests {
		if tc.semver != "" {
			if got := semver(tc.in); got != tc.semver {
				t.Errorf("semver(%q) = %q, want %q", tc.in, got, tc.semver)
			}
		}
		if tc.busID != "" {
			if got := nvlibBusID(tc.in); got != tc.busID {
				t.Errorf("nvlibBusID(%q) = %q, want %q", tc.in, got, tc.busID)
			}
		}
	}
}

func BenchmarkGPUResourceSlice(b *testing.B) {
	node := draNode("dgx1-0", "dgx1-v100")
	hw, id := profileHardware(b, node)
	b.ReportAllocs()
	for b.Loop() {
		if s := GPUResourceSlice(node, hw, id); len(s.Spec.Devices) != 8 {
			b.Fatal(len(s.Spec.Devices))
		}
	}
}

// BenchmarkFakeReconcileDRA is BenchmarkFakeReconcile's node on DRA: a
// DGX-1 whose four pods each hold a claim allocated two of its GPUs.
func BenchmarkFakeReconcileDRA(b *testing.B) {
	node := draNode("dgx1-0", "dgx1-v100")
	objs := []client.Object{node}
	for i := range 4 {
		claim := &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "default"},
			Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
				Results: []resourcev1.DeviceRequestAllocationResult{
					{Request: "gpu", Driver: lockstep.DRAGPUDriver, Pool: node.Name, Device: fmt.Sprintf("gpu-%d", 2*i)},
					{Request: "gpu", Driver: lockstep.DRAGPUDriver, Pool: node.Name, Device: fmt.Sprintf("gpu-%d", 2*i+1)},
				},
			}}},
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-p%d", i))},
			Spec: corev1.PodSpec{
				NodeName:       node.Name,
				Containers:     []corev1.Container{{Name: "c"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr(claim.Name)}},
			},
		}
		objs = append(objs, claim, pod)
	}
	r := benchReconciler(b, objs...)
	benchReconcile(b, r, node.Name)
	nt := &v1alpha1.NodeTopology{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Name: node.Name}, nt); err != nil {
		b.Fatal(err)
	}
	if nt.Status.FreeGPUs != 0 || len(nt.Status.Allocations) != 4 {
		b.Fatalf("free %d, %d allocations; want 0 and 4", nt.Status.FreeGPUs, len(nt.Status.Allocations))
	}
}
