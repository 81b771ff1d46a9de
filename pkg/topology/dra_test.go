package topology

import (
	"fmt"
	"strings"
	"testing"
)

// uuidNode is a node of n GPUs whose UUIDs are uuids (n = len(uuids)).
func uuidNode(uuids ...string) *NodeTopology {
	node := &NodeTopology{GPUs: make([]GPU, len(uuids))}
	for i, u := range uuids {
		node.GPUs[i] = GPU{Index: i, UUID: u}
	}
	return node
}

func gpuDevice(name, uuid string) DRADevice {
	return DRADevice{Driver: "gpu.nvidia.com", Name: name, UUID: uuid}
}

func TestJoinDRADevices(t *testing.T) {
	tests := []struct {
		name    string
		node    *NodeTopology
		devices []DRADevice
		want    DRAJoin
	}{
		{
			name:    "every GPU published",
			node:    uuidNode("GPU-a", "GPU-b"),
			devices: []DRADevice{gpuDevice("gpu-0", "GPU-a"), gpuDevice("gpu-1", "GPU-b")},
			want:    DRAJoin{GPUs: map[string]int{"gpu-0": 0, "gpu-1": 1}},
		},
		{
			// The driver names GPUs by minor number, which need not follow
			// NVML's index order: the UUID decides.
			name:    "minor numbers differ from indexes",
			node:    uuidNode("GPU-a", "GPU-b"),
			devices: []DRADevice{gpuDevice("gpu-0", "GPU-b"), gpuDevice("gpu-1", "GPU-a")},
			want:    DRAJoin{GPUs: map[string]int{"gpu-0": 1, "gpu-1": 0}},
		},
		{
			name: "other drivers' devices are skipped",
			node: uuidNode("GPU-a"),
			devices: []DRADevice{
				{Driver: "compute-domain.nvidia.com", Name: "channel-0"},
				gpuDevice("gpu-0", "GPU-a"),
			},
			want: DRAJoin{GPUs: map[string]int{"gpu-0": 0}},
		},
		{
			name: "devices that cannot join",
			node: uuidNode("GPU-a", "GPU-b", "GPU-c"),
			devices: []DRADevice{
				gpuDevice("gpu-0", "GPU-a"),
				gpuDevice("gpu-0", "GPU-b"),
				gpuDevice("gpu-1", ""),
				gpuDevice("gpu-2-mig-9-4-2", "MIG-x"),
				gpuDevice("gpu-3", "GPU-a"),
			},
			want: DRAJoin{
				GPUs: map[string]int{"gpu-0": 0},
				Unjoined: []UnjoinedDevice{
					{gpuDevice("gpu-0", "GPU-b"), `device name "gpu-0" appears twice`},
					{gpuDevice("gpu-1", ""), "no uuid attribute"},
					{gpuDevice("gpu-2-mig-9-4-2", "MIG-x"), "uuid MIG-x names no GPU of the node"},
					{gpuDevice("gpu-3", "GPU-a"), "uuid GPU-a is GPU 0's, already joined to device gpu-0"},
				},
				Unpublished: []int{1, 2},
			},
		},
		{
			name:    "GPUs without a UUID or sharing one join nothing",
			node:    uuidNode("", "GPU-x", "GPU-x", "GPU-d"),
			devices: []DRADevice{gpuDevice("gpu-1", "GPU-x"), gpuDevice("gpu-3", "GPU-d")},
			want: DRAJoin{
				GPUs:        map[string]int{"gpu-3": 3},
				Unjoined:    []UnjoinedDevice{{gpuDevice("gpu-1", "GPU-x"), "uuid GPU-x is shared by several GPUs of the node"}},
				Unpublished: []int{0, 1, 2},
			},
		},
		{
			name: "no devices",
			node: uuidNode("GPU-a", "GPU-b"),
			want: DRAJoin{GPUs: map[string]int{}, Unpublished: []int{0, 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := JoinDRADevices(tc.node, "gpu.nvidia.com", tc.devices)
			if d := diff(tc.want, got); d != "" {
				t.Errorf("JoinDRADevices (-want,+got):\n%s", d)
			}
		})
	}
}

// FuzzJoinDRADevices checks the join's invariants on arbitrary nodes and
// device lists: a joined device's UUID is its GPU's, no GPU is joined
// twice, every device of the driver is joined or reported exactly once,
// and Unpublished is exactly the GPUs nothing joined.
func FuzzJoinDRADevices(f *testing.F) {
	f.Add("a,b,c", "gpu-0=a;gpu-1=b;gpu-2=c")
	f.Add("a,a,", "gpu-0=a;gpu-0=b;x/gpu-1=a;gpu-2=")
	f.Add("", "gpu-0=z")
	f.Fuzz(func(t *testing.T, gpus, devices string) {
		var uuids []string
		if gpus != "" {
			uuids = strings.Split(gpus, ",")
		}
		node := uuidNode(uuids...)
		var devs []DRADevice
		for _, spec := range strings.Split(devices, ";") {
			d := DRADevice{Driver: "gpu.nvidia.com"}
			if drv, rest, ok := strings.Cut(spec, "/"); ok {
				d.Driver, spec = drv, rest
			}
			d.Name, d.UUID, _ = strings.Cut(spec, "=")
			devs = append(devs, d)
		}
		join := JoinDRADevices(node, "gpu.nvidia.com", devs)

		joined := map[int]bool{}
		for name, gpu := range join.GPUs {
			if gpu < 0 || gpu >= len(node.GPUs) {
				t.Fatalf("device %s joined to GPU %d of %d", name, gpu, len(node.GPUs))
			}
			if joined[gpu] {
				t.Fatalf("GPU %d joined twice: %v", gpu, join.GPUs)
			}
			joined[gpu] = true
			found := false
			for _, d := range devs {
				if d.Name == name && d.Driver == "gpu.nvidia.com" && d.UUID == node.GPUs[gpu].UUID && d.UUID != "" {
					found = true
				}
			}
			if !found {
				t.Fatalf("device %s joined to GPU %d (uuid %q) without a device of that uuid", name, gpu, node.GPUs[gpu].UUID)
			}
		}
		ours := 0
		for _, d := range devs {
			if d.Driver == "gpu.nvidia.com" {
				ours++
			}
		}
		if got := len(join.GPUs) + len(join.Unjoined); got != ours {
			t.Fatalf("%d joined + %d unjoined, want the driver's %d devices", len(join.GPUs), len(join.Unjoined), ours)
		}
		var unpublished []int
		for i := range node.GPUs {
			if !joined[i] {
				unpublished = append(unpublished, i)
			}
		}
		if d := diff(unpublished, join.Unpublished); d != "" {
			t.Fatalf("Unpublished (-want,+got):\n%s", d)
		}
	})
}

func TestProfileGPUIdentity(t *testing.T) {
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			id, ok := p.GPUIdentity()
			if !ok {
				t.Fatal("no GPU identity")
			}
			if id.Name == "" || id.Brand == "" || id.Architecture == "" || id.ComputeCapability == "" {
				t.Errorf("incomplete identity %+v", id)
			}
			if got := labelForm(id.Name); got != p.GPUProduct {
				t.Errorf("name %q in label form is %q, want the profile's GPUProduct %q", id.Name, got, p.GPUProduct)
			}
			node := mustNode(t, p.Name)
			if len(id.PCIeRoots) != len(node.GPUs) {
				t.Fatalf("%d PCIe roots for %d GPUs", len(id.PCIeRoots), len(node.GPUs))
			}
			// A root complex belongs to one socket.
			numa := map[string]int{}
			for i, root := range id.PCIeRoots {
				if n, ok := numa[root]; ok && n != node.GPUs[i].NUMANode {
					t.Errorf("root %s holds GPUs of NUMA nodes %d and %d", root, n, node.GPUs[i].NUMANode)
				}
				numa[root] = node.GPUs[i].NUMANode
			}
		})
	}
	dgx1, _ := LookupProfile("dgx1-v100")
	id, _ := dgx1.GPUIdentity()
	if d := diff([]string{"pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", "pci0000:80", "pci0000:80"}, id.PCIeRoots); d != "" {
		t.Errorf("DGX-1 roots: one per socket, GPUs 0-3 and 4-7 (-want,+got):\n%s", d)
	}
	if _, ok := (Profile{Name: "none"}).GPUIdentity(); ok {
		t.Error("an unknown profile has an identity")
	}
}

// labelForm is GPU feature discovery's label value of an NVML name.
func labelForm(name string) string {
	return strings.ReplaceAll(name, " ", "-")
}

func BenchmarkJoinDRADevices(b *testing.B) {
	node := uuidNode()
	var devs []DRADevice
	for i := range 8 {
		node.GPUs = append(node.GPUs, GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)})
		devs = append(devs, gpuDevice(fmt.Sprintf("gpu-%d", i), node.GPUs[i].UUID))
	}
	devs = append(devs, DRADevice{Driver: "compute-domain.nvidia.com", Name: "channel-0"})
	b.ReportAllocs()
	for b.Loop() {
		if j := JoinDRADevices(node, "gpu.nvidia.com", devs); len(j.GPUs) != 8 {
			b.Fatalf("joined %d", len(j.GPUs))
		}
	}
}
