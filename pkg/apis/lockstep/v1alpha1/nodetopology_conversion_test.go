package v1alpha1

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestSpecRoundTripsEveryProfile(t *testing.T) {
	for _, p := range topology.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			want, err := p.Node()
			if err != nil {
				t.Fatal(err)
			}
			spec := SpecFromTopology(want, p.Name)
			if int(spec.GPUCount) != p.GPUCount || spec.GPUProduct != p.GPUProduct {
				t.Errorf("spec has %d x %q, want %d x %q", spec.GPUCount, spec.GPUProduct, p.GPUCount, p.GPUProduct)
			}
			if n := len(spec.GPUs); len(spec.Links) != n*(n-1)/2 {
				t.Errorf("%d links for %d GPUs, want every pair once", len(spec.Links), n)
			}
			// Through JSON too: what the apiserver stores is what comes back.
			data, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			var decoded NodeTopologySpec
			if err := json.Unmarshal(data, &decoded); err != nil {
				t.Fatal(err)
			}
			got, err := decoded.ToTopology()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestToTopologyRejectsMalformedSpecs(t *testing.T) {
	valid := func() NodeTopologySpec {
		p, _ := topology.LookupProfile("a100-pcie-nvlink")
		node, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		return SpecFromTopology(node, p.Name)
	}
	tests := map[string]func(*NodeTopologySpec){
		"GPU index out of range":            func(s *NodeTopologySpec) { s.GPUs[0].Index = 9 },
		"link to a GPU that does not exist": func(s *NodeTopologySpec) { s.Links[0].B = 8 },
		"link to itself":                    func(s *NodeTopologySpec) { s.Links[0].B = s.Links[0].A },
		"unknown link class":                func(s *NodeTopologySpec) { s.Links[0].Class = "QPI" },
		"missing pair":                      func(s *NodeTopologySpec) { s.Links = s.Links[1:] },
		"negative clique": func(s *NodeTopologySpec) {
			s.NVLinkDomain = &NVLinkDomain{ClusterUUID: "x", CliqueID: -1, BandwidthMBps: 1}
		},
		"NIC path of unknown class": func(s *NodeTopologySpec) {
			s.NICs[0].GPUPaths = []LinkClass{"X", "X", "X", "X", "X", "X", "X", "X"}
		},
	}
	for name, breakSpec := range tests {
		t.Run(name, func(t *testing.T) {
			spec := valid()
			breakSpec(&spec)
			if _, err := spec.ToTopology(); err == nil {
				t.Error("ToTopology accepted a malformed spec")
			}
		})
	}
}

// FuzzNodeTopologyDecode feeds arbitrary JSON through decoding and conversion:
// whatever the apiserver might hand the scheduler, conversion returns a valid
// model or an error, and never panics.
func FuzzNodeTopologyDecode(f *testing.F) {
	for _, p := range topology.Profiles() {
		node, err := p.Node()
		if err != nil {
			f.Fatal(err)
		}
		data, err := json.Marshal(NodeTopology{Spec: SpecFromTopology(node, p.Name)})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"spec":{"gpus":[{"index":0},{"index":0}],"links":[{"a":0,"b":0,"class":"NVLink"}]}}`))
	f.Add([]byte(`{"spec":{"gpus":[{"index":-1}],"nics":[{"nearestGPUs":[5]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj NodeTopology
		if err := json.Unmarshal(data, &obj); err != nil {
			return
		}
		node, err := obj.Spec.ToTopology()
		if err != nil {
			return
		}
		if err := node.Validate(); err != nil {
			t.Fatalf("ToTopology returned an invalid node: %v", err)
		}
	})
}
