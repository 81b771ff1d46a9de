package topology

import "testing"

func TestProfileNames(t *testing.T) {
	want := []string{"a100-pcie-nvlink", "dgx1-v100", "gb200-nvl72", "hgx-h100", "l40s-pcie"}
	if d := diff(want, ProfileNames()); d != "" {
		t.Errorf("ProfileNames() (-want,+got):\n%s", d)
	}
	for _, name := range want {
		if _, ok := LookupProfile(name); !ok {
			t.Errorf("LookupProfile(%q) not found", name)
		}
	}
	if _, ok := LookupProfile("dgx-a100"); ok {
		t.Error(`LookupProfile("dgx-a100") found a profile that does not exist`)
	}
}

func TestProfilesAreFresh(t *testing.T) {
	Profiles()[0].Name = "changed"
	if got := Profiles()[0].Name; got == "changed" {
		t.Error("mutating the result of Profiles() changed the registry")
	}
	a, b := mustNode(t, "hgx-h100"), mustNode(t, "hgx-h100")
	a.Links[0][1].GBps = 1
	if b.Links[0][1].GBps == 1 {
		t.Error("two Node() calls share their link matrix")
	}
}

func TestProfileNodeUnknown(t *testing.T) {
	if _, err := (Profile{Name: "dgx-a100"}).Node(); err == nil {
		t.Error("Node() of an unknown profile succeeded, want an error")
	}
}

// TestProfileFacts pins the hardware facts each profile encodes, beyond the
// nvidia-smi tokens the matrix test checks.
func TestProfileFacts(t *testing.T) {
	type facts struct {
		// linkGBps counts GPU pairs by per-direction bandwidth.
		linkGBps map[float64]int
		// nvlinksPerGPU is the total NVLink count of each GPU.
		nvlinksPerGPU []int
		nicRates      []int
		numa          []int
		nvlinkDomain  bool
	}
	tests := []struct {
		profile string
		want    facts
	}{
		{
			profile: "hgx-h100",
			want: facts{
				linkGBps: map[float64]int{450: 28},
				// NVSwitch: the count is per GPU, not per pair.
				nvlinksPerGPU: []int{18 * 7, 18 * 7, 18 * 7, 18 * 7, 18 * 7, 18 * 7, 18 * 7, 18 * 7},
				nicRates:      []int{400, 400, 400, 400, 400, 400, 400, 400},
				numa:          []int{0, 0, 0, 0, 1, 1, 1, 1},
			},
		},
		{
			profile: "dgx1-v100",
			want: facts{
				// 8 NV2 pairs, 8 NV1 pairs, 12 SYS pairs.
				linkGBps:      map[float64]int{50: 8, 25: 8, 10: 12},
				nvlinksPerGPU: []int{6, 6, 6, 6, 6, 6, 6, 6},
				nicRates:      []int{100, 100, 100, 100},
				numa:          []int{0, 0, 0, 0, 1, 1, 1, 1},
			},
		},
		{
			profile: "l40s-pcie",
			want: facts{
				// Per socket 2 PIX and 4 NODE pairs; 16 SYS pairs across.
				linkGBps:      map[float64]int{25: 4, 20: 8, 14: 16},
				nvlinksPerGPU: []int{0, 0, 0, 0, 0, 0, 0, 0},
				nicRates:      []int{400, 400, 400, 400},
				numa:          []int{0, 0, 0, 0, 1, 1, 1, 1},
			},
		},
		{
			profile: "a100-pcie-nvlink",
			want: facts{
				// The PIX pairs are the bridged NV12 pairs.
				linkGBps:      map[float64]int{300: 4, 20: 8, 14: 16},
				nvlinksPerGPU: []int{12, 12, 12, 12, 12, 12, 12, 12},
				nicRates:      []int{200, 200, 200, 200},
				numa:          []int{0, 0, 0, 0, 1, 1, 1, 1},
			},
		},
		{
			profile: "gb200-nvl72",
			want: facts{
				linkGBps:      map[float64]int{900: 6},
				nvlinksPerGPU: []int{18 * 3, 18 * 3, 18 * 3, 18 * 3},
				nicRates:      []int{400, 400, 400, 400},
				numa:          []int{0, 0, 1, 1},
				nvlinkDomain:  true,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			node := mustNode(t, tt.profile)
			got := facts{linkGBps: map[float64]int{}, nvlinksPerGPU: make([]int, node.NumGPUs())}
			for i := range node.GPUs {
				got.numa = append(got.numa, node.GPUs[i].NUMANode)
				for j := range node.GPUs {
					if j > i {
						got.linkGBps[node.Link(i, j).GBps]++
					}
					got.nvlinksPerGPU[i] += node.Link(i, j).NVLinks
				}
			}
			for _, nic := range node.NICs {
				got.nicRates = append(got.nicRates, nic.RateGbps)
			}
			got.nvlinkDomain = node.NVLinkDomain != nil
			if d := diff(tt.want, got); d != "" {
				t.Errorf("facts (-want,+got):\n%s", d)
			}
		})
	}
}
