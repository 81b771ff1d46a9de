package topology

import (
	"sort"
	"sync"
)

// Profile is a built-in hardware profile: what one node of a given machine
// type looks like. Fake nodes are built from it; real nodes are matched to it
// by GPU product.
type Profile struct {
	// Name is the identifier used in cluster models and the
	// lockstep.dev/profile node label, e.g. "hgx-h100".
	Name string
	// Description says which real machine the profile encodes.
	Description string
	// GPUProduct is the nvidia.com/gpu.product label value GPU feature
	// discovery writes for this GPU.
	GPUProduct string
	// GPUCount is the number of GPUs in one node.
	GPUCount int
	// GPUMemoryMiB is the memory of one GPU.
	GPUMemoryMiB int
	// CPUs is the number of logical CPUs of the node.
	CPUs int
	// MemoryGiB is the host memory of the node.
	MemoryGiB int
	// Arch is the node's CPU architecture as Kubernetes names it.
	Arch string
	// NVLinkDomainNodes is how many nodes of this profile share one
	// multi-node NVLink domain (18 trays in a GB200 NVL72 rack); zero when
	// NVLink stops at the node.
	NVLinkDomainNodes int
}

// Profiles returns the built-in hardware profiles sorted by name. It builds a
// fresh slice on every call so callers cannot change the registry. The node
// topology of each profile, and the hardware facts it encodes, are in
// profile_nodes.go.
func Profiles() []Profile {
	return append([]Profile(nil), builtinProfiles()...)
}

// builtinProfiles is the registry that Profiles copies, built once, for
// lookups that must not allocate (rating a plan matches every member's GPU
// product). Callers must not change it.
var builtinProfiles = sync.OnceValue(profiles)

func profiles() []Profile {
	profiles := []Profile{
		{
			Name:         "hgx-h100",
			Description:  "HGX/DGX H100: 8x H100 SXM5 80GB on NVSwitch, 2 sockets",
			GPUProduct:   "NVIDIA-H100-80GB-HBM3",
			GPUCount:     8,
			GPUMemoryMiB: 81559,
			CPUs:         224,
			MemoryGiB:    2048,
			Arch:         "amd64",
		},
		{
			Name:         "dgx1-v100",
			Description:  "DGX-1 V100: 8x V100 SXM2 32GB in a hybrid cube-mesh, 2 sockets",
			GPUProduct:   "Tesla-V100-SXM2-32GB",
			GPUCount:     8,
			GPUMemoryMiB: 32768,
			CPUs:         80,
			MemoryGiB:    512,
			Arch:         "amd64",
		},
		{
			Name:         "l40s-pcie",
			Description:  "8x L40S 48GB on PCIe across two sockets, no NVLink",
			GPUProduct:   "NVIDIA-L40S",
			GPUCount:     8,
			GPUMemoryMiB: 46068,
			CPUs:         128,
			MemoryGiB:    1024,
			Arch:         "amd64",
		},
		{
			Name:         "a100-pcie-nvlink",
			Description:  "8x A100 PCIe 80GB, NVLink bridges joining GPU pairs, 2 sockets",
			GPUProduct:   "NVIDIA-A100-80GB-PCIe",
			GPUCount:     8,
			GPUMemoryMiB: 81920,
			CPUs:         128,
			MemoryGiB:    1024,
			Arch:         "amd64",
		},
		{
			Name:         "gb200-nvl72",
			Description:  "GB200 NVL72 compute tray: 2 Grace CPUs, 4 B200 GPUs, 18 trays per NVLink clique",
			GPUProduct:   "NVIDIA-GB200",
			GPUCount:     4,
			GPUMemoryMiB: 189471,
			CPUs:         144,
			MemoryGiB:    960,
			Arch:         "arm64",
			// 18 compute trays x 4 GPUs = the 72 GPUs of one NVL72 rack.
			NVLinkDomainNodes: 18,
		},
	}
	sort.Slice(profiles, func(i, j int) bool { return profiles[i].Name < profiles[j].Name })
	return profiles
}

// LookupProfile returns the built-in profile with the given name.
func LookupProfile(name string) (Profile, bool) {
	for _, p := range builtinProfiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// ProfileNames returns the names of the built-in profiles, sorted.
func ProfileNames() []string {
	profiles := Profiles()
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.Name
	}
	return names
}
