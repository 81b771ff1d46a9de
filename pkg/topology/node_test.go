package topology

import (
	"strings"
	"testing"
)

func TestProfileNodesValidate(t *testing.T) {
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			node := mustNode(t, p.Name)
			if err := node.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := node.NumGPUs(); got != p.GPUCount {
				t.Errorf("NumGPUs() = %d, want the profile's %d", got, p.GPUCount)
			}
			for _, g := range node.GPUs {
				if g.Product != p.GPUProduct || g.MemoryMiB != p.GPUMemoryMiB {
					t.Errorf("GPU %d is %s/%d MiB, want %s/%d MiB", g.Index, g.Product, g.MemoryMiB, p.GPUProduct, p.GPUMemoryMiB)
				}
			}
		})
	}
}

// twoGPUNode is a small valid node for validation tests to break.
func twoGPUNode() *NodeTopology {
	nv := Link{Class: LinkNVLink, NVLinks: 4, GBps: 100}
	return &NodeTopology{
		GPUs: []GPU{
			{Index: 0, UUID: "GPU-a", NUMANode: 0},
			{Index: 1, UUID: "GPU-b", NUMANode: 0},
		},
		Links: [][]Link{{{}, nv}, {nv, {}}},
		NICs:  []NIC{{Name: "mlx5_0", RateGbps: 200, NUMANode: 0, NearestGPUs: []int{0, 1}}},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(n *NodeTopology)
		// wantErrs are substrings the error must contain; none means valid.
		wantErrs []string
	}{
		{name: "valid", mutate: func(*NodeTopology) {}},
		{
			name:     "no GPUs",
			mutate:   func(n *NodeTopology) { n.GPUs, n.Links, n.NICs = nil, nil, nil },
			wantErrs: []string{"no GPUs"},
		},
		{
			name:     "index out of order",
			mutate:   func(n *NodeTopology) { n.GPUs[1].Index = 5 },
			wantErrs: []string{"gpus[1].index = 5"},
		},
		{
			name:     "duplicate UUID",
			mutate:   func(n *NodeTopology) { n.GPUs[1].UUID = "GPU-a" },
			wantErrs: []string{`gpus[1].uuid "GPU-a" duplicates gpus[0]`},
		},
		{
			name:     "too few rows",
			mutate:   func(n *NodeTopology) { n.Links = n.Links[:1] },
			wantErrs: []string{"links has 1 rows for 2 GPUs"},
		},
		{
			name:     "ragged row",
			mutate:   func(n *NodeTopology) { n.Links[1] = n.Links[1][:1] },
			wantErrs: []string{"links[1] has 1 columns for 2 GPUs"},
		},
		{
			name:     "asymmetric",
			mutate:   func(n *NodeTopology) { n.Links[1][0] = Link{Class: LinkCrossNUMA, GBps: 10} },
			wantErrs: []string{"must be symmetric"},
		},
		{
			name: "unknown class and no bandwidth",
			mutate: func(n *NodeTopology) {
				n.connect(0, 1, Link{})
			},
			wantErrs: []string{"unknown class", "links[0][1].gbps = 0"},
		},
		{
			name:     "NVLink without links",
			mutate:   func(n *NodeTopology) { n.connect(0, 1, Link{Class: LinkNVSwitch, GBps: 450}) },
			wantErrs: []string{"NVSwitch with 0 links"},
		},
		{
			name:     "PCIe with links",
			mutate:   func(n *NodeTopology) { n.connect(0, 1, Link{Class: LinkSameSwitch, NVLinks: 2, GBps: 25}) },
			wantErrs: []string{"only NVLink classes have links"},
		},
		{
			name:     "diagonal set",
			mutate:   func(n *NodeTopology) { n.Links[0][0] = Link{Class: LinkSameSwitch, GBps: 1} },
			wantErrs: []string{"diagonal must be empty"},
		},
		{
			name:     "NIC nearest GPU out of range",
			mutate:   func(n *NodeTopology) { n.NICs[0].NearestGPUs = []int{0, 2} },
			wantErrs: []string{"nics[0].nearestGPUs has GPU 2: want 0..1"},
		},
		{
			name: "NIC problems",
			mutate: func(n *NodeTopology) {
				n.NICs = append(n.NICs, NIC{Name: "mlx5_0", NearestGPUs: []int{1, 1}})
			},
			wantErrs: []string{`nics[1].name "mlx5_0" duplicates nics[0]`, "nics[1].rateGbps = 0", "lists GPU 1 twice"},
		},
		{
			name:     "NIC paths of the wrong length",
			mutate:   func(n *NodeTopology) { n.NICs[0].GPUPaths = []LinkClass{LinkSameSwitch} },
			wantErrs: []string{"gpuPaths has 1 entries for 2 GPUs"},
		},
		{
			name:     "NIC nearest GPU not nearest",
			mutate:   func(n *NodeTopology) { n.NICs[0].GPUPaths = []LinkClass{LinkSameSwitch, LinkCrossNUMA} },
			wantErrs: []string{"nearest GPU 1 is SYS away but GPU paths reach PIX"},
		},
		{
			name:     "NIC over NVLink",
			mutate:   func(n *NodeTopology) { n.NICs[0].GPUPaths = []LinkClass{LinkNVLink, LinkNVLink} },
			wantErrs: []string{"over PCIe classes only"},
		},
		{
			name:     "NVLink domain without identity",
			mutate:   func(n *NodeTopology) { n.NVLinkDomain = &NVLinkDomain{} },
			wantErrs: []string{"clusterUUID is empty", "nvlinkDomain.gbps = 0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := twoGPUNode()
			tt.mutate(n)
			err := n.Validate()
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors containing %q", tt.wantErrs)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestNICPathToDerived(t *testing.T) {
	// Without GPUPaths the NIC columns are derived from nearest GPUs and NUMA.
	n := mustNode(t, "l40s-pcie")
	for i := range n.NICs {
		n.NICs[i].GPUPaths = nil
	}
	want := []LinkClass{LinkSameSwitch, LinkSameSwitch, LinkSameNUMA, LinkSameNUMA, LinkCrossNUMA, LinkCrossNUMA, LinkCrossNUMA, LinkCrossNUMA}
	var got []LinkClass
	for g := range n.GPUs {
		got = append(got, n.NICs[0].PathTo(n, g))
	}
	if d := diff(want, got); d != "" {
		t.Errorf("NIC0 paths (-want,+got):\n%s", d)
	}
}

func TestNVLinkDomainLabel(t *testing.T) {
	d := NVLinkDomain{ClusterUUID: "8e3f7a5c-1b2d-4c6e-9f0a-123456789abc", CliqueID: 32766}
	if got, want := d.Label(), "8e3f7a5c-1b2d-4c6e-9f0a-123456789abc.32766"; got != want {
		t.Errorf("Label() = %q, want %q", got, want)
	}
}
